"""tntrun's own Keras callbacks (Horovod's Keras callbacks break under Keras 3)."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from tntrun.contract import run_files
from tntrun.contract.checkpoints import publish, publish_best
from tntrun.contract.metrics import lowest_is_best
from tntrun.contract.run_files import ENV_DRIVER_START
from tntrun.engine.collectives import checksums_across_ranks, weighted_mean
from tntrun.engine.lr_schedule import learning_rate_of
from tntrun.engine.precision import observed_precision, state_checkpoint
from tntrun.engine.step_agreement import StepAgreement


class AverageTrainMetrics(keras.callbacks.Callback):
    """Replace each rank's epoch training metrics by their sample-weighted mean over ranks."""

    def __init__(self, local_samples_per_epoch: int) -> None:
        super().__init__()
        self.weight = local_samples_per_epoch

    def on_epoch_end(self, epoch, logs=None):
        if logs:
            logs.update(weighted_mean(dict(logs), self.weight, name=f"train_metrics.{epoch}"))


class ShardedValidation(keras.callbacks.Callback):
    """Evaluate the validation set split across ranks and add exact global ``val_*`` logs.

    Each rank evaluates its shard; means are re-weighted by shard sizes, so the
    result equals a single-process evaluation of the whole set.
    """

    def __init__(self, dataset: tf.data.Dataset, local_samples: int, every_epochs: int = 1):
        super().__init__()
        self.dataset = dataset
        self.local_samples = local_samples
        self.every_epochs = max(1, every_epochs)

    def evaluate(self, tag: str) -> dict[str, float]:
        local: dict[str, float] = {}
        if self.local_samples:
            local = self.model.evaluate(self.dataset, verbose=0, return_dict=True)
        else:  # no sample on this rank: contribute weight 0 with the same keys
            local = dict.fromkeys(self.model.get_metrics_result(), 0.0)
        averaged = weighted_mean(local, self.local_samples, name=f"val_metrics.{tag}")
        return {f"val_{k}": v for k, v in averaged.items()}

    def on_epoch_end(self, epoch, logs=None):
        last = epoch + 1 == self.params.get("epochs")
        if logs is not None and ((epoch + 1) % self.every_epochs == 0 or last):
            logs.update(self.evaluate(str(epoch)))


class Checkpointer(keras.callbacks.Callback):
    """Master rank: publish model + optimizer state, by epochs and by time, and keep the best.

    A checkpoint is due every ``every_epochs`` epochs once ``min_interval_s``
    passed since the previous one (short epochs do not write one each); the
    last epoch always writes one. With ``monitor``, a new best value of that
    metric also replaces ``checkpoints/best`` (``save_model`` adds a clean
    ``.keras`` model there).
    """

    def __init__(
        self,
        run_dir: Path,
        every_epochs: int,
        keep: int,
        describe: Callable,
        min_interval_s: float,
        monitor: str | None = None,
        mode: str = "auto",
        save_model: Callable[[Path], None] | None = None,
    ) -> None:
        super().__init__()
        self.run_dir, self.every, self.keep, self.describe = run_dir, every_epochs, keep, describe
        self.min_interval_s, self.monitor, self.save_model = min_interval_s, monitor, save_model
        if mode == "auto":
            mode = "min" if monitor and lowest_is_best(monitor) else "max"
        self.better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
        self.best: float | None = None
        self._last_write = time.monotonic()

    def on_train_begin(self, logs=None):
        self._last_write = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        done = epoch + 1
        meta = self.describe(done, int(self.model.optimizer.iterations.numpy()))
        if self.monitor:
            self._keep_best(meta, logs or {})
        last = done == self.params.get("epochs")
        due = self.every > 0 and done % self.every == 0
        waited = time.monotonic() - self._last_write >= self.min_interval_s
        if not (last and self.every > 0) and not (due and waited):
            return
        state = state_checkpoint(self.model, self.model.optimizer)
        path = publish(self.run_dir, meta, lambda prefix: state.write(prefix), self.keep)
        self._last_write = time.monotonic()
        print(f"checkpoint saved: epoch {done} -> {path}", flush=True)

    def _keep_best(self, meta: Any, logs: dict) -> None:
        if self.monitor not in logs:
            if any(key.startswith("val_") for key in logs):  # an evaluated epoch without it
                raise ValueError(
                    f"checkpoint.monitor={self.monitor}: no such metric; this run logs "
                    f"{', '.join(sorted(logs))}"
                )
            return  # not evaluated this epoch (train.epochs_between_evals)
        value = float(logs[self.monitor])
        if not np.isfinite(value) or (self.best is not None and not self.better(value, self.best)):
            return
        self.best = value
        state = state_checkpoint(self.model, self.model.optimizer)
        path = publish_best(
            self.run_dir, meta, lambda prefix: state.write(prefix), self.monitor, value
        )
        if self.save_model is not None:
            self.save_model(path / run_files.FINAL_MODEL)
        print(
            f"best checkpoint: epoch {meta.epoch}, {self.monitor}={value:.4g} -> {path}", flush=True
        )


