"""Data-parallel Keras training of one planned run."""

from __future__ import annotations

from typing import Any

import horovod.tensorflow as hvd
import horovod.tensorflow.keras as hvd_keras
import tf_keras as keras
from hydra.utils import instantiate

from tntrun.engine import callbacks as cb
from tntrun.engine.data import distribute_eval, distribute_train, shard_size
from tntrun.engine.lr_schedule import PlannedSchedule
from tntrun.engine.optimizers import build_optimizer
from tntrun.plan import Plan

COMPRESSION = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}


def _progress_line(metrics: dict[str, float], epoch: int, epochs: int) -> str:
    shown = " ".join(f"{k}={v:.4f}" for k, v in metrics.items() if not k.endswith("_s"))
    speed = metrics.get("samples_per_s")
    suffix = f" ({speed:,.0f} samples/s)" if speed else ""
    return f"epoch {epoch + 1}/{epochs}: {shown}{suffix}"


def train(cfg: Any, plan: Plan) -> dict[str, float]:
    """Train as one rank of ``plan``; return the final averaged metrics (same on all ranks)."""
    rank, size = hvd.rank(), hvd.size()
    if size != plan.world_size:
        raise RuntimeError(f"launched {size} ranks but the plan expects {plan.world_size}")

    dataset = instantiate(cfg.dataset)
    info = dataset.info()
    train_data, val_data = dataset.load()
    train_ds = distribute_train(
        train_data,
        num_samples=info.num_train,
        micro_batch=plan.micro_batch_size,
        steps_per_epoch=plan.steps_per_epoch,
        rank=rank,
        size=size,
        seed=int(cfg.seed),
    )
    val_ds = distribute_eval(val_data, micro_batch=plan.val_micro_batch_size, rank=rank, size=size)

    model = instantiate(cfg.model, input_shape=info.input_shape, num_classes=info.num_classes)
    optimizer = hvd_keras.DistributedOptimizer(
        build_optimizer(cfg.optimizer, PlannedSchedule(plan.schedule)),
        compression=COMPRESSION[str(cfg.horovod.compression)],
        backward_passes_per_step=plan.backward_passes_per_step,
        average_aggregated_gradients=True,
    )
    model.compile(
        optimizer=optimizer,
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )

    callbacks: list[keras.callbacks.Callback] = [
        cb.BroadcastInitialState(),
        cb.WeightSyncGuard(),
        cb.EpochTimer(plan.steps_per_epoch * plan.global_batch_size),
        cb.LearningRateLogger(),
        cb.AverageTrainMetrics(plan.steps_per_epoch * plan.micro_batch_size),
        cb.ShardedValidation(
            val_ds, shard_size(info.num_val, rank, size), int(cfg.train.epochs_between_evals)
        ),
    ]
    if rank == 0:
        from tntrun.engine.mlflow_logger import RankMetricsLogger

        mlflow_logger = RankMetricsLogger()

        def log_epoch(metrics: dict[str, float], epoch: int) -> None:
            mlflow_logger.log(metrics, step=epoch)
            print(_progress_line(metrics, epoch, plan.epochs), flush=True)

        callbacks.append(cb.EpochMetricsLogger(log_epoch))

    history = model.fit(train_ds, epochs=plan.epochs, callbacks=callbacks, verbose=0)
    return {k: float(v[-1]) for k, v in history.history.items()}
