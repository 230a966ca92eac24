"""tntrun's own data parallelism for Keras 3 on TensorFlow: gradients averaged over Horovod
ranks with ``horovod.tensorflow`` collectives only.

Why not Horovod's Keras layer: under Keras 3 its ``DistributedOptimizer`` fails at
``compile`` or silently skips the allreduce, and its broadcast callback raises
(horovod#4290).

Mechanism. :func:`data_parallel` changes the class of the given optimizer to a subclass
of its own class, made once per class at run time, that averages in ``apply``. Every
update passes there: ``apply_gradients`` calls ``apply``, Keras' ``train_step`` calls
``apply_gradients``, and a ``train_step`` or loop of one's own calls either. So the default
step, a user's override and a custom loop are all averaged. The object stays the same: its
state, its learning-rate schedule (with any variable inside it) and a model compiled with it
keep working. ``isinstance`` still holds, so ``model.compile`` does not wrap a data-parallel
``LossScaleOptimizer`` again. The subclass has the name and module of its base, so
``get_config`` and serialisation are the base's and a saved model loads a plain optimizer
anywhere, without tntrun or Horovod. A wrapper optimizer was rejected: Keras reads
``iterations``, ``learning_rate``, ``variables``, ``built`` and ``inner_optimizer`` from the
optimizer directly, so a wrapper would have to forward all of them, and it would serialise
as itself.

One allreduce per update. The non-None gradients and the agreement vector (below) go
through one ``hvd.grouped_allreduce(op=hvd.Average)``, so Horovod's tensor fusion, cycle
time and autotuning apply. A Horovod group holds one dtype: tensors of another dtype go in
a second grouped op in the same cycle. With ``hvd.Compression.fp16`` that means the float16
gradients in one op and the float32 agreement vector in another. ``None`` gradients are
passed on as ``None``. ``tf.IndexedSlices`` stay sparse (Horovod allgathers them) and are
not compressed.

Accumulation (``backward_passes_per_step=N``). tntrun accumulates itself and refuses
Keras' ``gradient_accumulation_steps``, for two reasons. Keras' accumulation makes
``optimizer.iterations`` count updates, but tntrun's schedules and callbacks count
micro-steps, as Horovod's aggregation did under tf_keras. And under loss scaling it runs in
the inner optimizer, after the ``LossScaleOptimizer``'s local finite check, so an overflow on
one rank would skip that rank's update and its allreduce alone. Here each micro-step adds this
rank's gradients to accumulators that are not saved with the optimizer. Every N-th micro-step
allreduces their mean (one allreduce per N steps) and Keras applies one update with it, with
clipping, weight decay and the finite check as usual. Every micro-step counts one
``iterations``, so at each update the schedule sees the index of the last micro-step.

Loss scaling (``keras.optimizers.LossScaleOptimizer``, ``mixed_float16``). The outer
optimizer is made data-parallel and its inner one stays plain. The gradients are unscaled,
allreduced (and compressed at their true magnitude), and only then checked for inf/NaN. An
overflow on any rank reaches every rank through the average, so all ranks skip the same
updates and halve the same loss scale, and the loss scales stay equal. A skipped step still
counts one ``iterations``, as tf_keras counted it. ``model.compile`` under ``mixed_float16``
wraps a plain data-parallel optimizer in a plain ``LossScaleOptimizer``, whose local finite
check would let the ranks disagree. To avoid that, pass ``data_parallel(LossScaleOptimizer(opt))``
to ``compile``, or call ``data_parallel(model.optimizer)`` afterwards, which moves the
averaging outward. :func:`broadcast_state` refuses the unsafe order.

Agreement (:func:`agree_after_each_step`). Keras' ``train_step`` passes the step's loss
through ``optimizer.scale_loss``, which notes it. ``[loss, local_stop]`` then rides in the
gradients' allreduce, and its rank average lands in a variable that a callback reads after
the step. A ``train_step`` of one's own should call ``self.optimizer.scale_loss(loss)``, as
Keras' does (``mixed_float16`` needs it anyway), or :func:`note_loss`. Otherwise the loss
entry is 0.

XLA. Horovod's ops are not XLA ops, so ``apply`` refuses to be traced into a
``jit_compile`` function with one clear error. Keras' ``jit_compile="auto"`` turns XLA on
when a GPU is present, so compile with ``jit_compile=False``. To use XLA anyway, compile only
the forward pass, loss and gradients: call a ``tf.function(jit_compile=True)`` that returns
``(loss, gradients)`` from ``train_step``, then ``note_loss(optimizer, loss)`` and
``optimizer.apply(gradients, variables)`` outside it. A loss noted inside XLA belongs to
another graph and is dropped.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import horovod.tensorflow as hvd
import keras
import tensorflow as tf

from tntrun.engine.averaging_optimizer import (
    STATE_ATTRIBUTE,
    AveragingState,
    current_graph,
    data_parallel_class,
    is_data_parallel,
    make_plain,
    noise_scale_of,
)
from tntrun.engine.noise_scale import GradientNoiseScale
from tntrun.engine.step_agreement import StepAgreement

LEGACY_PACKAGES = ("tf_keras", "tensorflow.python.keras")


class LegacyKeras(ValueError):
    """A model or optimizer of the legacy tf_keras package (Keras 2)."""


def require_keras3(obj: Any, what: str) -> None:
    """Refuse a legacy tf_keras ``obj`` (a model, an optimizer) with one line naming the fix."""
    if any(cls.__module__.startswith(LEGACY_PACKAGES) for cls in type(obj).__mro__):
        raise LegacyKeras(
            f"this {what} was built with the legacy tf_keras package; tntrun trains Keras 3: "
            "use `import keras` (and unset TF_USE_LEGACY_KERAS)"
        )


def data_parallel(
    optimizer: Any,
    compression: Any = None,
    backward_passes_per_step: int | None = None,
) -> keras.optimizers.Optimizer:
    """Make ``optimizer`` (any Keras 3 optimizer, or a ``LossScaleOptimizer``) average its
    gradients over all Horovod ranks in every update; returns the same object.

    ``compression``: ``hvd.Compression.none`` or ``hvd.Compression.fp16``.
    ``backward_passes_per_step``: micro-steps accumulated locally per allreduce and update.
    ``None`` keeps what an earlier call set on this optimizer, or on the inner optimizer
    that ``model.compile`` wrapped (else ``none`` and 1). Call before the first training
    step (before ``fit`` traces ``train_step``).
    """
    require_keras3(optimizer, "optimizer")
    optimizer = keras.optimizers.get(optimizer)
    _check_optimizer(optimizer)
    settings = _earlier_settings(optimizer)
    if compression is not None:
        settings.compression = compression
    if backward_passes_per_step is not None:
        settings.backward_passes_per_step = backward_passes_per_step
    _check_settings(settings)
    inner = getattr(optimizer, "inner_optimizer", None)
    if is_data_parallel(inner):  # model.compile wrapped it: the outer optimizer averages
        make_plain(inner)
    if not is_data_parallel(optimizer):
        object.__setattr__(optimizer, "__class__", data_parallel_class(type(optimizer)))
    object.__setattr__(optimizer, STATE_ATTRIBUTE, settings)
    return optimizer


def _check_optimizer(optimizer: Any) -> None:
    if keras.backend.backend() != "tensorflow":
        raise ValueError("tntrun's data parallelism needs KERAS_BACKEND=tensorflow")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"data_parallel needs a Keras 3 optimizer, got {type(optimizer)!r}")
    for opt in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        if getattr(opt, "gradient_accumulation_steps", None):
            raise ValueError(
                "Keras' gradient_accumulation_steps is not averaged over ranks: set "
                "tntrun's backward_passes_per_step instead (one allreduce per update)"
            )


def _earlier_settings(optimizer: Any) -> AveragingState:
    """A fresh copy of the settings of an earlier :func:`data_parallel` on ``optimizer`` or
    on its inner optimizer (else the defaults)."""
    inner = getattr(optimizer, "inner_optimizer", None)
    earlier = [opt._data_parallel for opt in (optimizer, inner) if is_data_parallel(opt)]
    if any(settings.traced for settings in earlier):
        raise ValueError("this optimizer has trained already: call data_parallel before that")
    if not earlier:
        return AveragingState()
    return dataclasses.replace(earlier[0], accumulation=None, noted=None, scaled_in=None)


def _check_settings(settings: AveragingState) -> None:
    passes = settings.backward_passes_per_step
    if not isinstance(passes, int) or passes < 1:
        raise ValueError(f"backward_passes_per_step={passes!r}: need an int >= 1")
    if settings.compression not in (hvd.Compression.none, hvd.Compression.fp16):
        raise ValueError("compression: use hvd.Compression.none or hvd.Compression.fp16")


def untraced_state(optimizer: Any, caller: str, what: str) -> Any:
    """The data-parallel ``optimizer``'s step state, while its train step is not traced yet:
    what rides in the allreduce is fixed when the step is traced."""
    if not is_data_parallel(optimizer):
        raise ValueError(f"{caller} needs an optimizer made by data_parallel()")
    settings = optimizer._data_parallel
    if settings.traced:
        raise ValueError(f"attach {what} before the first training step")
    return settings


def agree_after_each_step(optimizer: Any) -> StepAgreement:
    """Make the data-parallel ``optimizer`` also average ``[loss, local_stop]`` in each
    update's allreduce; returns the callback that reads the result after each step."""
    settings = untraced_state(optimizer, "agree_after_each_step", "the step agreement")
    if settings.agreement is None:
        settings.agreement = StepAgreement()
    return settings.agreement


