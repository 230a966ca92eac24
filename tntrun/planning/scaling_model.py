"""Predicted step time and scaling efficiency on N ranks: a ring-allreduce alpha-beta model.

Pure (no TensorFlow): the ranks measure a :class:`ScalingProfile` in a short
run (``predict_scaling=true``), this module turns it into predictions.

The model, for a data-parallel step with a fixed micro-batch per rank (weak scaling):

    T(N) = T_compute(N) + T_allreduce(N) / backward_passes_per_step + i   (N > 1)
    T_compute(N) = E[max of N per-step compute times]
    T_allreduce(N) = buffers * 2 (N - 1) * alpha + 2 (N - 1) / N * bytes * beta + c

A synchronous step waits for its slowest rank, so ``T_compute(N)`` is
the expected maximum of N rank step times without communication (forward,
backward, update, Keras' loop), drawn from the per-step times measured on
every rank of the profiled run while all of them computed at once: the more
ranks, the likelier one of them has a slow step. A ring allreduce on N
ranks passes 2 (N - 1) messages per buffer, each paying the latency
``alpha``, and moves 2 (N - 1) / N of the gradient bytes through every rank
at ``beta`` seconds per byte. Horovod fuses the
gradients into ``ceil(bytes / fusion threshold)`` buffers (one per tensor with
fusion off). ``alpha`` and ``beta`` are fitted to allreduce times of single
buffers measured on the profiled run's ranks; ``c`` is what allreducing the
model's real gradient set (many tensors: Horovod's per-tensor negotiation and
fusion-buffer copies) took beyond that, on the profiled world size. ``i`` is
what a real distributed step, timed in the profile, took beyond compute plus
allreduce measured apart: the interaction of the two inside one step
(Horovod's and Gloo's threads competing with the rank's computation, gradients
reduced in several cycles as the backward pass produces them; negative when
they overlap). Assumptions: every rank's compute time, ``c`` and ``i`` as
profiled, and links between all N ranks as fast as the measured ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

HOROVOD_DEFAULT_FUSION_BYTES = 128 * 1024 * 1024
PREDICTED_WORLD_SIZES = tuple(2**k for k in range(11))  # 1, 2, 4, ..., 1024
STRAGGLER_ROUNDS = 400  # bootstrap rounds for the expected slowest rank


@dataclass(frozen=True)
class LinkCost:
    """Alpha-beta cost of one ring allreduce message: latency and seconds per byte."""

    latency_s: float
    seconds_per_byte: float

    @property
    def bandwidth_bytes_per_s(self) -> float:
        return 1.0 / self.seconds_per_byte if self.seconds_per_byte > 0 else math.inf


def ring_factors(world: int) -> tuple[float, float]:
    """(messages per buffer, fraction of the bytes each rank moves) of a ring allreduce."""
    return 2.0 * (world - 1), 2.0 * (world - 1) / world


def fit_link(sizes_bytes: Sequence[float], seconds: Sequence[float], world: int) -> LinkCost:
    """Least-squares alpha and beta from allreduce times of single buffers on ``world`` ranks."""
    if world < 2:
        raise ValueError("fitting the allreduce cost needs times measured on 2 or more ranks")
    if len(set(sizes_bytes)) < 2:
        raise ValueError("fitting the allreduce cost needs at least two message sizes")
    # Relative least squares (weights 1/t), so small messages, which carry the latency, count
    # as much as large ones, which carry the bandwidth.
    times = np.asarray(seconds, float)
    slope, intercept = np.polyfit(np.asarray(sizes_bytes, float), times, 1, w=1.0 / times)
    messages, fraction = ring_factors(world)
    return LinkCost(max(intercept, 0.0) / messages, max(slope, 0.0) / fraction)


def fusion_buffers(gradient_bytes: int, tensors: int, threshold_bytes: int | None) -> int:
    """How many allreduce buffers Horovod sends per update at this fusion threshold."""
    if threshold_bytes is None:
        threshold_bytes = HOROVOD_DEFAULT_FUSION_BYTES
    if threshold_bytes <= 0:
        return tensors
    return max(1, math.ceil(gradient_bytes / threshold_bytes))


@dataclass(frozen=True)
class ScalingProfile:
    """What a short profiled run measured on its ranks."""

    compute_s: float  # mean step time without communication, over ranks and steps
    gradient_bytes: int  # bytes allreduced per update (after compression)
    gradient_tensors: int
    fusion_threshold_bytes: int | None
    backward_passes_per_step: int
    link: LinkCost
    micro_batch_size: int
    profiled_world_size: int
    measured_step_s: float  # the profiled run's steady-state step time
    per_update_overhead_s: float = 0.0  # c: the gradient set's cost beyond alpha-beta
    # What was measured: (bytes, seconds) of single-buffer allreduces; the gradient set's time.
    probes: tuple[tuple[int, float], ...] = ()
    gradient_allreduce_s: float | None = None
    # Per-step compute times of every rank (seconds); empty: every step takes compute_s.
    compute_samples_s: tuple[float, ...] = ()
    # i: a distributed step timed in the profile, beyond compute + allreduce (seconds).
    interaction_s: float = 0.0
    distributed_step_s: float | None = None  # that step: mean wall time per step and rank

    def compute_at(self, world: int) -> float:
        """Expected compute time of the slowest of ``world`` ranks (bootstrap, fixed seed)."""
        if len(self.compute_samples_s) < 2 or world <= 1:
            return self.compute_s
        samples = np.asarray(self.compute_samples_s)
        draws = np.random.default_rng(0).choice(samples, size=(STRAGGLER_ROUNDS, world))
        return float(draws.max(axis=1).mean())

    def allreduce_s(self, world: int) -> float:
        """Predicted time of one update's allreduce on ``world`` ranks."""
        if world <= 1:
            return 0.0
        return self.ring_s(world) + self.per_update_overhead_s

    def ring_s(self, world: int) -> float:
        """The alpha-beta ring part of one update's allreduce on ``world`` ranks."""
        messages, fraction = ring_factors(world)
        buffers = fusion_buffers(
            self.gradient_bytes, self.gradient_tensors, self.fusion_threshold_bytes
        )
        return (
            buffers * messages * self.link.latency_s
            + fraction * self.gradient_bytes * self.link.seconds_per_byte
        )

    def communication_s(self, world: int) -> float:
        """Allreduce time per step: one update's allreduce spread over its backward passes."""
        return self.allreduce_s(world) / self.backward_passes_per_step

    def separate_step_s(self, world: int) -> float:
        """Compute plus allreduce, as measured apart (the model without ``i``)."""
        return self.compute_at(world) + self.communication_s(world)

    def step_s(self, world: int) -> float:
        """Predicted training step time on ``world`` ranks (never below the computation)."""
        compute = self.compute_at(world)  # a bootstrap: computed once
        if world <= 1:
            return compute
        return compute + max(0.0, self.communication_s(world) + self.interaction_s)

    def calibrated(self, distributed_step_s: float) -> ScalingProfile:
        """This profile with ``i`` set from a distributed step timed on the profiled ranks."""
        interaction = distributed_step_s - self.separate_step_s(self.profiled_world_size)
        return replace(self, interaction_s=interaction, distributed_step_s=distributed_step_s)