class WeightSyncGuard(keras.callbacks.Callback):
    """Stop with a clear error when ranks' weights diverge (gradients not averaged).

    Horovod under the wrong Keras silently skips the allreduce; comparing a
    weight checksum after the first step and every ``every_epochs`` catches it.
    """

    def __init__(self, every_epochs: int = 1) -> None:
        super().__init__()
        self.every_epochs = every_epochs
        self._checked_first_step = False

    final_spread: float = float("nan")

    def _check(self, when: str) -> None:
        # Trainable weights only: BatchNorm's moving statistics follow each rank's own
        # batches (as in any Horovod job without SyncBatchNorm) and may differ.
        sums = checksums_across_ranks(self.model.trainable_variables, name=f"weight_sync.{when}")
        spread = self.final_spread = float(sums.max() - sums.min())
        if not np.isfinite(sums).all():
            bad = [rank for rank, value in enumerate(sums.tolist()) if not np.isfinite(value)]
            raise RuntimeError(
                f"weights of rank(s) {bad} are not finite {when} "
                f"(checksums by rank: {sums.tolist()})"
            )
        if spread > 1e-6 * max(1.0, float(abs(sums).max())):
            raise RuntimeError(
                f"ranks' weights diverged {when} (checksums by rank: {sums.tolist()}): gradients "
                "are not being averaged: every update must go through the data-parallel "
                "optimizer (see tntrun.engine.data_parallel)"
            )

    def on_train_batch_end(self, batch, logs=None):
        if not self._checked_first_step:
            self._checked_first_step = True
            self._check("after the first step")

    def on_epoch_end(self, epoch, logs=None):
        if self.every_epochs > 0 and (epoch + 1) % self.every_epochs == 0:
            self._check(f"after epoch {epoch + 1}")

    def on_train_end(self, logs=None):
        self._check("at the end of training")


