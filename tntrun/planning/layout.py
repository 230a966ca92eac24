"""Hardware layout: which hosts, how many ranks on each, and where each rank sits.

Pure functions of the config and of facts passed in (the cluster environment's
allocation, read before planning: :mod:`tntrun.environments`), so they are
unit-tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tntrun.environments import Allocation, LayoutError
from tntrun.environments.static_hosts import StaticHosts

LOCALHOST = "localhost"


@dataclass(frozen=True)
class RankPlacement:
    rank: int
    host: str
    local_rank: int
    socket: int | None
    gpu: int | None


def ranks_per_node(gpus: int, cpu_ranks: int) -> int:
    """One rank per GPU, or ``ranks_per_node`` CPU ranks when ``gpus=0``."""
    if gpus < 0:
        raise LayoutError(f"gpus={gpus}: give the GPUs per node, or gpus=0 for CPU ranks")
    if gpus > 0:
        return gpus
    if cpu_ranks < 1:
        raise LayoutError(
            f"ranks_per_node={cpu_ranks}: nodes x ranks per node must be at least 1; "
            "set ranks_per_node=1 or more"
        )
    return cpu_ranks


def resolve_hosts(
    nodes: int, requested: Mapping[str, Any], per_node: int, allocation: Allocation | None
) -> tuple[tuple[str, int], ...]:
    """(host, slots) per node from ``hosts``/``hostfile`` (``requested``), the environment's
    allocation (a fact read before planning) or localhost."""
    if nodes < 1:
        raise LayoutError(f"nodes={nodes}: nodes x ranks per node must be at least 1; set nodes=1")
    given = StaticHosts({}, requested).allocation() or allocation
    if given is None or not given.hosts:
        if nodes == 1:
            return ((LOCALHOST, per_node),)
        raise LayoutError(
            f"nodes={nodes} needs the hosts to run on: give hosts=[h1,h2,...], "
            "hostfile=PATH, or run inside a Slurm allocation"
        )
    source, hosts = given.source, list(given.hosts)
    if not given.exact:
        if len(hosts) < nodes:
            raise LayoutError(
                f"nodes={nodes} but {source} has {len(hosts)} node(s): "
                f"set nodes={len(hosts)} or allocate more nodes"
            )
        hosts = hosts[:nodes]
    elif len(hosts) > nodes:
        raise LayoutError(
            f"{source} lists {len(hosts)} hosts but nodes={nodes}: "
            f"set nodes={len(hosts)} or list {nodes} host(s)"
        )
    elif len(hosts) < nodes:
        raise LayoutError(
            f"nodes={nodes} but {source} lists only {len(hosts)} host(s): list one host per node"
        )
    for host, slots in hosts:
        if slots is not None and slots < per_node:
            raise LayoutError(
                f"{source}: host {host} has {slots} slot(s) but each node runs {per_node} ranks: "
                f"raise its slots or lower ranks_per_node/gpus to {slots}"
            )
    return tuple((host, per_node) for host, _ in hosts)


def place_ranks(
    hosts: tuple[tuple[str, int], ...], gpus: int, sockets: int | None
) -> tuple[RankPlacement, ...]:
    """Rank -> host, local rank, socket (when pinning) and GPU (when gpus > 0)."""
    placements = []
    rank = 0
    for host, slots in hosts:
        for local in range(slots):
            placements.append(
                RankPlacement(
                    rank=rank,
                    host=host,
                    local_rank=local,
                    socket=None if sockets is None else local % sockets,
                    gpu=local if gpus > 0 else None,
                )
            )
            rank += 1
    return tuple(placements)
