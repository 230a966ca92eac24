"""``train.precision`` and ``train.jit_compile`` on a rank: Keras mixed precision, loss
scaling composed with Horovod, and XLA.

Precision. ``mixed_bfloat16`` and ``mixed_float16`` are Keras' global dtype
policies: set before the model is built, layers compute in the 16-bit type
while their variables (and so the gradients, the allreduce and the optimizer
state) stay float32. :func:`float32_outputs` casts the model's outputs to
float32, whatever its builder did, so the loss (softmax cross-entropy over the
logits) is computed in float32.

Loss scaling (``mixed_float16``). Keras' ``model.compile`` would wrap Horovod's
``DistributedOptimizer`` in a ``LossScaleOptimizer``, whose gradients come from
the inner (Horovod) optimizer: Horovod would allreduce the *scaled* gradients
(2^15 x the true ones at first, which overflow float16 with
``horovod.compression=fp16``). :class:`HorovodLossScaleOptimizer` is the
order tntrun uses instead: scale the loss, differentiate, unscale, allreduce the
unscaled gradients (through Horovod's own ``_allreduce``: fusion, compression,
``backward_passes_per_step``), then check them for inf/NaN. The check runs on
allreduced gradients (an inf or NaN on any rank reaches every rank's sum), so
every rank skips the same steps and halves the same loss scale: the ranks'
loss scales stay equal. Under ``backward_passes_per_step`` > 1 the steps
between allreduces check the rank's accumulated gradients: an overflow there
halves only that rank's loss scale (harmless: gradients are unscaled before
they are summed) on a step that applies nothing anyway, and the accumulated
inf reaches the next allreduce, where every rank skips the update.

XLA (``train.jit_compile``). Horovod's collectives have no XLA kernel on CPU
(``model.compile(jit_compile=True)`` fails with "No registered
'HorovodAllreduce' OpKernel for XLA_CPU_JIT devices"), so
:func:`compile_gradients_with_xla` compiles each rank's forward pass, loss and
backward pass with XLA and hands the gradients to the optimizer's usual
``minimize`` (loss scaling, allreduce, update, and any hook on them) outside XLA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import tensorflow as tf
import tf_keras as keras
from horovod._keras import CallableList
from tf_keras.src.mixed_precision.loss_scale_optimizer import LossScaleOptimizerV3

# train.precision -> the dtype layers compute in (the matmul peak of MFU is measured in it).
COMPUTE_DTYPES = {"float32": "float32", "mixed_bfloat16": "bfloat16", "mixed_float16": "float16"}
FLOAT32_OUTPUT = "float32_output"


def compute_dtype(precision: str) -> str:
    """The dtype the layers compute in under ``precision``."""
    if precision not in COMPUTE_DTYPES:
        raise ValueError(
            f"train.precision={precision!r}: choose one of {', '.join(COMPUTE_DTYPES)}"
        )
    return COMPUTE_DTYPES[precision]


def set_precision(precision: str) -> None:
    """Set Keras' global dtype policy; call before any model is built."""
    compute_dtype(precision)
    keras.mixed_precision.set_global_policy(precision)


@contextlib.contextmanager
def policy(precision: str) -> Iterator[None]:
    """Build models under ``precision`` within the block, then restore the global policy."""
    before = keras.mixed_precision.global_policy()
    set_precision(precision)
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(before)


def float32_outputs(model: Any, input_shape: Sequence[int]) -> Any:
    """``model`` with every output cast to float32 by a final float32 ``Activation('linear')``.

    Returned unchanged when its outputs are float32 already (always under the
    float32 policy). The layers are shared, not copied: the returned model
    trains the builder's variables and finds its layers by name. A subclassed
    model without symbolic outputs is called on an input of ``input_shape``.
    """
    inputs, outputs = model.inputs, model.outputs
    if outputs is None:
        inputs = keras.Input(shape=tuple(int(d) for d in input_shape), name="features")
        outputs = model(inputs)
    flat = tf.nest.flatten(outputs)
    if all(out.dtype == tf.float32 for out in flat):
        return model
    cast = [
        out if out.dtype == tf.float32 else keras.layers.Activation(
            "linear", dtype="float32", name=FLOAT32_OUTPUT if len(flat) == 1
            else f"{FLOAT32_OUTPUT}_{i}",
        )(out)
        for i, out in enumerate(flat)
    ]  # fmt: skip
    return keras.Model(inputs, tf.nest.pack_sequence_as(outputs, cast), name=model.name)


