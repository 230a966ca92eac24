"""A rank's model and optimizer: built, compiled with tntrun's data-parallel optimizer and
its step agreement, restored from the plan's checkpoint and made the same on every rank."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd

from tntrun.config.schema import Compression
from tntrun.config.zoo import build_model
from tntrun.contract.checkpoints import STATE_PREFIX
from tntrun.datasets.base import DatasetInfo
from tntrun.engine import data_parallel as dp
from tntrun.engine import precision
from tntrun.engine.compile_args import CompileArgs, compile_arguments, states_from_logits
from tntrun.engine.lr_schedule import PlannedSchedule
from tntrun.engine.noise_scale import GradientNoiseScale
from tntrun.engine.optimizers import build_optimizer
from tntrun.engine.output_kind import outputs_probabilities, quiet_keras_logits_warning
from tntrun.engine.output_metrics import per_output
from tntrun.engine.step_agreement import StepAgreement
from tntrun.engine.sync_batch_norm import synchronise_batch_norm
from tntrun.planning.plan import Plan

COMPRESSION = {
    Compression.none: hvd.Compression.none,
    Compression.fp16: hvd.Compression.fp16,
}


@dataclass(frozen=True)
class RankModel:
    model: Any
    optimizer: Any  # the data-parallel one
    agreement: StepAgreement  # the step's averaged loss and stop flags, for the guards


def build_model_and_optimizer(plan: Plan, info: DatasetInfo) -> RankModel:
    """The compiled model, its state that of the plan's checkpoint (if any) on every rank."""
    precision.set_precision(plan.precision)  # before the model is built
    settings = plan.settings
    built = build_model(settings.model, info)
    require_model(built, settings.model)
    # Read on the builder's model: the float32 cast a mixed policy adds ends in a linear layer.
    probabilities = outputs_probabilities(built, info.input_shape)
    spec = compile_arguments(settings, info.task, built, probabilities)
    model = keras3_with_float32_outputs(built, settings.model, info)
    if settings.train.sync_batch_norm:
        synchronise_with_note(model)
    announce(spec, settings.model["_target_"], probabilities)
    chosen = spec.optimizer or build_optimizer(settings.optimizer, PlannedSchedule(plan.schedule))
    optimizer = dp.data_parallel(
        precision.with_loss_scaling(chosen, plan.precision),
        compression=COMPRESSION[settings.horovod.compression],
        backward_passes_per_step=plan.backward_passes_per_step,
    )
    agreement = dp.agree_after_each_step(optimizer)  # for the non-finite and preemption guards
    measure_noise_scale(optimizer, plan)
    # Horovod's ops are not XLA ops: train.jit_compile compiles the model's part alone.
    model.compile(optimizer=optimizer, jit_compile=False, **per_output(spec.arguments, model))
    if plan.jit_compile:
        precision.compile_gradients_with_xla(model)
    restore_and_broadcast(model, optimizer, plan)
    return RankModel(model, optimizer, agreement)


def measure_noise_scale(optimizer: Any, plan: Plan) -> GradientNoiseScale | None:
    """``train.gradient_noise_scale``: measured in the gradients' allreduce when there are
    two ranks or more; with one, rank 0 says in one line why there is no such metric."""
    train = plan.settings.train
    if not train.gradient_noise_scale:
        return None
    if plan.world_size < 2:
        if hvd.rank() == 0:
            print(
                "tntrun: gradient noise scale: not measured with 1 rank (it compares each "
                "rank's gradient with their average; train.gradient_noise_scale=false quiets this)",
                flush=True,
            )
        return None
    small_batch = plan.micro_batch_size * plan.backward_passes_per_step
    big_batch = plan.effective_batch_size  # the global batch of one update
    return dp.measure_gradient_noise(optimizer, small_batch, big_batch, train.gradient_noise_ema)


def announce(spec: CompileArgs, target: str, probabilities: bool) -> None:
    """Rank 0 says in one line what the user's compiled model supplied, and that a
    ``from_logits=True`` loss meets probabilities; no rank repeats Keras' warning."""
    lines = [spec.note(f"model._target_={target}")]
    if probabilities and states_from_logits(spec.arguments.get("loss")):
        quiet_keras_logits_warning()
        lines.append(
            "tntrun: note: the loss says from_logits=True but the model's outputs are "
            "probabilities (a softmax or sigmoid last); Keras reads the logits behind them, "
            "so the numbers are right: state from_logits: false to say what the model gives"
        )
    if hvd.rank() == 0:
        for line in filter(None, lines):
            print(line, flush=True)


def synchronise_with_note(model: Any) -> None:
    """``train.sync_batch_norm``: the model's BatchNormalization layers synchronised, and
    rank 0 says how many (none found is said too)."""
    layers = synchronise_batch_norm(model)
    if hvd.rank() == 0:
        print(
            f"tntrun: sync_batch_norm: {layers} BatchNormalization layer(s) compute their "
            "batch statistics over all ranks",
            flush=True,
        )


class UserModelError(ValueError):
    """The user's model cannot train here (e.g. built with tf_keras): a config error."""


def keras3_with_float32_outputs(model: Any, section: Mapping[str, Any], info) -> Any:
    """The builder's ``model`` with float32 outputs (:func:`precision.float32_outputs`),
    refused with one line when it is not a Keras 3 model or cannot get them."""
    try:
        dp.require_keras3(model, "model")
        return precision.float32_outputs(model, info.input_shape)
    except (dp.LegacyKeras, precision.OwnTrainStep) as refused:
        raise UserModelError(f"model._target_={section['_target_']}: {refused}") from None


def require_model(model: Any, section: Mapping[str, Any]) -> None:
    """What the builder returned is a Keras 3 model (not None, not a layer or a string):
    one line on every rank, before the first step, instead of Keras' traceback."""
    import keras

    try:
        dp.require_keras3(model, "model")
    except dp.LegacyKeras as refused:
        raise UserModelError(f"model._target_={section['_target_']}: {refused}") from None
    if not isinstance(model, keras.Model):
        got = "None" if model is None else f"a {type(model).__name__} ({str(model)[:40]!r})"
        raise UserModelError(
            f"model._target_={section['_target_']} returned {got}, not a keras.Model: return "
            "the model it builds (e.g. return keras.Sequential([...]))"
        )


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