class StopAgreement:
    """Every rank stops at the same point when any callback asks (``stop_training``).

    A callback that stops training (EarlyStopping after an epoch, a user's own reading
    local state after any step) may decide on one rank only; that rank would leave ``fit``
    while the others wait in the next step's allreduce. ``before`` goes ahead of the users'
    callbacks and notes what is already agreed (preemption and the NaN guard stop at an
    agreed step); ``after`` follows them:

    - inside an epoch, a stop asked on this rank alone is held back and sent with the next
      step's allreduce (the step agreement's ``user_stop``), so every rank stops after that
      step;
    - at an epoch's end, one allgather agrees on the epoch's decisions.

    Rank 0 records an early stop in ``stopped_early.json`` and says so on the console.
    """

    def __init__(self, run_dir: Path, rank: int, epochs: int, agreement: StepAgreement) -> None:
        self.run_dir, self.rank, self.epochs, self.agreement = run_dir, rank, epochs, agreement
        self.stopped_at: int | None = None  # the epoch (0-based) a callback stopped in
        self._stopped_by_steps = False
        self._agreed = False  # stop_training, as agreed before the users' callbacks ran
        self._asked = False  # a callback of this rank asked to stop in this epoch
        self._stopped_after_step: int | None = None  # the step (of the epoch) stopped after
        self.before = _Around(self._note_steps, self._note_step, self)
        self.after = _Around(self._agree, self._hold_back, self)

    def _note_step(self, model, step: int) -> None:
        if self.agreement.user_stop:  # some rank's callback asked at the previous step
            model.stop_training = True
            self._stopped_after_step = step
        self._agreed = bool(model.stop_training)

    def _hold_back(self, model, step: int) -> None:
        if model.stop_training and not self._agreed:  # asked here alone: tell the others
            self._asked = True
            self.agreement.local_user_stop.assign(1.0)
            model.stop_training = False  # stop with them, after the next step

    def _note_steps(self, model, epoch: int) -> None:
        self._stopped_by_steps = bool(model.stop_training) and not self.agreement.user_stop

    def _agree(self, model, epoch: int) -> None:
        # This rank's callbacks asked: inside the epoch, or now (not by an agreed stop).
        mid_epoch = self._stopped_after_step is not None
        asked = self._asked or (bool(model.stop_training) and not mid_epoch)
        self._asked = False
        flag = tf.constant([int(asked and not self._stopped_by_steps)], tf.int32)
        by_rank = hvd.allgather(flag, name=f"stop_agreement.{epoch}").numpy().tolist()
        if not any(by_rank):
            return
        model.stop_training = True
        if epoch + 1 >= self.epochs:
            return
        self.stopped_at, step = epoch, self._stopped_after_step
        if self.rank == 0:
            ranks = [rank for rank, flag in enumerate(by_rank) if flag]
            record = {"epoch": epoch + 1, "epochs": self.epochs, "ranks": ranks}
            where = f"after epoch {epoch + 1} of {self.epochs}"
            if step is not None:  # the step of the epoch (from 1) that every rank ran last
                record["step"] = step + 1
                where = f"in epoch {epoch + 1} of {self.epochs}, after its step {step + 1}"
            (self.run_dir / run_files.STOPPED_EARLY).write_text(json.dumps(record))
            print(
                f"training stopped early {where}: a callback set stop_training on rank(s) "
                f"{ranks}; every rank stops here",
                flush=True,
            )


def stopped_early(callbacks: list[keras.callbacks.Callback]) -> bool:
    """Whether a :class:`StopAgreement` among ``callbacks`` saw a callback stop training."""
    return any(isinstance(c, _Around) and c.owner.stopped_at is not None for c in callbacks)


class _Around(keras.callbacks.Callback):
    """One side of a :class:`StopAgreement`: its actions after each step and each epoch."""

    def __init__(
        self,
        at_epoch_end: Callable[[Any, int], None],
        at_step_end: Callable[[Any, int], None],
        owner: StopAgreement,
    ) -> None:
        super().__init__()
        self._at_epoch_end, self._at_step_end, self.owner = at_epoch_end, at_step_end, owner

    def on_train_batch_end(self, batch, logs=None):
        self._at_step_end(self.model, batch)

    def on_epoch_end(self, epoch, logs=None):
        self._at_epoch_end(self.model, epoch)


def duration(seconds: float) -> str:
    """``95`` -> ``1m35s``; ``4000`` -> ``1h06m``: a time left, to the unit that matters."""
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


