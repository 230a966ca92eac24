"""The local machine: no scheduler, no host list; one node, ``localhost``."""

from __future__ import annotations

from collections.abc import Mapping

from tntrun.environments import ClusterEnvironment


class LocalEnvironment(ClusterEnvironment):
    name = "local"
    title = "local"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return True
