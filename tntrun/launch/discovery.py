"""Which hosts an elastic run may use now: ``elastic.discovery``'s answer.

The command prints the available hosts, ``host`` or ``host:slots`` a line (Horovod's
``--host-discovery-script`` convention); without one the run's own hosts stay available.
A host with fewer slots than a node's ranks cannot take a node and is left out.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

from tntrun.errors import PlanError

DISCOVERY_TIMEOUT_S = 30.0  # a discovery command that hangs is a failed one
HOST_LINE = re.compile(r"^([A-Za-z0-9_.\-\[\]]+)(?::(\d+))?$")

Hosts = tuple[tuple[str, int], ...]


def parse_hosts(text: str, command: str) -> list[tuple[str, int | None]]:
    """(host, slots or None) of each non-empty line; PlanError for a line that is neither."""
    found = []
    for line in (raw.strip() for raw in text.splitlines()):
        if not line:
            continue
        match = HOST_LINE.match(line)
        if match is None or (match.group(2) is not None and int(match.group(2)) < 1):
            raise PlanError(
                f"elastic.discovery={command} printed {line!r}: print one host or host:slots "
                "(slots 1 or more) a line"
            )
        found.append((match.group(1), int(match.group(2)) if match.group(2) else None))
    return found


def run_discovery(command: str) -> str:
    """The command's output; PlanError when it fails or hangs."""
    try:
        done = subprocess.run(
            ["bash", "-c", command], capture_output=True, text=True, timeout=DISCOVERY_TIMEOUT_S
        )
    except subprocess.TimeoutExpired:
        raise PlanError(
            f"elastic.discovery={command} did not answer within {DISCOVERY_TIMEOUT_S:g} s"
        ) from None
    if done.returncode != 0:
        said = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise PlanError(f"elastic.discovery={command} failed (exit {done.returncode}): {said}")
    return done.stdout


def discovery_problems(command: str | None, per_node: int) -> list[str]:
    """Why ``elastic.discovery`` cannot be used (it fails, prints what is not hosts, no host,
    or no host with the slots of a node), asked once before launch."""
    if command is None:
        return []
    try:
        listed = parse_hosts(run_discovery(command), command)
    except PlanError as err:
        return list(err.problems)
    if not listed:
        return [
            f"elastic.discovery={command} printed no host: it must print the hosts the run may "
            "use now, one host or host:slots a line"
        ]
    if not any(slots is None or slots >= per_node for _, slots in listed):
        shown = ", ".join(f"{host}:{slots}" for host, slots in listed)
        return [
            f"elastic.discovery={command} lists {shown}: none has the {per_node} slots a node "
            f"of ranks_per_node={per_node} needs: print host:{per_node} or more, or lower "
            "ranks_per_node"
        ]
    return []


def available_hosts(command: str | None, own: Sequence[tuple[str, int]], per_node: int) -> Hosts:
    """The hosts that can take a node of ``per_node`` ranks now, in discovery's order
    (``own``: the run's hosts, the answer without a discovery command)."""
    if command is None:
        return tuple((host, per_node) for host, _ in own)
    listed = parse_hosts(run_discovery(command), command)
    usable = [host for host, slots in listed if slots is None or slots >= per_node]
    return tuple((host, per_node) for host in dict.fromkeys(usable))
