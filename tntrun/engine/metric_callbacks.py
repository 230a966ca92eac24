"""The callbacks that measure a rank's training and hand the numbers on: metrics exact over
the ranks (their state summed), exact validation, throughput, the step and epoch metrics for
the driver, and the dtypes the model trains in."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from tntrun.contract.run_files import ENV_DRIVER_START
from tntrun.engine.averaging_optimizer import noise_scale_of
from tntrun.engine.collectives import means_of, weighted_vector
from tntrun.engine.keras_internals import build_metrics
from tntrun.engine.lr_schedule import learning_rate_of
from tntrun.engine.metric_state import sum_metric_state
from tntrun.engine.precision import observed_precision
from tntrun.engine.step_agreement import StepAgreement


class AverageTrainMetrics(keras.callbacks.Callback):
    """Replace each rank's epoch training metrics by those of the ranks' summed metric state
    (:mod:`~tntrun.engine.metric_state`: exact for every additive metric, not only means);
    the other logs (throughput, the LR) by their sample-weighted mean over ranks, summed in
    the same allreduce."""

    def __init__(self, local_samples_per_epoch: int) -> None:
        super().__init__()
        self.weight = local_samples_per_epoch
        self._metric_names: set[str] | None = None  # the same all training long

    def on_epoch_end(self, epoch, logs=None):
        if not logs:
            return
        if self._metric_names is None:
            self._metric_names = set(self.model.get_metrics_result())
        others = {k: v for k, v in logs.items() if k not in self._metric_names}
        extra = weighted_vector(others, self.weight)
        results, sums = sum_metric_state(self.model, f"train_metrics.{epoch}", extra)
        for name in self._metric_names:
            logs.pop(name, None)
        logs.update(results)
        logs.update(means_of(list(others), sums))


class ShardedValidation(keras.callbacks.Callback):
    """Evaluate the validation set split across ranks and add exact global ``val_*`` logs.

    Each rank evaluates its shard, then the ranks' metric states are summed
    (:mod:`~tntrun.engine.metric_state`), so every metric equals a single-process evaluation
    of the whole set; a rank without samples contributes a zero state.
    """

    def __init__(self, dataset: tf.data.Dataset, local_samples: int, every_epochs: int = 1):
        super().__init__()
        self.dataset = dataset
        self.local_samples = local_samples
        self.every_epochs = max(1, every_epochs)

    def evaluate(self, tag: str) -> dict[str, float]:
        if self.local_samples:
            self.model.evaluate(self.dataset, verbose=0)  # leaves the shard's state
        else:  # no sample on this rank: the same metrics, built, with zero state
            build_metrics(self.model, self.dataset.element_spec)
            self.model.reset_metrics()
        summed, _ = sum_metric_state(self.model, name=f"val_metrics.{tag}")
        return {f"val_{k}": v for k, v in summed.items()}

    def on_epoch_end(self, epoch, logs=None):
        last = epoch + 1 == self.params.get("epochs")
        if logs is not None and ((epoch + 1) % self.every_epochs == 0 or last):
            logs.update(self.evaluate(str(epoch)))


class Throughput(keras.callbacks.Callback):
    """Per epoch: ``epoch_time_s``, global ``samples_per_s``, step time p50/p95 (ms).

    ``steady_state()`` summarises the epochs after the first, whose time
    includes tracing and graph compilation.
    """

    def __init__(self, global_samples_per_step: int) -> None:
        super().__init__()
        self.samples_per_step = global_samples_per_step
        self.epochs: list[tuple[float, int]] = []  # (seconds, steps)
        self._steps: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._steps = []
        self._epoch_start = time.perf_counter()

    first_step_at: float | None = None  # wall clock (time.time) of the first step

    def on_train_batch_begin(self, batch, logs=None):
        self._step_start = time.perf_counter()
        if self.first_step_at is None:
            self.first_step_at = time.time()

    def on_train_batch_end(self, batch, logs=None):
        self._steps.append(time.perf_counter() - self._step_start)

    def on_epoch_end(self, epoch, logs=None):
        elapsed = time.perf_counter() - self._epoch_start
        self.epochs.append((elapsed, len(self._steps)))
        if logs is not None and self._steps:
            p50, p95 = np.percentile(self._steps, [50, 95]) * 1000.0
            logs.update(
                epoch_time_s=elapsed,
                step_time_p50_ms=p50,
                step_time_p95_ms=p95,
                samples_per_s=len(self._steps) * self.samples_per_step / elapsed,
            )

    def steady_state(self) -> dict[str, float]:
        """Throughput over all epochs but the first (all epochs if there is only one)."""
        epochs = self.epochs[1:] or self.epochs
        seconds = sum(t for t, _ in epochs)
        steps = sum(n for _, n in epochs)
        if not seconds:
            return {}
        found = {
            "steady_samples_per_s": steps * self.samples_per_step / seconds,
            "steady_step_time_ms": 1000.0 * seconds / max(steps, 1),
        }
        driver_start = os.environ.get(ENV_DRIVER_START)
        if driver_start and self.first_step_at is not None:
            found["startup_s"] = self.first_step_at - float(driver_start)
        return found


def current_lr(optimizer) -> float:
    """The learning rate of the optimizer's last update: its schedule at the last step."""
    inner, lr = learning_rate_of(optimizer)
    if isinstance(lr, keras.optimizers.schedules.LearningRateSchedule):
        lr = lr(max(int(inner.iterations.numpy()) - 1, 0))
    return float(keras.ops.convert_to_numpy(lr))


