"""Data-parallel Keras training of one planned run, as one rank, in stages.

Shaped as the TF Model Garden's ``base_trainer`` and Keras' own ``Trainer``: build the
data (:mod:`~tntrun.engine.pipelines`), the model and its optimizer
(:mod:`~tntrun.engine.model_set`), the callbacks (:mod:`~tntrun.engine.callback_set`); fit,
with rollbacks after a non-finite loss (:mod:`~tntrun.engine.fitting`); finish: the final
metrics, the saved model (:mod:`~tntrun.engine.final_model`), the scaling prediction.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd

from tntrun.contract.stop_requests import StopRequests
from tntrun.engine import precision
from tntrun.engine.averaging_optimizer import UnscaledLoss
from tntrun.engine.callback_set import RankCallbacks, build_callbacks, checkpoint_meta
from tntrun.engine.final_model import predict_scaling, save_clean_model, save_final
from tntrun.engine.fitting import fit_with_rollbacks
from tntrun.engine.loss_check import LossSetupError, check_loss_setup
from tntrun.engine.mfu import model_flop_utilisation
from tntrun.engine.model_average import average_non_trainable
from tntrun.engine.model_set import RankModel, UserModelError, build_model_and_optimizer
from tntrun.engine.pipelines import RankData, build_data, stream_from
from tntrun.engine.preemption import Preempted, checkpoint_and_record
from tntrun.planning.plan import Plan

# The user's code or config cannot train: one line, as a config error.
USER_ERRORS = (UserModelError, LossSetupError, UnscaledLoss)

__all__ = ["USER_ERRORS", "train"]


def train(plan: Plan, run_dir: Path, requests: StopRequests | None = None) -> dict[str, float]:
    """Train as one rank of ``plan``; return the final metrics (over all ranks, the same on each).

    Raises :class:`Preempted` on every rank, after the checkpoint of the step they agreed
    on, once any rank was asked to stop (``requests``).
    """
    rank, size = hvd.rank(), hvd.size()
    if size != plan.world_size:
        raise RuntimeError(f"launched {size} ranks but the plan expects {plan.world_size}")
    data = build_data(plan, rank, size)
    net = build_model_and_optimizer(plan, data.info)
    check_loss_setup(net.model, data.val, run_dir)

    def save_model(path: Path) -> Any:
        return save_clean_model(net.model, plan.settings.model, data.info, path)

    hooks = build_callbacks(plan, run_dir, data, net.agreement, save_model, requests)
    if hooks.metrics_log is not None and plan.elastic_nodes is not None:
        # Each start of an elastic run's ranks: the UI's world_size chart shows every resize.
        hooks.metrics_log.log({"world_size": size}, step=plan.initial_step)
    history = fit(plan, run_dir, data, net, hooks)
    return finish(plan, run_dir, data, net, hooks, history)


def fit(plan: Plan, run_dir: Path, data: RankData, net: RankModel, hooks: RankCallbacks) -> Any:
    """The plan's epochs; a preemption is checkpointed at the step the ranks agreed on."""

    def stream(first_epoch: int) -> Any:
        return stream_from(plan, data, first_epoch)

    try:
        return fit_with_rollbacks(plan, run_dir, net, hooks, data.train, stream)
    except Preempted as stop:
        average_non_trainable(net.model, name="non_trainable.preempted")  # one model saved
        meta = replace(checkpoint_meta(plan)(stop.epoch, stop.step), batch=stop.batch)
        checkpoint_and_record(net.model, stop, meta, run_dir, plan.settings.checkpoint.keep)
        raise


def finish(
    plan: Plan,
    run_dir: Path,
    data: RankData,
    net: RankModel,
    hooks: RankCallbacks,
    history: Any,
) -> dict[str, float]:
    """The final metrics (rank 0 logs the run's summary and saves the model), then the
    scaling prediction if asked."""
    final = {k: float(v[-1]) for k, v in history.history.items()}
    throughput, metrics_log = hooks.throughput, hooks.metrics_log
    # All ranks: they measure the matmul peak together; rank 0 gets the metrics.
    utilisation = model_flop_utilisation(net.model, data.info, plan, throughput.steady_state())
    if metrics_log is not None:
        summary = {
            **throughput.steady_state(),
            "weights_rank_spread": hooks.sync_guard.final_spread,
            **utilisation,
            **precision.loss_scale_metrics(net.optimizer),
        }
        metrics_log.log(summary, step=plan.epochs - 1)
        save_final(net.model, plan, data.info, run_dir, data.val)
    if plan.settings.predict_scaling:  # last: it recompiles the model (its weights are saved)
        batches = stream_from(plan, data)
        task = data.info.task
        predict_scaling(net.model, plan, task, throughput, run_dir, metrics_log, batches)
    if metrics_log is not None:
        metrics_log.close()
    return final