def observed_precision(model: Any) -> dict[str, Any]:
    """What the built, compiled ``model`` computes in, read from the model itself rather
    than from ``train.precision``, so a policy that never reached the ranks shows: each
    layer's class, compute and variable dtype and the dtype of its symbolic output, the
    trainable variables' dtypes, the model's output dtypes and its optimizer (loss scaled
    or not)."""
    layers = []
    for layer in model.layers:
        try:
            produced = [t.dtype.name for t in tf.nest.flatten(layer.output)]
        except (AttributeError, RuntimeError, ValueError):  # called never, or more than once
            produced = None
        layers.append(
            {
                "name": layer.name,
                "class": type(layer).__name__,
                "compute_dtype": layer.compute_dtype,
                "variable_dtype": layer.variable_dtype,
                "output_dtypes": produced,
                "trainable_variables": len(layer.trainable_variables),
            }
        )
    outputs = model.outputs
    return {
        "global_policy": keras.mixed_precision.global_policy().name,
        "layers": layers,
        "trainable_variables": [[v.name, v.dtype.name] for v in model.trainable_variables],
        "outputs": None if outputs is None else [t.dtype.name for t in tf.nest.flatten(outputs)],
        "optimizer": type(model.optimizer).__name__,
        "loss_scaling": isinstance(model.optimizer, LossScaleOptimizerV3),
    }


def local_gradients(optimizer: Any, loss: tf.Tensor, variables: Sequence[Any], tape) -> list:
    """This rank's gradients of ``loss`` (the true, unscaled ones), before any allreduce.

    Under a loss scale optimizer the loss is scaled by the loss scale inside
    ``tape`` and the gradients are divided by it again: float16 activation
    gradients keep their small values, the result is the unscaled gradient
    (inf or NaN where the scaled backward pass overflowed).
    """
    if not isinstance(optimizer, LossScaleOptimizerV3):
        return tape.gradient(loss, variables)
    with tape:
        scaled = optimizer.get_scaled_loss(loss)
    return optimizer.get_unscaled_gradients(tape.gradient(scaled, variables))


class HorovodLossScaleOptimizer(LossScaleOptimizerV3):
    """Dynamic loss scaling around Horovod's ``DistributedOptimizer`` that allreduces the
    unscaled gradients (see the module docstring); ``model.compile`` keeps it as it is.

    Its ``variables`` include the loss scale's state (scale, growth counter), so
    broadcasting the optimizer's variables after a restore keeps the ranks' loss
    scales equal.
    """

    def compute_gradients(self, loss, var_list, tape=None):
        tape = tf.GradientTape() if tape is None else tape
        if callable(loss):
            with tape:
                loss = loss()
        variables = list(var_list() if callable(var_list) else var_list)
        gradients = local_gradients(self, loss, variables, tape)
        return list(zip(self._allreduce(list(gradients), variables), variables, strict=True))

    def _allreduce(self, grads, variables):
        """Horovod's averaging of the gradients (fusion, compression,
        ``backward_passes_per_step``): the same hook as on Horovod's optimizer."""
        return self.inner_optimizer._allreduce(grads, variables)

    @property
    def variables(self):
        state = self._loss_scale
        extra = [] if isinstance(state, float) else [state.current_loss_scale, state.counter]
        return CallableList([*self.inner_optimizer.variables, *extra])


def with_loss_scaling(optimizer: Any, precision: str) -> Any:
    """``optimizer`` (Horovod's) wrapped in dynamic loss scaling when ``precision`` needs it."""
    if precision != "mixed_float16":
        return optimizer
    return HorovodLossScaleOptimizer(optimizer)