class EpochProgress(keras.callbacks.Callback):
    """A line every ``interval_s`` inside an epoch (rank 0): a long epoch is not silent in a
    batch job's log or a terminal. Between lines it costs one clock read per step; the loss
    is the last update's rank-averaged one (the step agreement: no collective of its own).

    With ``live`` (the driver's console is a terminal) it also prints the line every
    :data:`LIVE_EVERY_S` marked as live, which the driver redraws in place."""

    LIVE_EVERY_S = 1.0

    def __init__(
        self, interval_s: float, plan: Any, agreement: StepAgreement, live: bool = False
    ) -> None:
        super().__init__()
        self.interval_s, self.agreement, self.live = interval_s, agreement, live
        self.steps, self.epochs, self.batch = (
            plan.steps_per_epoch,
            plan.epochs,
            plan.global_batch_size,
        )
        self._epoch, self._start, self._next, self._next_live, self._skipped = 0, 0.0, 0.0, 0.0, 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch, self._start = epoch, time.monotonic()
        self._next = self._start + self.interval_s
        self._next_live = self._start + self.LIVE_EVERY_S
        # A preempted run resumes mid-epoch: its first fit runs the epoch's remaining steps.
        self._skipped = self.steps - (self.params or {}).get("steps", self.steps)

    def on_train_batch_end(self, batch, logs=None):
        now = time.monotonic()
        if batch == 0:  # the speed from here: the first step traces and compiles
            self._start = now
            return
        if now >= self._next:
            self._next = self._next_live = now + self.interval_s
            print(self.progress(now, batch), flush=True)
        elif self.live and now >= self._next_live:
            self._next_live = now + self.LIVE_EVERY_S
            print(f"{run_files.LIVE_PREFIX}{self.progress(now, batch)}", flush=True)

    def progress(self, now: float, batch: int) -> str:
        per_step = (now - self._start) / batch
        step = self._skipped + batch + 1
        epoch_left = (self.steps - step) * per_step
        run_left = epoch_left + (self.epochs - self._epoch - 1) * self.steps * per_step
        return (
            f"epoch {self._epoch + 1}/{self.epochs}: step {step}/{self.steps} "
            f"({100 * step // self.steps}%), {self.batch / per_step:,.0f} samples/s, "
            f"loss {self.agreement.loss:.4g}; epoch ends in {duration(epoch_left)}, "
            f"the run in {duration(run_left)}"
        )


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
                },
                step,
            )


class LearningRateLogger(keras.callbacks.Callback):
    """Add the learning rate of the epoch's last step as ``lr``."""

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None:
            logs["lr"] = current_lr(self.model.optimizer)


class Heartbeat(keras.callbacks.Callback):
    """Record this rank's progress (step and phase) in ``<dir>/rank.<N>`` for the watchdog.

    Placed last among the callbacks, so a rank stuck in another callback or in
    its input pipeline shows less progress than the ranks waiting for it.
    """

    RECORD = 32  # bytes: "<step> <phase>" padded, rewritten in place

    def __init__(self, directory: Path, rank: int) -> None:
        super().__init__()
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / f"rank.{rank}"
        self._fd = -1
        self._step = 0

    def _beat(self, phase: str) -> None:
        # One pwrite of a fixed-size record: cheap enough for every step.
        os.pwrite(self._fd, f"{self._step} {phase}".ljust(self.RECORD).encode(), 0)

    def on_train_begin(self, logs=None):  # each fit (a resumed epoch's remainder is one)
        if self._fd < 0:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._step = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_begin(self, batch, logs=None):
        self._beat("begin")

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        self._beat("end")

    def on_test_batch_end(self, batch, logs=None):
        self._beat("eval")

    def on_train_end(self, logs=None):
        os.close(self._fd)
        self._fd = -1


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
    """Master rank: hand each epoch's (already averaged) logs to ``log_metrics``."""

    def __init__(self, log_metrics: Callable[[dict[str, float], int], None]) -> None:
        super().__init__()
        self.log_metrics = log_metrics

    def on_epoch_end(self, epoch, logs=None):
        if logs:
            self.log_metrics({k: float(v) for k, v in logs.items()}, epoch)
