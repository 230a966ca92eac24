"""Data-parallel Keras training of one planned run, as one rank."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tntrun.config.zoo import build_dataset, build_model, distributes_automatically
from tntrun.contract.checkpoints import STATE_PREFIX, CheckpointMeta, config_hash
from tntrun.contract.metrics import MetricsWriter
from tntrun.contract.run_files import (
    ENV_LIVE_PROGRESS,
    FINAL_MODEL,
    FINAL_WEIGHTS,
    HEARTBEATS,
    MLFLOW_MODEL,
    PRECISION,
    TENSORBOARD,
)
from tntrun.contract.stop_requests import StopRequests
from tntrun.engine import callbacks as cb
from tntrun.engine import data_parallel as dp
from tntrun.engine import nonfinite, precision
from tntrun.engine.bleu import BleuEvaluation
from tntrun.engine.data import distribute_eval, distribute_train, shard_size
from tntrun.engine.lr_schedule import PlannedSchedule, learning_rate_of
from tntrun.engine.mfu import model_flop_utilisation
from tntrun.engine.mlflow_model import save_mlflow_models
from tntrun.engine.nonfinite import NonFiniteGuard, NonFiniteLoss, Snapshot
from tntrun.engine.optimizers import build_optimizer
from tntrun.engine.preemption import Preempted, PreemptionGuard, checkpoint_and_record
from tntrun.engine.tasks import compile_spec
from tntrun.planning.plan import Plan

COMPRESSION = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}
RANK_SCOPES = ("all_ranks", "master_only")
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


def input_pipelines(
    cfg: Any, plan: Plan, dataset: Any, info, rank: int, size: int, first_epoch: int | None = None
):
    """(train stream from ``first_epoch`` (default: the plan's), this rank's validation
    batches, its validation sample count)."""
    if not distributes_automatically(cfg.dataset):
        # Manual mode: the dataset shards and micro-batches itself for this rank.
        train, val = dataset.load_for_rank(
            rank=rank,
            size=size,
            micro_batch=plan.micro_batch_size,
            val_micro_batch=plan.val_micro_batch_size,
            seed=int(cfg.seed),
        )
        samples, batches = val.reduce(
            (0, 0), lambda seen, batch: (seen[0] + tf.shape(batch[0])[0], seen[1] + 1)
        )
        # Its length stated: of a dataset whose length it cannot tell (files sharded and
        # interleaved), Keras 3's evaluate warns "Your input ran out of data" at every end.
        val = val.apply(tf.data.experimental.assert_cardinality(int(batches.numpy())))
        return train.repeat(), val, int(samples.numpy())
    train_data, val_data = dataset.load()
    train = distribute_train(
        train_data,
        num_samples=info.num_train,
        micro_batch=plan.micro_batch_size,
        steps_per_epoch=plan.steps_per_epoch,
        rank=rank,
        size=size,
        seed=int(cfg.seed),
        first_epoch=plan.initial_epoch if first_epoch is None else first_epoch,
        epochs=plan.epochs,
        drop_remainder=bool(cfg.train.drop_remainder),
    )
    val = distribute_eval(val_data, micro_batch=plan.val_micro_batch_size, rank=rank, size=size)
    return train, val, shard_size(info.num_val, rank, size)


class UserModelError(ValueError):
    """The user's model cannot train here (e.g. built with tf_keras): a config error."""


def build_keras3_model(cfg: Any, info) -> Any:
    """The configured model with float32 outputs (:func:`precision.float32_outputs`),
    refused with one line when it is not a Keras 3 model or cannot get them."""
    model = build_model(cfg.model, info)
    try:
        dp.require_keras3(model, "model")
        return precision.float32_outputs(model, info.input_shape)
    except (dp.LegacyKeras, precision.OwnTrainStep) as refused:
        raise UserModelError(f"model._target_={cfg.model._target_}: {refused}") from None


def restore_and_broadcast(model, optimizer, plan: Plan) -> None:
    """Rank 0 restores the plan's checkpoint (if any); every rank then gets rank 0's state.

    The optimizer's step (which drives the LR schedule) is set to the plan's
    initial step, rescaled when the layout changed since the checkpoint.
    """
    optimizer.build(model.trainable_variables)
    if plan.resume_from is not None and hvd.rank() == 0:
        precision.read_checkpoint(model, optimizer, str(Path(plan.resume_from) / STATE_PREFIX))
        optimizer.iterations.assign(plan.initial_step)
        print(
            f"resumed from {plan.resume_from} at epoch {plan.initial_epoch}, "
            f"step {plan.initial_step}",
            flush=True,
        )
    dp.broadcast_state(model, optimizer, root_rank=0)


def save_final(model, cfg, info, run_dir: Path, val_batches) -> None:
    """Master rank: final weights as NumPy arrays, a clean, uncompiled Keras model and, with
    tracking.log_model, MLflow Model folders of it and of the best model (the driver logs
    them; ``val_batches`` give the input example)."""
    np.savez(run_dir / FINAL_WEIGHTS, *model.get_weights())
    clean = save_clean_model(model, cfg, info, run_dir / FINAL_MODEL)
    if not cfg.tracking.log_model:
        return
    if clean is None:  # MLflow's Keras flavour saves through Keras too
        print(f"tntrun: note: no {MLFLOW_MODEL} either (tracking.log_model)", flush=True)
        return
    save_mlflow_models(clean, run_dir, val_batches, bool(cfg.tracking.check_model_loads))


def save_clean_model(model, cfg, info, path: Path) -> Any | None:
    """``model``'s weights in a freshly built, uncompiled model (no data-parallel optimizer),
    saved at ``path``; that model, or None when Keras cannot serialise it."""
    with precision.policy("float32"):  # the weights are float32 in every train.precision
        # Built as in training (a subclassed model is called on an input to make its weights).
        clean = precision.float32_outputs(build_model(cfg.model, info), info.input_shape)
    clean.set_weights(model.get_weights())
    try:
        clean.save(path)
        return clean
    except NotImplementedError as unserialisable:  # a subclassed model without get_config
        path.unlink(missing_ok=True)
        why = str(unserialisable).strip().splitlines()[0]
        note = (
            f"no {path.name}: Keras cannot serialise {type(clean).__name__} ({why} ...: give "
            f"it a get_config()); its weights are in {FINAL_WEIGHTS} and the checkpoints"
        )
        print(f"tntrun: note: {note}", flush=True)
        return None


def train(
    cfg: Any, plan: Plan, run_dir: Path, requests: StopRequests | None = None
) -> dict[str, float]:
    """Train as one rank of ``plan``; return the final averaged metrics (same on all ranks).

    Raises :class:`Preempted` on every rank, after the checkpoint of the step they agreed
    on, once any rank was asked to stop (``requests``).
    """
    rank, size = hvd.rank(), hvd.size()
    if size != plan.world_size:
        raise RuntimeError(f"launched {size} ranks but the plan expects {plan.world_size}")
    dataset = build_dataset(cfg.dataset)
    info = dataset.info()
    train_ds, val_ds, val_samples = input_pipelines(cfg, plan, dataset, info, rank, size)

    precision.set_precision(plan.precision)  # before the model is built
    model = build_keras3_model(cfg, info)
    optimizer = dp.data_parallel(
        precision.with_loss_scaling(
            build_optimizer(cfg.optimizer, PlannedSchedule(plan.schedule)), plan.precision
        ),
        compression=COMPRESSION[str(cfg.horovod.compression)],
        backward_passes_per_step=plan.backward_passes_per_step,
    )
    agreement = dp.agree_after_each_step(optimizer)  # for the non-finite and preemption guards
    # Horovod's ops are not XLA ops: train.jit_compile compiles the model's part alone.
    model.compile(
        optimizer=optimizer,
        jit_compile=False,
        **compile_spec(info.task, float(cfg.train.label_smoothing)),
    )
    if plan.jit_compile:
        precision.compile_gradients_with_xla(model)
    restore_and_broadcast(model, optimizer, plan)

    # Rank 0's metrics go to the driver, which logs them to MLflow (no rank imports MLflow).
    metrics_log = MetricsWriter(run_dir) if rank == 0 else None
    throughput = cb.Throughput(plan.global_batch_size)
    sync_guard = cb.WeightSyncGuard(int(cfg.train.check_sync_every_epochs))
    requests = requests or StopRequests([], run_dir)
    preemption = PreemptionGuard(requests, agreement, plan.steps_per_epoch, plan.epochs)
    callbacks: list[keras.callbacks.Callback] = [
        throughput,  # first: its epoch time leaves out the others' per-epoch work
        agreement,  # reads the step's averaged loss and stop request for the two guards
        NonFiniteGuard(agreement),  # before any other callback sees a bad step
        preemption,  # after the non-finite guard: a bad step is not saved
        sync_guard,
        cb.LearningRateLogger(),
        cb.AverageTrainMetrics(plan.steps_per_epoch * plan.micro_batch_size),
        cb.ShardedValidation(val_ds, val_samples, int(cfg.train.epochs_between_evals)),
    ]
    if cfg.tracking.log_every_steps > 0:
        callbacks.append(
            cb.StepMetrics(
                int(cfg.tracking.log_every_steps),
                plan.global_batch_size,
                agreement,
                metrics_log.log if metrics_log else None,
            )
        )
    stop_agreement = cb.StopAgreement(run_dir, rank, plan.epochs, agreement)
    callbacks.append(stop_agreement.before)
    callbacks += user_callbacks(OmegaConf.to_container(cfg.callbacks, resolve=True), rank == 0)
    callbacks.append(stop_agreement.after)  # before rank 0's checkpoint: it sees the stop
    if metrics_log is not None:
        if info.task == "translation" and hasattr(dataset, "val_text"):
            callbacks.append(
                BleuEvaluation(
                    dataset,
                    run_dir,
                    int(cfg.train.epochs_between_evals),
                    int(cfg.train.bleu_max_sentences),
                    int(cfg.train.bleu_beam_size),
                    info.input_shape[0],
                )
            )
        callbacks += master_callbacks(
            cfg, plan, run_dir, metrics_log, lambda path: save_clean_model(model, cfg, info, path)
        )
        if cfg.train.progress_interval_s > 0:
            live = os.environ.get(ENV_LIVE_PROGRESS) == "1"  # a terminal shows it
            interval = float(cfg.train.progress_interval_s)
            callbacks.append(cb.EpochProgress(interval, plan, agreement, live))
    callbacks.append(cb.Heartbeat(run_dir / HEARTBEATS, rank))  # last: see Heartbeat

    def stream(first_epoch: int):
        return input_pipelines(cfg, plan, dataset, info, rank, size, first_epoch)[0]

    try:
        history = fit_with_rollbacks(
            model,
            optimizer,
            cfg,
            plan,
            run_dir,
            train_ds,
            stream,
            callbacks,
            metrics_log,
            preemption,
        )
    except Preempted as stop:
        meta = replace(checkpoint_meta(cfg, plan)(stop.epoch, stop.step), batch=stop.batch)
        checkpoint_and_record(model, stop, meta, run_dir, int(cfg.checkpoint.keep))
        raise
    final = {k: float(v[-1]) for k, v in history.history.items()}
    # All ranks: they measure the matmul peak together; rank 0 gets the metrics.
    utilisation = model_flop_utilisation(model, info, plan, throughput.steady_state())
    if metrics_log is not None:
        summary = {
            **throughput.steady_state(),
            "weights_rank_spread": sync_guard.final_spread,
            **utilisation,
            **precision.loss_scale_metrics(optimizer),
        }
        metrics_log.log(summary, step=plan.epochs - 1)
        save_final(model, cfg, info, run_dir, val_ds)
    if cfg.predict_scaling:  # last: it recompiles the model, whose weights are saved by now
        predict_scaling(
            model,
            cfg,
            plan,
            info.task,
            throughput,
            run_dir,
            metrics_log,
            input_pipelines(cfg, plan, dataset, info, rank, size)[0],
        )
    if metrics_log is not None:
        metrics_log.close()
    return final


def fit_with_rollbacks(
    model,
    optimizer,
    cfg,
    plan: Plan,
    run_dir: Path,
    train_ds,
    stream,
    callbacks,
    metrics_log,
    preemption: PreemptionGuard,
):
    """``model.fit`` from the plan's epoch and batch; after a non-finite loss, fail
    (train.on_nonfinite=fail) or roll back to the last good state with a lower LR, up to
    train.max_rollbacks times."""
    rollback = str(cfg.train.on_nonfinite) == "rollback"
    snapshot = Snapshot(model, optimizer) if rollback else None  # the state before step 1
    epoch, batch, rollbacks = plan.initial_epoch, plan.initial_batch, 0
    while True:
        try:
            return fit_from(model, plan, epoch, batch, train_ds, stream, callbacks, preemption)
        except NonFiniteLoss as event:
            # Bad data are not rolled back: the same batch would come again.
            if event.data or not rollback or rollbacks >= int(cfg.train.max_rollbacks):
                if metrics_log is not None:
                    nonfinite.record(run_dir, event, "fail", rollbacks=rollbacks)
                raise
            rollbacks += 1
            epoch, batch, restored = nonfinite.roll_back(model, optimizer, plan, run_dir, snapshot)
            _, schedule = learning_rate_of(optimizer)  # the PlannedSchedule
            schedule.scale.assign(schedule.scale * float(cfg.train.rollback_lr_factor))
            lr_scale = float(schedule.scale.numpy())
            if metrics_log is not None:
                nonfinite.record(
                    run_dir,
                    event,
                    "rollback",
                    rollback=rollbacks,
                    restored=restored,
                    lr_scale=lr_scale,
                )
                metrics_log.log({"rollbacks": rollbacks}, step=event.step)
                print(
                    f"{event}: rollback {rollbacks}/{cfg.train.max_rollbacks} to {restored} "
                    f"(epoch {epoch}), LR x{lr_scale:g}",
                    flush=True,
                )
            train_ds = stream(epoch)


def fit_from(
    model,
    plan: Plan,
    epoch: int,
    batch: int,
    train_ds,
    stream,
    callbacks,
    preemption: PreemptionGuard,
):
    """Train epochs ``epoch``.. of the plan, the first from its ``batch``-th batch (a
    preempted run's checkpoint is mid-epoch): that epoch alone first, then the rest. The
    streams come shuffled by tntrun's input pipeline (``shuffle=False``: Keras cannot)."""
    spe, history = plan.steps_per_epoch, None
    if batch:
        preemption.start_at_batch(batch)
        history = model.fit(
            train_ds.skip(batch),
            epochs=epoch + 1,
            initial_epoch=epoch,
            steps_per_epoch=spe - batch,
            callbacks=callbacks,
            verbose=0,
            shuffle=False,
        )
        epoch += 1
        train_ds = stream(epoch) if epoch < plan.epochs else None
    if epoch < plan.epochs and not cb.stopped_early(callbacks):
        history = model.fit(
            train_ds,
            epochs=plan.epochs,
            initial_epoch=epoch,
            steps_per_epoch=spe,
            callbacks=callbacks,
            verbose=0,
            shuffle=False,
        )
    return history


def predict_scaling(
    model, cfg, plan: Plan, task: str, throughput, run_dir: Path, metrics_log, batches
) -> None:
    """Profile this run on every rank; rank 0 prints, writes and logs the prediction."""
    from tntrun.engine import scaling_profile

    measured_s = throughput.steady_state()["steady_step_time_ms"] / 1e3
    profile = scaling_profile.profile_run(model, cfg, plan, task, batches, measured_s)
    if metrics_log is not None:
        scaling_profile.report(profile, run_dir, metrics_log.log, plan.epochs - 1)


def checkpoint_meta(cfg: Any, plan: Plan) -> Callable[[int, int], CheckpointMeta]:
    """(epochs completed, training step) -> the metadata of a checkpoint of this run."""
    problem = config_hash(OmegaConf.to_container(cfg, resolve=True))

    def describe(epoch: int, step: int) -> CheckpointMeta:
        return CheckpointMeta(epoch, step, plan.world_size, plan.global_batch_size, problem)

    return describe


def master_callbacks(
    cfg: Any, plan: Plan, run_dir: Path, metrics_log: Any, save_model: Any
) -> list[keras.callbacks.Callback]:
    """Logging, progress, the precision record, checkpoints and TensorBoard: the master
    rank's callbacks."""

    def log_epoch(metrics: dict[str, float], epoch: int) -> None:
        metrics_log.log(metrics, step=epoch)
        print(_progress_line(metrics, epoch, plan.epochs), flush=True)

    chosen: list[keras.callbacks.Callback] = [
        cb.EpochMetricsLogger(log_epoch),
        cb.PrecisionRecord(run_dir / PRECISION),
    ]
    ckpt = cfg.checkpoint
    if ckpt.every_epochs > 0 or ckpt.monitor:
        chosen.append(
            cb.Checkpointer(
                run_dir,
                int(ckpt.every_epochs),
                int(ckpt.keep),
                checkpoint_meta(cfg, plan),
                min_interval_s=float(ckpt.min_interval_s),
                monitor=ckpt.monitor,
                mode=str(ckpt.mode),
                save_model=save_model,
            )
        )
    if cfg.train.tensorboard:
        chosen.append(
            keras.callbacks.TensorBoard(
                log_dir=str(run_dir / TENSORBOARD), profile_batch=cfg.train.profile_batches or 0
            )
        )
    return chosen