def loss_scale_metrics(optimizer: Any) -> dict[str, float]:
    """``{"loss_scale": <the loss scale in use>}``, or {} without loss scaling."""
    if not isinstance(optimizer, LossScaleOptimizerV3):
        return {}
    return {"loss_scale": float(tf.convert_to_tensor(optimizer.loss_scale).numpy())}


class _Children(tf.__internal__.tracking.Trackable):
    """A checkpoint node with the given children (a restore target without the loss scale)."""

    def __init__(self, children: dict[str, Any]) -> None:
        self._children = children

    def _trackable_children(self, save_type="checkpoint", **kwargs):
        return dict(self._children)


def read_checkpoint(model: Any, optimizer: Any, prefix: str) -> None:
    """Restore ``model`` and ``optimizer`` from the checkpoint ``prefix``, written under any
    ``train.precision``; every existing variable must be in it, except that a checkpoint
    without a loss scale (float32, mixed_bfloat16) leaves a mixed_float16 run's loss scale
    at its start (and a checkpoint's loss scale is ignored without loss scaling)."""
    target = optimizer
    if isinstance(optimizer, LossScaleOptimizerV3) and not any(
        name.startswith("optimizer/loss_scale/") for name, _ in tf.train.list_variables(prefix)
    ):
        children = optimizer.inner_optimizer._trackable_children("checkpoint")
        children.pop("loss_scale", None)
        target = _Children(children)
    state = tf.train.Checkpoint(model=model, optimizer=target)
    state.read(prefix).assert_existing_objects_matched()


class _ComputedGradients:
    """Stands in for the ``GradientTape`` of a step whose gradients XLA computed already:
    the optimizer's ``compute_gradients`` (loss scaling, Horovod, any hook on it) runs
    as usual and gets these gradients from ``tape.gradient``."""

    def __init__(self, gradients: Sequence[Any]) -> None:
        self._gradients = list(gradients)

    def __enter__(self) -> _ComputedGradients:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def watch(self, _: Any) -> None:
        return None

    def gradient(self, target: Any, sources: Sequence[Any]) -> list:
        if len(sources) != len(self._gradients):
            raise ValueError(f"{len(self._gradients)} gradients computed, {len(sources)} asked")
        return list(self._gradients)


def compile_gradients_with_xla(model: Any) -> None:
    """Train ``model`` with its forward and backward pass compiled by XLA.

    Replaces the compiled model's ``train_step`` (Keras' own: forward, loss,
    gradients, ``optimizer.minimize``, metrics) by the same step in which
    forward, loss and gradients (of the scaled loss under ``mixed_float16``)
    run as one ``tf.function(jit_compile=True)``; ``optimizer.minimize`` then
    unscales, allreduces and applies them outside XLA. XLA compiles once per
    input shape. Call after ``model.compile``; a later ``compile`` (another
    optimizer) keeps it.
    """
    if type(model).train_step is not keras.Model.train_step:
        raise ValueError(
            f"train.jit_compile=true: {type(model).__name__} defines its own train_step; "
            "tntrun compiles Keras' standard step: set train.jit_compile=false"
        )
    compiled: dict[int, Any] = {}  # one XLA function per optimizer (compile may swap it)

    def xla_gradients(optimizer: Any) -> Any:
        variables = model.trainable_variables
        scaled = isinstance(optimizer, LossScaleOptimizerV3)

        @tf.function(jit_compile=True, reduce_retracing=True)
        def gradients(x, y, sample_weight):
            with tf.GradientTape() as tape:
                y_pred = model(x, training=True)
                loss = model.compute_loss(x, y, y_pred, sample_weight)
                target = optimizer.get_scaled_loss(loss) if scaled else loss
            return loss, y_pred, tape.gradient(target, variables)

        return variables, gradients

    def train_step(data):
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        optimizer = model.optimizer
        if id(optimizer) not in compiled:
            compiled[id(optimizer)] = xla_gradients(optimizer)
        variables, gradients = compiled[id(optimizer)]
        loss, y_pred, grads = gradients(x, y, sample_weight)
        optimizer.minimize(loss, variables, tape=_ComputedGradients(grads))
        return model.compute_metrics(x, y, y_pred, sample_weight)

    model.train_step = train_step