@dataclass(frozen=True)
class Prediction:
    world_size: int
    step_s: float
    allreduce_s: float
    samples_per_s: float
    efficiency: float  # throughput(N) / (N x throughput(1))


def predict(profile: ScalingProfile, worlds: Sequence[int] = PREDICTED_WORLD_SIZES):
    """Predictions for each world size: step time, throughput and efficiency."""
    single = profile.step_s(1)
    rows = []
    for world in worlds:
        step = profile.step_s(world)
        rows.append(
            Prediction(
                world_size=world,
                step_s=step,
                allreduce_s=profile.communication_s(world),
                samples_per_s=world * profile.micro_batch_size / step,
                efficiency=single / step,
            )
        )
    return rows


def validation_error(profile: ScalingProfile) -> float:
    """Relative error of the prediction for the profiled world size against its measurement."""
    predicted = profile.step_s(profile.profiled_world_size)
    return predicted / profile.measured_step_s - 1.0


def render_table(profile: ScalingProfile, rows: Sequence[Prediction]) -> str:
    """A Markdown report: the measured inputs, the validation and the prediction table."""
    link = profile.link
    buffers = fusion_buffers(
        profile.gradient_bytes, profile.gradient_tensors, profile.fusion_threshold_bytes
    )
    lines = [
        "# Scaling prediction (ring allreduce, alpha-beta model)",
        "",
        f"- compute per step (no communication): mean {profile.compute_s * 1e3:.2f} ms, "
        f"slowest of {profile.profiled_world_size} ranks "
        f"{profile.compute_at(profile.profiled_world_size) * 1e3:.2f} ms, micro-batch "
        f"{profile.micro_batch_size}",
        f"- gradients: {profile.gradient_bytes / 2**20:.2f} MiB in {profile.gradient_tensors} "
        f"tensors, {buffers} fused buffer(s) per update",
        f"- link (fitted on {profile.profiled_world_size} ranks): alpha "
        f"{link.latency_s * 1e6:.1f} us per message, beta {link.bandwidth_bytes_per_s / 1e9:.3f}"
        f" GB/s; per-update overhead c {profile.per_update_overhead_s * 1e3:.2f} ms",
        *_interaction_line(profile),
        f"- validation: predicted {profile.step_s(profile.profiled_world_size) * 1e3:.2f} ms "
        f"vs measured {profile.measured_step_s * 1e3:.2f} ms per step on "
        f"{profile.profiled_world_size} ranks ({validation_error(profile):+.1%})",
        "",
        "| ranks | step ms | allreduce ms | samples/s | efficiency |",
        "|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {row.world_size} | {row.step_s * 1e3:.2f} | {row.allreduce_s * 1e3:.2f} | "
            f"{row.samples_per_s:,.0f} | {row.efficiency:.3f} |"
        )
    return "\n".join(lines) + "\n"


