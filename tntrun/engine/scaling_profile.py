"""``predict_scaling=true``: measure the inputs of the scaling model on the ranks, then predict.

After training, every rank (at the same time, so ranks sharing a node contend
as they did while training):

1. times allreduces of single buffers from 4 KiB up to the gradient size and
   fits the ring's latency and bandwidth (:func:`tntrun.planning.scaling_model.fit_link`);
2. times an allreduce of the model's gradient set (its tensors' shapes, as the
   DistributedOptimizer sends them), whose cost beyond the fitted ring is the
   per-update overhead;
3. times the real distributed training step (compute and allreduce in one
   step, as in training; mean wall time per step, each from its begin to the
   next one's), then the same step, timed the same way, with a local optimizer
   instead of Horovod's, i.e. without communication; what the
   distributed step takes beyond compute plus allreduce measured apart is
   the model's interaction term.

Rank 0 then predicts step time and efficiency on 1 ... 1024 ranks, checks the
prediction for the profiled world size against the run's measured steady step
time, prints the table and writes it, a CSV and a plot to
``<run dir>/scaling_prediction/``.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from tntrun.contract.run_files import PREDICTION_CSV
from tntrun.contract.run_files import SCALING_PREDICTION as OUTPUT_DIR
from tntrun.engine import keras_internals
from tntrun.engine.compile_args import KEPT
from tntrun.engine.optimizers import build_optimizer
from tntrun.planning import scaling_model
from tntrun.planning.plan import Plan

WARMUP_STEPS = 3  # traced and compiled: not timed
TIMED_STEPS = (20, 1000)  # fewest and most timed steps: as many as fill TIMED_SECONDS
TIMED_SECONDS = 3.0
PROBE_REPEATS = 7
MAX_PROBE_REPEATS = 50
PROBE_SECONDS = 0.2
SMALLEST_PROBE = 4 << 10
LARGEST_PROBE = 64 << 20


def probe_sizes(gradient_bytes: int, count: int = 6) -> list[int]:
    """Allreduce sizes from 4 KiB to the gradient size (1 to 64 MiB), log-spaced."""
    largest = int(np.clip(gradient_bytes, 1 << 20, LARGEST_PROBE))
    sizes = np.geomspace(SMALLEST_PROBE, largest, count)
    return sorted({int(s) // 4 * 4 for s in sizes})


def mean_across_ranks(values: list[float], name: str) -> list[float]:
    total = hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Average, name=name)
    return [float(v) for v in total.numpy()]


def _median_seconds(reduce: Callable, tensors: list[tf.Tensor], name: str) -> float:
    """Median wall time of ``reduce(tensors)`` after one call that traces and lines ranks up.

    Repeats for about PROBE_SECONDS (PROBE_REPEATS to MAX_PROBE_REPEATS times); rank 0
    decides how often and tells the others, since every rank must call as often.
    """

    def timed() -> float:
        start = time.perf_counter()
        reduce(tensors)[-1].numpy()
        return time.perf_counter() - start

    reduce(tensors)[-1].numpy()
    times = [timed() for _ in range(PROBE_REPEATS)]
    wanted = np.clip(
        PROBE_SECONDS / max(float(np.median(times)), 1e-9), PROBE_REPEATS, MAX_PROBE_REPEATS
    )
    agreed = hvd.broadcast(tf.constant(int(wanted)), root_rank=0, name=f"{name}.repeats")
    times += [timed() for _ in range(int(agreed.numpy()) - PROBE_REPEATS)]
    return float(np.median(times))


def _allreduce_all(prefix: str, compression: Any = hvd.Compression.none) -> Callable:
    @tf.function
    def reduce(tensors):
        return [
            hvd.allreduce(t, op=hvd.Average, name=f"{prefix}.{i}", compression=compression)
            for i, t in enumerate(tensors)
        ]

    return reduce


def allreduce_seconds(sizes: list[int]) -> list[float]:
    """Median time of one allreduce of a single float32 buffer of each size, rank-averaged."""
    medians = [
        _median_seconds(
            _allreduce_all(f"scaling_probe.{size}"), [tf.ones([size // 4])], f"scaling_probe.{size}"
        )
        for size in sizes
    ]
    return mean_across_ranks(medians, "scaling_probe.medians")


def gradient_set_seconds(model, compression: str) -> float:
    """Median time of one allreduce of tensors shaped like the gradients, rank-averaged."""
    tensors = [tf.ones(v.shape, tf.float32) for v in model.trainable_variables]
    codec = hvd.Compression.fp16 if compression == "fp16" else hvd.Compression.none
    name = "scaling_probe.gradients"
    seconds = _median_seconds(_allreduce_all(name, codec), tensors, name)
    return mean_across_ranks([seconds], "scaling_probe.gradients.median")[0]


class _StepClock(keras.callbacks.Callback):
    """When each training step began and ended (batch-begin and batch-end hooks)."""

    def __init__(self) -> None:
        super().__init__()
        self.begins: list[float] = []
        self.ends: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begins.append(time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())

    def cycles(self) -> np.ndarray:
        """Each step from its batch-begin to the next one's (the last: to its end):
        what a training step costs in wall time, Keras' work between steps included."""
        begins = np.asarray(self.begins)
        return np.diff(np.append(begins, self.ends[-1]))


