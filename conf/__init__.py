"""tntrun's Hydra configs, packaged as ``tntrun.conf`` (``pkg://tntrun.conf``)."""