def _interaction_line(profile: ScalingProfile) -> list[str]:
    if profile.distributed_step_s is None:
        return []
    apart = profile.separate_step_s(profile.profiled_world_size)
    return [
        f"- interaction i {profile.interaction_s * 1e3:+.2f} ms: a distributed step timed in the "
        f"profile took {profile.distributed_step_s * 1e3:.2f} ms, compute + allreduce measured "
        f"apart {apart * 1e3:.2f} ms"
    ]


def render_csv(rows: Sequence[Prediction]) -> str:
    lines = ["world_size,step_ms,allreduce_ms,samples_per_s,efficiency"]
    lines += [
        f"{r.world_size},{r.step_s * 1e3:.4f},{r.allreduce_s * 1e3:.4f},"
        f"{r.samples_per_s:.2f},{r.efficiency:.5f}"
        for r in rows
    ]
    return "\n".join(lines) + "\n"


def parse_csv(text: str) -> list[Prediction]:
    """The rows :func:`render_csv` wrote (the driver reads a run's prediction back)."""
    rows = []
    for line in text.splitlines()[1:]:
        world, step_ms, allreduce_ms, samples_per_s, efficiency = line.split(",")
        rows.append(
            Prediction(
                int(world),
                float(step_ms) / 1e3,
                float(allreduce_ms) / 1e3,
                float(samples_per_s),
                float(efficiency),
            )
        )
    return rows


def plot(profile: ScalingProfile, rows: Sequence[Prediction], path) -> None:
    """Efficiency and throughput versus ranks (log2 axis), with the measured point."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    worlds = [r.world_size for r in rows]
    fig, (eff, speed) = plt.subplots(1, 2, figsize=(10, 3.8), dpi=100)
    eff.plot(worlds, [r.efficiency for r in rows], marker="o")
    eff.set_ylabel("scaling efficiency")
    eff.set_ylim(0, 1.05)
    speed.plot(worlds, [r.samples_per_s for r in rows], marker="o", label="predicted")
    speed.plot(worlds, [w * rows[0].samples_per_s for w in worlds], linestyle=":", label="ideal")
    measured = profile.profiled_world_size
    speed.plot(
        [measured],
        [measured * profile.micro_batch_size / profile.measured_step_s],
        marker="x",
        color="tab:red",
        linestyle="none",
        markersize=9,
        label="measured",
    )
    speed.set_ylabel("samples/s")
    speed.set_yscale("log")
    speed.legend()
    for ax in (eff, speed):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks")
        ax.grid(alpha=0.3)
    fig.suptitle("Predicted data-parallel scaling (ring allreduce, alpha-beta)")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
