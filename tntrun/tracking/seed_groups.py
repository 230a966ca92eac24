"""A sweep's repeats: jobs whose configs differ only by ``seed``, summarised as mean and
spread per configuration (``tntrun -m seed=1,2,3``, or ``seed=1,2,3 optimizer.base_lr=...``).

A finished job joins the group of every other finished job with the same params but the
seed; a group of two or more is a row: how many seeds, the mean, the sample standard
deviation, the lowest and the highest of each reported metric.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tntrun.contract.run_status import RunStatus
from tntrun.tracking import RunSummary

SEED = "seed"
SUMMARISED = ("val_accuracy", "val_loss", "bleu", "steady_samples_per_s")


@dataclass(frozen=True)
class SeedGroup:
    """Finished jobs of one configuration, with their seeds."""

    label: str  # the params that set this group apart from the sweep's others
    seeds: tuple[str, ...]
    runs: tuple[RunSummary, ...]

    def spread(self, metric: str) -> tuple[float, float, float, float] | None:
        """(mean, sample standard deviation, lowest, highest), or None unless every run
        recorded ``metric``."""
        values = [run.metrics[metric] for run in self.runs if metric in run.metrics]
        if len(values) != len(self.runs):
            return None
        return statistics.mean(values), statistics.stdev(values), min(values), max(values)


def seed_groups(children: Iterable[RunSummary]) -> list[SeedGroup]:
    """The groups of two or more finished jobs that differ only by seed."""
    groups: dict[tuple, list[RunSummary]] = {}
    for run in children:
        if run.status == RunStatus.FINISHED and SEED in run.params:
            key = tuple(sorted((k, v) for k, v in run.params.items() if k != SEED))
            groups.setdefault(key, []).append(run)
    repeated = {key: runs for key, runs in groups.items() if len(runs) >= 2}
    varying = _varying_keys(list(repeated))
    return [
        SeedGroup(
            label=", ".join(f"{k}={v}" for k, v in key if k in varying) or "all jobs",
            seeds=tuple(run.params[SEED] for run in runs),
            runs=tuple(runs),
        )
        for key, runs in repeated.items()
    ]


def _varying_keys(keys: Sequence[tuple]) -> set[str]:
    """The params whose values differ between the groups (what a row is labelled by)."""
    values: dict[str, set[str]] = {}
    for key in keys:
        for name, value in key:
            values.setdefault(name, set()).add(value)
    return {name for name, seen in values.items() if len(seen) > 1}


def seeds_markdown(groups: Sequence[SeedGroup]) -> str:
    """A table: one row per configuration, ``mean ± std (min-max)`` per metric."""
    metrics = [m for m in SUMMARISED if any(g.spread(m) for g in groups)]
    lines = [
        "| configuration | seeds | " + " | ".join(metrics) + " |",
        "|---|---|" + "---|" * len(metrics),
    ]
    for group in groups:
        cells = []
        for metric in metrics:
            found = group.spread(metric)
            cells.append("" if found is None else "{:.4g} ± {:.2g} ({:.4g}-{:.4g})".format(*found))
        lines.append(f"| {group.label} | {', '.join(group.seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def seeds_line(group: SeedGroup, metric: str) -> str | None:
    """``val_accuracy 0.9523 ± 0.0042 over 3 seeds (1, 2, 3)`` for the console."""
    found = group.spread(metric)
    if found is None:
        return None
    mean, spread, _, _ = found
    seeds = ", ".join(group.seeds)
    return (
        f"{group.label}: {metric} {mean:.4f} ± {spread:.4f} over {len(group.seeds)} seeds ({seeds})"
    )
