"""The callbacks of a rank, in the order that matters: the guards, the metrics, the users'
callbacks between the two sides of the stop agreement, the master rank's writers, the
heartbeat last."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import keras
from hydra.utils import instantiate

from tntrun.config.callback_checks import RANK_SCOPES
from tntrun.contract.checkpoints import CheckpointMeta
from tntrun.contract.metrics import MetricsWriter
from tntrun.contract.run_files import (
    ENV_LIVE_PROGRESS,
    HEARTBEATS,
    PRECISION,
    TENSORBOARD,
    TRAINED,
)
from tntrun.contract.stop_requests import StopRequests
from tntrun.engine.bleu import BleuEvaluation
from tntrun.engine.checkpointing import Checkpointer
from tntrun.engine.commits import Commits
from tntrun.engine.heartbeat import Heartbeat
from tntrun.engine.metric_callbacks import (
    AverageTrainMetrics,
    EpochMetricsLogger,
    LearningRateLogger,
    NoiseScaleLogger,
    PrecisionRecord,
    ShardedValidation,
    StepMetrics,
    Throughput,
)
from tntrun.engine.model_average import AverageNonTrainable
from tntrun.engine.nonfinite import NonFiniteGuard
from tntrun.engine.pipelines import RankData
from tntrun.engine.preemption import PreemptionGuard
from tntrun.engine.progress import EpochProgress
from tntrun.engine.step_agreement import StepAgreement
from tntrun.engine.stop_agreement import StopAgreement
from tntrun.engine.weight_sync import WeightSyncGuard
from tntrun.planning.plan import Plan

# Callbacks that write files or report (one writer is enough): without a ``ranks`` key they
# run on the master rank only; every other callback runs on all ranks, so a callback that
# changes training (EarlyStopping, ReduceLROnPlateau, a user's own) decides on each.
MASTER_ONLY_CLASSES = (
    keras.callbacks.ModelCheckpoint,
    keras.callbacks.CSVLogger,
    keras.callbacks.TensorBoard,
    keras.callbacks.BackupAndRestore,
    keras.callbacks.RemoteMonitor,
    keras.callbacks.ProgbarLogger,
)


@dataclass(frozen=True)
class RankCallbacks:
    """The callbacks of ``fit``, and those the later stages read."""

    callbacks: list[keras.callbacks.Callback]
    throughput: Throughput
    sync_guard: WeightSyncGuard
    preemption: PreemptionGuard
    metrics_log: MetricsWriter | None  # rank 0's metrics stream to the driver
    commits: Commits | None = None  # rank 0 of an elastic run

    def start_at_batch(self, batch: int) -> None:
        """A resumed epoch starts past its first ``batch`` batches: tell those that count."""
        for counter in (self.preemption, self.commits):
            if counter is not None:
                counter.start_at_batch(batch)


def build_callbacks(
    plan: Plan,
    run_dir: Path,
    data: RankData,
    agreement: StepAgreement,
    save_model: Callable[[Path], Any],
    requests: StopRequests | None = None,
) -> RankCallbacks:
    """Every callback of this rank; ``save_model`` writes a clean model (the best one)."""
    # Rank 0's metrics go to the driver, which logs them to MLflow (no rank imports MLflow).
    metrics_log = MetricsWriter(run_dir) if data.rank == 0 else None
    throughput = Throughput(plan.global_batch_size)
    sync_guard = WeightSyncGuard(plan.settings.faults.check_sync_every_epochs)
    requests = requests or StopRequests([], run_dir)
    trained = run_dir / TRAINED if data.rank == 0 else None
    preemption = PreemptionGuard(requests, agreement, plan.steps_per_epoch, plan.epochs, trained)
    callbacks: list[keras.callbacks.Callback] = [
        throughput,  # first: its epoch time leaves out the others' per-epoch work
        agreement,  # reads the step's averaged loss and stop request for the two guards
        NonFiniteGuard(agreement),  # before any other callback sees a bad step
        preemption,  # after the non-finite guard: a bad step is not saved
        AverageNonTrainable(),  # before all that reads the model at the epoch's end
        sync_guard,  # after the averaging: it checks the non-trainable weights too
        *metric_callbacks(plan, data, agreement, metrics_log),
    ]
    stop_agreement = StopAgreement(run_dir, data.rank, plan.epochs, agreement)
    callbacks.append(stop_agreement.before)
    callbacks += user_callbacks(plan.settings.callbacks, data.rank == 0)
    callbacks.append(stop_agreement.after)  # before rank 0's checkpoint: it sees the stop
    if metrics_log is not None:
        callbacks += master_callbacks(plan, run_dir, data, metrics_log, save_model, agreement)
    commits = elastic_commits(plan, run_dir) if data.rank == 0 else None
    callbacks += [commits] if commits else []
    callbacks.append(Heartbeat(run_dir / HEARTBEATS, data.rank))  # last: see Heartbeat
    return RankCallbacks(callbacks, throughput, sync_guard, preemption, metrics_log, commits)


def metric_callbacks(
    plan: Plan, data: RankData, agreement: StepAgreement, metrics_log: MetricsWriter | None
) -> list[keras.callbacks.Callback]:
    """Every rank's metrics: the LR, the exact training metrics, the sharded validation and
    (``tracking.log_every_steps``) the step metrics, logged by rank 0."""
    every = plan.settings.tracking.log_every_steps
    chosen: list[keras.callbacks.Callback] = [
        LearningRateLogger(),
        AverageTrainMetrics(plan.steps_per_epoch * plan.micro_batch_size),
        ShardedValidation(data.val, data.val_samples, plan.settings.eval.every_epochs),
        NoiseScaleLogger(),  # after the averaging: its numbers are the same on every rank
    ]
    if every > 0:
        log = metrics_log.log if metrics_log else None
        chosen.append(StepMetrics(every, plan.global_batch_size, agreement, log))
    return chosen


def elastic_commits(plan: Plan, run_dir: Path) -> Commits | None:
    """An elastic run's commits (rank 0), after the guards: a bad step is not committed."""
    if plan.elastic_nodes is None:
        return None
    every, keep = plan.settings.elastic.commit_every_steps, plan.settings.checkpoint.keep
    meta = checkpoint_meta(plan)
    return Commits(run_dir, every, keep, plan.steps_per_epoch, plan.epochs, meta)