def measure_gradient_noise(
    optimizer: Any, small_batch: int, big_batch: int, decay: float
) -> GradientNoiseScale:
    """Make the data-parallel ``optimizer`` also measure the gradient noise scale
    (:mod:`tntrun.engine.noise_scale`) in each update's allreduce. ``small_batch``: the
    samples behind one rank's gradient per update; ``big_batch``: the global batch. Attach
    the step agreement first: its train function checks each batch for zero weights."""
    settings = untraced_state(optimizer, "measure_gradient_noise", "the noise scale")
    if settings.noise_scale is None:
        settings.noise_scale = GradientNoiseScale(small_batch, big_batch, decay)
        if settings.agreement is not None:
            settings.agreement.batch_checks.append(settings.noise_scale.check_batch)
    return settings.noise_scale


def note_loss(optimizer: Any, loss: tf.Tensor, scaled: bool = False) -> None:
    """Note ``loss`` as this step's loss for the agreement (what ``scale_loss`` does), for
    steps whose loss never passes through ``optimizer.scale_loss`` outside XLA; ``scaled``:
    the gradients are of the loss times the loss scale (a step that scaled it itself)."""
    optimizer._data_parallel.noted = (current_graph(), loss)
    if scaled:
        optimizer._data_parallel.scaled_in = (current_graph(),)


