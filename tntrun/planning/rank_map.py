"""The rank map for a person: every rank of a small run, the pattern of a large one.

Up to :data:`FULL_VIEW_MAX_RANKS` ranks a person reads every rank (the dry run's map, every
rank's lines on the console); beyond it the dry run shows the map as its rule with the
first and last node written out, and the whole map and host list go to files
(:func:`rank_map_text`, :func:`host_list_text`) whose names it gives.
"""

from __future__ import annotations

from collections.abc import Sequence

from tntrun.planning.hostlist import hosts_summary
from tntrun.planning.layout import RankPlacement
from tntrun.planning.plan import SELF_BINDING, Plan

# The one threshold: up to this many ranks the dry run lists each rank and host and the
# console shows every rank's lines (2 hosts x 8 GPUs); beyond it, summaries and files.
FULL_VIEW_MAX_RANKS = 16


def shows_every_rank(world_size: int) -> bool:
    """Whether a person is shown each rank (a small run) rather than a summary."""
    return world_size <= FULL_VIEW_MAX_RANKS


def placement_line(plan: Plan, placement: RankPlacement) -> str:
    """One rank: its host, local rank, socket binding and GPU."""
    where = [f"rank {placement.rank}", f"host {placement.host}"]
    where.append(f"local rank {placement.local_rank}")
    if placement.socket is not None and plan.bound_by == SELF_BINDING:
        where.append(f"numactl --cpunodebind={placement.socket} --membind={placement.socket}")
    elif placement.socket is not None:
        where.append(f"socket {placement.socket}, bound by {plan.bound_by}")
    if placement.gpu is not None:
        where.append(f"GPU {placement.gpu}")
    return ", ".join(where)


def rank_map_text(plan: Plan) -> str:
    """The whole rank map, a line per rank (the file a large dry run writes)."""
    return "".join(placement_line(plan, p) + "\n" for p in plan.placements)


def host_list_text(plan: Plan) -> str:
    """The hosts in order as a hostfile (``host slots=N``): ``hostfile=`` takes it back."""
    return "".join(f"{host} slots={slots}\n" for host, slots in plan.hosts)


def host_names(plan: Plan) -> list[str]:
    return [host for host, _ in plan.hosts]


def hosts_text(plan: Plan) -> str:
    """The hosts and their slots in one line: each one for a small run, else a summary."""
    if shows_every_rank(plan.world_size):
        return ", ".join(f"{h}:{n}" for h, n in plan.hosts)
    return f"{hosts_summary(host_names(plan))}, {plan.ranks_per_node} slots each"


def _span(values: Sequence[int]) -> str:
    """``0-7`` for consecutive values, else them all."""
    if len(values) > 1 and list(values) == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ",".join(map(str, values))


def _node_line(plan: Plan, node: int) -> str:
    """The ranks of one node, written out."""
    per_node = plan.ranks_per_node
    ranks = plan.placements[node * per_node : (node + 1) * per_node]
    parts = [f"{ranks[0].host}: ranks {_span([p.rank for p in ranks])}"]
    parts.append(f"local ranks {_span([p.local_rank for p in ranks])}")
    if ranks[0].socket is not None:
        parts.append(f"sockets {_span([p.socket or 0 for p in ranks])}")
    if ranks[0].gpu is not None:
        parts.append(f"GPUs {_span([p.gpu or 0 for p in ranks])}")
    return ", ".join(parts)


def _follows_rule(plan: Plan) -> bool:
    """Whether every rank sits where the summary's rule says: node-major, local rank i on
    GPU i, socket i mod the sockets."""
    per_node, first = plan.ranks_per_node, plan.placements[0]
    sockets = {p.socket for p in plan.placements[:per_node]}
    for p in plan.placements:
        node, local = divmod(p.rank, per_node)
        if (p.host, p.local_rank) != (plan.hosts[node][0], local):
            return False
        if (p.gpu is None) != (first.gpu is None) or p.gpu not in (None, local):
            return False
        if p.socket is not None and p.socket != local % len(sockets):
            return False
    return len(plan.placements) == per_node * len(plan.hosts)


def _binding_text(plan: Plan) -> str:
    first = plan.placements[0]
    parts = ["local rank i"]
    if first.gpu is not None:
        parts.append("GPU i")
    if first.socket is not None:
        sockets = len({p.socket for p in plan.placements[: plan.ranks_per_node]})
        bound = "numactl" if plan.bound_by == SELF_BINDING else plan.bound_by
        parts.append(f"socket i mod {sockets} (bound by {bound})")
    return " -> ".join(parts) if len(parts) > 1 else "no GPU or socket binding"


def rank_pattern_lines(plan: Plan, rank_map_file: str, hosts_file: str) -> list[str]:
    """The rank map of a large run: its rule, the first and last node, where the rest is."""
    per_node, nodes = plan.ranks_per_node, len(plan.hosts)
    files = f"full map: {rank_map_file}; hosts: {hosts_file}"
    if not _follows_rule(plan):
        return [f"{plan.world_size} ranks on {nodes} nodes, in no single pattern", files]
    return [
        f"{plan.world_size} ranks: {per_node} per node on {nodes} nodes, "
        f"rank = node index x {per_node} + local rank",
        _binding_text(plan),
        f"first node  {_node_line(plan, 0)}",
        f"last node   {_node_line(plan, nodes - 1)}",
        files,
    ]
