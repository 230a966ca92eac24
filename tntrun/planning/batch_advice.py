"""What the gradient noise scale says about the batch: how many fewer steps a larger global
batch needs, and the time to the same loss on each node count.

Pure arithmetic on numbers the run measured. McCandlish et al. ("An Empirical Model of
Large-Batch Training", 2018) model the optimizer steps S needed to reach a given loss at
a batch of B samples per update as

    S(B) = S_min (1 + B_noise / B)

with B_noise estimated by the simple noise scale B_simple the ranks measure. Doubling B
thus divides the steps by (1 + B_noise/B) / (1 + B_noise/2B): close to 2 far below the
noise scale, close to 1 far above it. Combined with the scaling predictor's step time on
N ranks (``predict_scaling=true``, :mod:`tntrun.planning.scaling_model`), at the run's
micro-batch (B_N = micro-batch x N x accumulated passes), the time to the same loss is
S(B_N) x step time(N): Pollux's goodput idea, throughput weighted by the statistical
efficiency of the batch. The noise scale grows as the loss falls, so the final value
read here is what holds near the run's end, and the figures are estimates of that order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from tntrun.planning.plan import Plan

NOISE_SCALE = "gradient_noise_scale"  # the metric: B_simple, smoothed, logged by rank 0
# The smoothed estimates it is the ratio of, logged with it (it is left out while the
# first is not positive): |G|^2 and tr(Sigma).
GRADIENT_SQ, TRACE = "gns_gradient_sq", "gns_trace"
BATCH_MULTIPLES = (2, 4)  # the larger global batches the advice speaks of


@dataclass(frozen=True)
class NoAdvice:
    """Why a run gets no batch advice: one rank, or a noise scale that cannot be read."""

    reason: str

    def lines(self) -> list[str]:
        return [f"no batch advice: {self.reason}"]


def advise(
    plan: Plan, noise_scale: float | None, step_times: Sequence[tuple[int, float]] = ()
) -> BatchAdvice | NoAdvice:
    """The advice of a run of ``plan`` that measured ``noise_scale`` (its final B_simple),
    with the time to its loss per node count when the scaling predictor gave ``step_times``
    ((ranks, seconds per training step))."""
    if plan.world_size < 2:
        return NoAdvice(
            "the gradient noise scale is not measured on one rank (it compares each rank's "
            "gradient with their average)"
        )
    if noise_scale is None:
        return NoAdvice(
            f"the run logged no {NOISE_SCALE} (train.gradient_noise_scale=false turns it off)"
        )
    problem = noise_scale_problem(noise_scale)
    if problem is not None:
        return NoAdvice(f"not measured reliably: {problem}")
    advice = BatchAdvice(noise_scale, plan.effective_batch_size, plan.micro_batch_size)
    if not step_times:
        return advice
    times = node_times(
        advice, step_times, plan.ranks_per_node, plan.backward_passes_per_step, plan.total_steps
    )
    return replace(advice, node_times=times)


def final_noise_scale(metrics: Mapping[str, float]) -> float | None:
    """B_simple as a run's last logged estimates give it: their ratio (not positive when
    the |G|^2 estimate is not, where the run logged no ``gradient_noise_scale``), else the
    last ``gradient_noise_scale``; None: the run measured none."""
    gradient_sq, trace = metrics.get(GRADIENT_SQ), metrics.get(TRACE)
    if gradient_sq is None or trace is None:
        return metrics.get(NOISE_SCALE)
    return trace / gradient_sq if gradient_sq else 0.0


def noise_scale_problem(noise_scale: float | None) -> str | None:
    """Why a measured B_simple cannot be read (None: it can): missing, not finite, or not
    positive (its |G|^2 estimate at or below zero: the gradient is lost in its noise,
    typical early in training or when the estimate has seen too few steps)."""
    if noise_scale is None:
        return f"the run logged no {NOISE_SCALE}"
    if not math.isfinite(noise_scale):
        return f"{NOISE_SCALE} is {noise_scale} (a non-finite gradient norm)"
    if noise_scale <= 0:
        return (
            f"{NOISE_SCALE} is {noise_scale:.3g}: its estimates of |G|^2 and tr(Sigma) are "
            "not both above zero (early in training, or too few steps to average)"
        )
    return None


def steps_factor(noise_scale: float, batch: float, new_batch: float) -> float:
    """S(new_batch) / S(batch): the steps to the same loss at ``new_batch``, relative."""
    return (1.0 + noise_scale / new_batch) / (1.0 + noise_scale / batch)


@dataclass(frozen=True)
class NodeTime:
    """The predicted time to this run's loss at one world size, at the run's micro-batch."""

    nodes: float  # world_size / ranks per node (a fraction: fewer ranks than a node holds)
    world_size: int
    batch: int  # samples per optimizer update at that world size
    steps_factor: float  # optimizer steps to the same loss, relative to this run's
    step_s: float  # the scaling predictor's seconds per training step
    time_s: float  # seconds to this run's loss: its steps x steps_factor x step_s


@dataclass(frozen=True)
class BatchAdvice:
    """A run's measured noise scale next to its batch, and what follows from it."""

    noise_scale: float  # B_simple, samples
    batch: int  # samples per optimizer update (global batch x accumulated passes)
    micro_batch: int  # samples per rank and backward pass
    node_times: tuple[NodeTime, ...] = ()  # empty: no scaling prediction

    def fewer_steps(self, multiple: int) -> float:
        """How many times fewer steps ``multiple`` x the batch needs (S(B) / S(kB))."""
        return 1.0 / steps_factor(self.noise_scale, self.batch, multiple * self.batch)

    @property
    def fastest(self) -> NodeTime | None:
        """The world size that reaches this run's loss soonest (Pollux's goodput)."""
        return min(self.node_times, key=lambda row: row.time_s, default=None)

    def lines(self) -> list[str]:
        """The advice as console lines (without the ``tntrun:`` prefix)."""
        return [self.batch_line(), *([self.time_line()] if self.node_times else [])]

    def batch_line(self) -> str:
        readings = []
        for multiple in BATCH_MULTIPLES:
            fewer = self.fewer_steps(multiple)
            readings.append(
                f"{multiple}x the batch needs ~{fewer:.2g}x fewer steps "
                f"({multiple / fewer:.2g}x the samples)"
            )
        return (
            f"gradient noise scale {samples(self.noise_scale)} samples (global batch "
            f"{self.batch} samples per update): {'; '.join(readings)}"
        )

    def time_line(self) -> str:
        times = ", ".join(f"{where(row)} {duration(row.time_s)}" for row in self.node_times)
        best = self.fastest
        assert best is not None
        line = (
            f"predicted time to this run's loss at micro-batch {self.micro_batch}: {times}; "
            f"fastest on {where(best)} ({duration(best.time_s)}, global batch {best.batch})"
        )
        now = next((row for row in self.node_times if row.batch == self.batch), None)
        if now is not None and now is not best:
            line += f", {now.time_s / best.time_s:.2g}x sooner than on this run's {where(now)}"
        return line