def _refuse_unaveraged_loss_scaling(model: Any, optimizer: Any) -> None:
    """Refuse a plain ``LossScaleOptimizer`` (``model.compile`` under mixed_float16) around
    a data-parallel optimizer: its local finite check would let the ranks disagree."""
    for opt in (optimizer, getattr(model, "optimizer", None)):
        inner = getattr(opt, "inner_optimizer", None)
        if is_data_parallel(inner) and not is_data_parallel(opt):
            raise ValueError(
                "a plain LossScaleOptimizer wraps the data-parallel optimizer (model.compile "
                "does so under mixed_float16): call data_parallel(model.optimizer) after compile"
            )


def _tf_variable(variable: Any) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 ``Variable`` (kept in ``.value``)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def broadcast_state(model: Any, optimizer: Any, root_rank: int = 0) -> None:
    """Give every rank ``root_rank``'s model weights and optimizer variables.

    The optimizer is built on the model's trainable variables first, so its slots exist to
    be sent. Model weights are trainable and non-trainable ones (e.g. batch-norm statistics),
    not metric state or random-seed state: each rank keeps its own dropout seeds. The
    gradient noise scale's averages (a restored checkpoint's) go too.
    """
    require_keras3(model, "model")
    require_keras3(optimizer, "optimizer")
    _refuse_unaveraged_loss_scaling(model, optimizer)
    if not model.weights:
        raise ValueError("broadcast_state: build the model first (give it an Input or call it)")
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    variables: dict[int, tf.Variable] = {}
    noise = noise_scale_of(optimizer)
    measured = [] if noise is None else noise.state_variables()
    for variable in [*model.weights, *optimizer.variables, *measured]:
        variables.setdefault(id(variable), _tf_variable(variable))
    hvd.broadcast_variables(list(variables.values()), root_rank=root_rank)