def timed_steps(measured_step_s: float) -> int:
    """How many steps to time: about TIMED_SECONDS of rank 0's training steps, within
    TIMED_STEPS; every rank uses rank 0's count, since each must run as many steps."""
    step_s = measured_step_s if np.isfinite(measured_step_s) and measured_step_s > 0 else 1.0
    wanted = np.clip(TIMED_SECONDS / step_s, *TIMED_STEPS)
    return int(hvd.broadcast(tf.constant(int(wanted)), root_rank=0, name="scaling_probe.steps"))


def _timed_fit(model, batches: tf.data.Dataset, steps: int) -> _StepClock:
    """Train ``WARMUP_STEPS + steps`` steps (the stream is repeated when it holds fewer
    batches) and return their clock with the warm-up steps dropped."""
    clock = _StepClock()
    model.fit(
        batches.repeat().take(WARMUP_STEPS + steps),
        epochs=1,
        callbacks=[clock],
        verbose=0,
        shuffle=False,
    )
    if len(clock.ends) <= WARMUP_STEPS:
        raise RuntimeError("predict_scaling: too few training steps to time")
    del clock.begins[:WARMUP_STEPS], clock.ends[:WARMUP_STEPS]
    return clock


def distributed_step_seconds(
    model, batches: tf.data.Dataset, steps: int, passes_per_update: int
) -> float:
    """Mean wall time per step of the real (Horovod) training step, rank-averaged.

    The quantity the run's ``steady_step_time_ms`` measures: steps timed from one
    batch-begin to the next, so Keras' work between steps and the occasional slow
    step count as they do in training (a median would miss both: latency-bound
    steps have a long tail). Whole updates only (``passes_per_update`` steps, of
    which the last allreduces). Trains the compiled model on: call once its
    weights are saved.
    """
    cycles = _timed_fit(model, batches, steps).cycles()
    whole = len(cycles) // passes_per_update * passes_per_update
    mean = float(np.mean(cycles[:whole] if whole else cycles))
    return mean_across_ranks([mean], "scaling_probe.distributed")[0]


def local_step_seconds(
    model, plan: Plan, task: str, batches: tf.data.Dataset, steps: int
) -> list[float]:
    """Every rank's step times of the same training step with a local (non-Horovod) optimizer.

    Each step from its batch-begin to the next one's, like the distributed steps and the
    run's steady step time: Keras' work between steps is part of a step at every world
    size, 1 included (timed to the batch-end hook, a 1-rank prediction missed it).
    Recompiles ``model``: call only once its trained weights are saved.
    """
    trained_with = keras_internals.compile_arguments(model)  # the run's loss and metrics
    model.compile(
        optimizer=build_optimizer(plan.settings.optimizer, plan.scaled_lr),
        **{key: trained_with[key] for key in KEPT if trained_with.get(key) is not None},
    )
    local = _timed_fit(model, batches, steps).cycles()  # as the run's steps are timed
    every_rank = hvd.allgather(tf.constant(local, tf.float64), name="scaling_probe.compute")
    return [float(t) for t in every_rank.numpy()]