class StepMetrics(keras.callbacks.Callback):
    """Every ``every`` training steps: that step's rank-averaged loss, the LR and global
    samples/s. The loss comes from the step agreement (a callback placed before this one),
    which averaged it in the gradients' allreduce: no collective of its own.
    ``log_metrics`` runs on the master.
    """

    def __init__(
        self,
        every: int,
        global_batch: int,
        agreement: StepAgreement,
        log_metrics: Callable | None,
    ) -> None:
        super().__init__()
        self.every, self.global_batch, self.log_metrics = every, global_batch, log_metrics
        self.agreement = agreement
        self._last = (0, 0.0)

    def on_train_begin(self, logs=None):
        self._step = int(self.model.optimizer.iterations.numpy())
        self._last = (self._step, time.perf_counter())

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1  # counted here: reading the optimizer's step every batch syncs
        step = self._step
        if step % self.every:
            return
        loss = self.agreement.loss
        now = time.perf_counter()
        speed = (step - self._last[0]) * self.global_batch / max(now - self._last[1], 1e-9)
        self._last = (step, now)
        if self.log_metrics is not None:
            self.log_metrics(
                {
                    "step_loss": loss,
                    "step_lr": current_lr(self.model.optimizer),
                    "step_samples_per_s": speed,
                    **noise_scale_metrics(self.model, prefix="step_"),
                },
                step,
            )


def noise_scale_metrics(model, prefix: str = "") -> dict[str, float]:
    """The gradient noise scale's smoothed metrics (:mod:`~tntrun.engine.noise_scale`),
    named with ``prefix``; empty when the model's optimizer does not measure it."""
    noise = noise_scale_of(getattr(model, "optimizer", None))
    found = {} if noise is None else noise.metrics()
    return {f"{prefix}{name}": value for name, value in found.items()}


class NoiseScaleLogger(keras.callbacks.Callback):
    """Add the gradient noise scale and the estimates it comes from to each epoch's logs
    (the same on every rank: they are made of allreduced values)."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs.update(noise_scale_metrics(self.model))


class LearningRateLogger(keras.callbacks.Callback):
    """Add the learning rate of the epoch's last step as ``lr``."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = current_lr(self.model.optimizer)


class PrecisionRecord(keras.callbacks.Callback):
    """Master rank: write the dtypes the model trains in (``observed_precision``) as JSON
    to ``path`` when training begins, so the precision of a run is evidenced by the model
    the ranks built, not by the plan that asked for it."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def on_train_begin(self, logs=None):
        self.path.write_text(json.dumps(observed_precision(self.model), indent=2))


class EpochMetricsLogger(keras.callbacks.Callback):
    """Master rank: hand each epoch's logs (already reduced over the ranks) to ``log_metrics``."""

    def __init__(self, log_metrics: Callable[[dict[str, float], int], None]) -> None:
        super().__init__()
        self.log_metrics = log_metrics

    def on_epoch_end(self, epoch, logs=None):
        if logs:
            self.log_metrics({k: float(v) for k, v in logs.items()}, epoch)