def _progress_line(metrics: dict[str, float], epoch: int, epochs: int) -> str:
    shown = " ".join(
        f"{k}={v:.4g}"
        for k, v in metrics.items()
        if k == "lr" or any(part in k for part in ("loss", "acc", "bleu"))
    )
    speed = metrics.get("samples_per_s")
    suffix = f" ({speed:,.0f} samples/s)" if speed else ""
    return f"epoch {epoch + 1}/{epochs}: {shown}{suffix}"


def user_callbacks(specs: dict[str, Any], is_master: bool) -> list[keras.callbacks.Callback]:
    """Instantiate ``callbacks.<name>`` entries meant for this rank: its ``ranks`` key, else
    the master rank for file writers and loggers (MASTER_ONLY_CLASSES), all ranks for the rest."""
    chosen = []
    for name, spec in specs.items():
        spec = dict(spec)
        scope = spec.pop("ranks", None)
        if scope not in (None, *RANK_SCOPES):
            raise ValueError(f"callbacks.{name}.ranks={scope!r}: use all_ranks or master_only")
        if scope == "master_only" and not is_master:
            continue  # not even built: its constructor may have side effects
        callback = instantiate(spec)
        if scope is None:
            scope = "master_only" if isinstance(callback, MASTER_ONLY_CLASSES) else "all_ranks"
        if scope == "all_ranks" or is_master:
            chosen.append(callback)
    return chosen


def checkpoint_meta(plan: Plan) -> Callable[[int, int], CheckpointMeta]:
    """(epochs completed, training step) -> the metadata of a checkpoint of this run."""

    def describe(epoch: int, step: int) -> CheckpointMeta:
        return CheckpointMeta(
            epoch, step, plan.world_size, plan.global_batch_size, plan.config_hash
        )

    return describe


def master_callbacks(
    plan: Plan,
    run_dir: Path,
    data: RankData,
    metrics_log: MetricsWriter,
    save_model: Callable[[Path], Any],
    agreement: StepAgreement,
) -> list[keras.callbacks.Callback]:
    """Logging, progress, the precision record, checkpoints, BLEU and TensorBoard: the
    master rank's callbacks."""

    def log_epoch(metrics: dict[str, float], epoch: int) -> None:
        metrics_log.log(metrics, step=epoch)
        print(_progress_line(metrics, epoch, plan.epochs), flush=True)

    train = plan.settings.train
    # BLEU first: its score is in the epoch's logs for the logger and the checkpointer.
    chosen: list[keras.callbacks.Callback | None] = [bleu_evaluation(plan, run_dir, data)]
    chosen += [EpochMetricsLogger(log_epoch), PrecisionRecord(run_dir / PRECISION)]
    chosen.append(checkpointer(plan, run_dir, save_model))
    if train.tensorboard:
        chosen.append(
            keras.callbacks.TensorBoard(
                log_dir=str(run_dir / TENSORBOARD), profile_batch=train.profile_batches or 0
            )
        )
    if train.progress_interval_s > 0:
        live = os.environ.get(ENV_LIVE_PROGRESS) == "1"  # a terminal shows it
        chosen.append(EpochProgress(train.progress_interval_s, plan, agreement, live))
    return [callback for callback in chosen if callback is not None]


def bleu_evaluation(plan: Plan, run_dir: Path, data: RankData) -> BleuEvaluation | None:
    """A translation dataset's BLEU on its validation text (None for other tasks)."""
    if data.info.task != "translation" or not hasattr(data.dataset, "val_text"):
        return None
    evaluation = plan.settings.eval
    return BleuEvaluation(
        data.dataset,
        run_dir,
        evaluation.every_epochs,
        evaluation.bleu_max_sentences,
        evaluation.bleu_beam_size,
        data.info.input_shape[0],
    )


def checkpointer(
    plan: Plan, run_dir: Path, save_model: Callable[[Path], Any]
) -> Checkpointer | None:
    """The checkpoints ``checkpoint.every_epochs`` asks for, and the best by its monitor."""
    ckpt = plan.settings.checkpoint
    if ckpt.every_epochs <= 0 and not ckpt.monitor:
        return None
    return Checkpointer(
        run_dir,
        ckpt.every_epochs,
        ckpt.keep,
        checkpoint_meta(plan),
        min_interval_s=ckpt.min_interval_s,
        monitor=ckpt.monitor,
        mode=ckpt.mode.value,
        save_model=save_model,
    )