def node_times(
    advice: BatchAdvice,
    step_times: Sequence[tuple[int, float]],
    ranks_per_node: int,
    passes: int,
    steps: int,
) -> tuple[NodeTime, ...]:
    """Each predicted world size's time to this run's loss. ``step_times``: (ranks, seconds
    per training step) from the scaling predictor; ``passes``: backward passes per update;
    ``steps``: the training steps this run took. World sizes that fill whole nodes only,
    unless none does."""
    whole = [(w, s) for w, s in step_times if w % ranks_per_node == 0]
    rows = []
    for world, step_s in whole or step_times:
        batch = advice.micro_batch * world * passes
        factor = steps_factor(advice.noise_scale, advice.batch, batch)
        rows.append(
            NodeTime(world / ranks_per_node, world, batch, factor, step_s, steps * factor * step_s)
        )
    return tuple(rows)


def where(row: NodeTime) -> str:
    """'4 nodes (16 ranks)', '1 node', or '2 ranks' when the ranks fill less than a node."""
    if row.nodes < 1 or row.nodes != int(row.nodes):
        return f"{row.world_size} rank{'s' * (row.world_size != 1)}"
    nodes = int(row.nodes)
    label = f"{nodes} node{'s' * (nodes != 1)}"
    return label if nodes == row.world_size else f"{label} ({row.world_size} ranks)"


def samples(value: float) -> str:
    """A batch-sized number to three significant digits, without an exponent."""
    rounded = float(f"{value:.3g}")
    return f"{rounded:.0f}" if rounded >= 100 else f"{rounded:g}"


def duration(seconds: float) -> str:
    """Seconds with a unit that keeps them short: s, min or h."""
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"
