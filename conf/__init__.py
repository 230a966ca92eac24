"""tntrun's Hydra configs, packaged as ``tntrun.conf`` (``pkg://tntrun.conf``).

Importing the package registers the typed schema the YAML files extend.
"""

from tntrun.config.schema import register

register()