def gradient_size(model, compression: str) -> tuple[int, int]:
    """(bytes allreduced per update, tensors) for the model's trainable variables."""
    variables = model.trainable_variables
    bytes_per_value = 2 if compression == "fp16" else 4
    values = sum(int(np.prod(v.shape)) for v in variables)
    return values * bytes_per_value, len(variables)


def profile_run(
    model, plan: Plan, task: str, batches: tf.data.Dataset, measured_step_s: float
) -> scaling_model.ScalingProfile:
    """Measure the scaling model's inputs on every rank (collective: all ranks call it)."""
    compression = plan.settings.horovod.compression.value
    gradient_bytes, tensors = gradient_size(model, compression)
    sizes = probe_sizes(gradient_bytes)
    seconds = allreduce_seconds(sizes)
    link = scaling_model.fit_link(sizes, seconds, plan.world_size)
    gradient_set_s = gradient_set_seconds(model, compression)
    steps = timed_steps(measured_step_s)
    distributed_s = distributed_step_seconds(model, batches, steps, plan.backward_passes_per_step)
    compute = local_step_seconds(model, plan, task, batches, steps)
    profile = scaling_model.ScalingProfile(
        compute_s=float(np.mean(compute)),
        compute_samples_s=tuple(compute),
        gradient_bytes=gradient_bytes,
        gradient_tensors=tensors,
        fusion_threshold_bytes=plan.fusion_threshold_bytes,
        backward_passes_per_step=plan.backward_passes_per_step,
        link=link,
        micro_batch_size=plan.micro_batch_size,
        profiled_world_size=plan.world_size,
        measured_step_s=measured_step_s,
        probes=tuple(zip(sizes, seconds, strict=True)),
        gradient_allreduce_s=gradient_set_s,
    )
    overhead = max(0.0, gradient_set_s - profile.ring_s(plan.world_size))
    return dataclasses.replace(profile, per_update_overhead_s=overhead).calibrated(distributed_s)


def report(
    profile: scaling_model.ScalingProfile,
    run_dir: Path,
    log: Callable[[dict, int], None],
    step: int,
) -> None:
    """Rank 0: print the prediction, write it to the run directory and log it."""
    rows = scaling_model.predict(profile)
    out = run_dir / OUTPUT_DIR
    out.mkdir(exist_ok=True)
    table = scaling_model.render_table(profile, rows)
    (out / "prediction.md").write_text(table)
    (run_dir / PREDICTION_CSV).write_text(scaling_model.render_csv(rows))
    (out / "profile.json").write_text(json.dumps(asdict(profile), indent=2))
    scaling_model.plot(profile, rows, out / "prediction.png")
    print(table, flush=True)
    log(
        {
            "prediction_error": scaling_model.validation_error(profile),
            "compute_step_time_ms": profile.compute_s * 1e3,
            "allreduce_latency_us": profile.link.latency_s * 1e6,
            "allreduce_bandwidth_gb_per_s": profile.link.bandwidth_bytes_per_s / 1e9,
            "interaction_ms": profile.interaction_s * 1e3,
            "profiled_step_time_ms": (profile.distributed_step_s or 0.0) * 1e3,
        },
        step,
    )
    for row in rows:  # one point per world size: the MLflow UI plots them against "step"
        log(
            {
                "predicted_step_time_ms": row.step_s * 1e3,
                "predicted_samples_per_s": row.samples_per_s,
                "predicted_efficiency": row.efficiency,
            },
            row.world_size,
        )
