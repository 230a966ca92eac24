"""Static hosts: the hosts the config lists (``hosts=[a,b]`` or ``hostfile=PATH``).

Never detected from the environment: the config chooses it, over a scheduler's
allocation (a host list inside a Slurm job still runs there, and is still
requeued as that job).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from tntrun.environments import Allocation, ClusterEnvironment, LayoutError

HOST_NAME = re.compile(r"[A-Za-z0-9_.\-]+")  # what hosts= and a hostfile may name


class StaticHosts(ClusterEnvironment):
    name = "static_hosts"
    title = "static hosts"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        """Never: the config chooses it (``hosts``, ``hostfile``)."""
        return False

    def allocation(self) -> Allocation | None:
        if self.requested.get("hosts"):
            hosts = [str(h) for h in self.requested["hosts"]]
            bad = next((h for h in hosts if not HOST_NAME.fullmatch(h)), None)
            if bad is not None:
                raise LayoutError(
                    f"hosts: {bad!r} is no host name (letters, digits, '-', '_' and '.'): "
                    "give hosts=[node1,node2,...]"
                )
            return Allocation("hosts", tuple((h, None) for h in hosts))
        if not self.requested.get("hostfile"):
            return None
        path = Path(self.requested["hostfile"])
        if not path.is_file():
            raise LayoutError(
                f"hostfile={path} does not exist: give an existing file with one host per line"
            )
        return Allocation("hostfile", tuple(parse_hostfile(path.read_text(), str(path))))


def parse_hostfile(text: str, source: str = "hostfile") -> list[tuple[str, int | None]]:
    """Hosts and optional slots from a hostfile.

    One host per line, Tarantella style (``host``), colon style (``host:4``) or
    Horovod/MPI style (``host slots=4``); ``#`` starts a comment.
    """
    hosts: list[tuple[str, int | None]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(rf"({HOST_NAME.pattern})(?::(\d+)|\s+slots\s*=\s*(\d+))?", line)
        if match is None:
            raise LayoutError(
                f"hostfile={source} line {number} ({raw.strip()!r}) is malformed: "
                "write one host per line as 'host', 'host:SLOTS' or 'host slots=SLOTS'"
            )
        slots = match.group(2) or match.group(3)
        hosts.append((match.group(1), None if slots is None else int(slots)))
    if not hosts:
        raise LayoutError(f"hostfile={source} lists no host: write one host per line")
    return hosts
