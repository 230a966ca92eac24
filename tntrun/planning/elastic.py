"""Elastic runs, the pure part: the node counts a run may go on at, and whether its global
batch holds at every one of them.

tntrun's users state the global batch; the micro-batch is derived from it. So a resize
changes neither the global batch nor the learning-rate schedule (in steps), provided the
new world size divides the global batch: checked here for every reachable size, before
launch.
"""

from __future__ import annotations

from tntrun.config.settings import Settings


def node_range(settings: Settings) -> tuple[int, int] | None:
    """(min, max) nodes of an elastic run (max: the nodes it starts with, if not given);
    None when the run is not elastic."""
    elastic = settings.elastic
    if elastic.min_nodes is None:
        return None
    return elastic.min_nodes, elastic.max_nodes or settings.nodes


def elastic_problems(settings: Settings, per_node: int | None) -> list[str]:
    """One line per setting an elastic run cannot go on with."""
    span = node_range(settings)
    if span is None:
        return (
            []
            if settings.elastic.max_nodes is None
            else [
                f"elastic.max_nodes={settings.elastic.max_nodes} without elastic.min_nodes: give "
                "elastic.min_nodes too (the fewest nodes the run may go on with)"
            ]
        )
    low, high = span
    problems = _range_problems(settings, low, high)
    if problems or per_node is None:
        return problems
    if settings.micro_batch_size is not None or settings.batch_tokens is not None:
        return [
            "elastic runs keep the global batch as the world size changes: give "
            "global_batch_size instead of micro_batch_size/batch_tokens"
        ]
    return _batch_problems(settings.global_batch_size, low, high, per_node)


def _range_problems(settings: Settings, low: int, high: int) -> list[str]:
    elastic = settings.elastic
    if low < 1:
        return [f"elastic.min_nodes={low}: an elastic run needs at least 1 node"]
    if low > high:
        return [f"elastic.min_nodes={low} > elastic.max_nodes={high}: give min <= max"]
    if not low <= settings.nodes <= high:
        return [f"nodes={settings.nodes} is outside elastic.min_nodes..max_nodes={low}..{high}"]
    if elastic.commit_every_steps < 1:
        return [f"elastic.commit_every_steps={elastic.commit_every_steps}: commit every 1 or more"]
    if elastic.timeout_s < 0 or elastic.discovery_interval_s <= 0:
        return ["elastic.timeout_s and elastic.discovery_interval_s: give positive times"]
    return []


def _batch_problems(global_batch: int | None, low: int, high: int, per_node: int) -> list[str]:
    sizes = [nodes * per_node for nodes in range(low, high + 1)]
    if global_batch is None:
        return []  # batch_sizes() reports the missing global batch
    bad = [size for size in sizes if global_batch % size]
    if not bad:
        return []
    good = [size for size in sizes if size not in bad]
    can = f"it can run at {', '.join(map(str, good))}" if good else "it can run at none of them"
    return [
        f"global_batch_size={global_batch} is not divisible by the world sizes "
        f"{', '.join(map(str, bad))} that elastic.min_nodes..max_nodes={low}..{high} may reach "
        f"({per_node} ranks a node; {can}): use a global batch every size divides, e.g. "
        f"{_common_multiple(sizes, global_batch)}, or narrow the node range"
    ]


def _common_multiple(sizes: list[int], near: int) -> int:
    """The multiple of every size in ``sizes`` nearest to ``near`` (at least one)."""
    from math import lcm

    step = lcm(*sizes)
    return max(step, round(near / step) * step)
