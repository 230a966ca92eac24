"""``train.precision`` and ``train.jit_compile`` on a rank: Keras 3 mixed precision, loss
scaling composed with tntrun's gradient averaging, and XLA.

Precision. ``mixed_bfloat16`` and ``mixed_float16`` are Keras' global dtype
policies: set before the model is built, layers compute in the 16-bit type
while their variables (and so the gradients, the allreduce and the optimizer
state) stay float32. :func:`float32_outputs` casts the model's outputs to
float32, whatever its builder did, so the loss (softmax cross-entropy over the
logits) is computed in float32.

Loss scaling (``mixed_float16``). :func:`with_loss_scaling` wraps the optimizer in
Keras' ``LossScaleOptimizer`` before :func:`tntrun.engine.data_parallel.data_parallel`
makes it average: the gradients are unscaled, averaged over the ranks, and only then
checked for inf/NaN, so every rank skips the same steps and halves the same loss scale
(see that module).

XLA (``train.jit_compile``). Horovod's collectives have no XLA kernel, so
:func:`compile_gradients_with_xla` compiles each rank's forward pass, loss and
backward pass with XLA and hands the gradients to the data-parallel optimizer
(average, loss-scale check, update) outside XLA.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import keras
import tensorflow as tf

from tntrun.engine import keras_internals
from tntrun.engine.averaging_optimizer import noise_scale_of
from tntrun.engine.data_parallel import is_data_parallel, note_loss
from tntrun.engine.noise_scale import CHECKPOINT_KEY as NOISE_KEY

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


def _dtype(tensor: Any) -> str:
    """A tensor's dtype by name (Keras 3 names them as strings, TensorFlow as ``DType``)."""
    return keras.backend.standardize_dtype(tensor.dtype)


class OwnTrainStep(ValueError):
    """A model with its own ``train_step`` and 16-bit outputs: a float32 cast would need a
    wrapping model, which would train with Keras' step instead of the model's own."""


def float32_outputs(model: Any, input_shape: Sequence[int] | Mapping[str, Sequence[int]]) -> Any:
    """``model`` with every output cast to float32 by a final float32 ``Activation('linear')``.

    Returned unchanged when its outputs are float32 already (always under the
    float32 policy). The layers are shared, not copied: the returned model
    trains the builder's variables and finds its layers by name. A subclassed
    model without symbolic outputs is called on an input of ``input_shape``.
    """
    inputs, outputs = getattr(model, "inputs", None), getattr(model, "outputs", None)
    if outputs is None:
        inputs = symbolic_inputs(input_shape)
        outputs = model(inputs)
    flat = tf.nest.flatten(outputs)
    if all(_dtype(out) == "float32" for out in flat):
        return model
    if type(model).train_step is not keras.Model.train_step:
        raise OwnTrainStep(
            f"{type(model).__name__} defines its own train_step and outputs "
            f"{', '.join(sorted({_dtype(out) for out in flat}))} under "
            f"train.precision={keras.mixed_precision.global_policy().name}: give its last "
            "layer dtype='float32' (the loss must be computed in float32)"
        )
    cast = [
        out
        if _dtype(out) == "float32"
        else keras.layers.Activation(
            "linear",
            dtype="float32",
            name=FLOAT32_OUTPUT if len(flat) == 1 else f"{FLOAT32_OUTPUT}_{i}",
        )(out)
        for i, out in enumerate(flat)
    ]
    return keras.Model(inputs, tf.nest.pack_sequence_as(outputs, cast), name=model.name)


def symbolic_inputs(input_shape: Any) -> Any:
    """``keras.Input`` of the dataset's ``input_shape``; a dict of them, by name, for a
    mapping of named inputs."""
    if isinstance(input_shape, Mapping):
        return {
            name: keras.Input(shape=tuple(int(d) for d in shape), name=name)
            for name, shape in input_shape.items()
        }
    return keras.Input(shape=tuple(int(d) for d in input_shape), name="features")


def is_loss_scaled(optimizer: Any) -> bool:
    """Whether ``optimizer`` scales the loss (``mixed_float16``)."""
    return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def observed_precision(model: Any) -> dict[str, Any]:
    """What the built, compiled ``model`` computes in, read from the model itself rather
    than from ``train.precision``, so a policy that never reached the ranks shows: each
    layer's class, compute and variable dtype and the dtype of its symbolic output, the
    trainable variables' dtypes, the model's output dtypes and its optimizer (loss scaled
    or not, averaging over the ranks or not)."""
    layers = []
    for layer in model.layers:
        try:
            produced = [_dtype(t) for t in tf.nest.flatten(layer.output)]
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
    outputs = getattr(model, "outputs", None)
    return {
        "global_policy": keras.mixed_precision.global_policy().name,
        "layers": layers,
        "trainable_variables": [[v.path, _dtype(v)] for v in model.trainable_variables],
        "outputs": None if outputs is None else [_dtype(t) for t in tf.nest.flatten(outputs)],
        "optimizer": type(model.optimizer).__name__,
        "loss_scaling": is_loss_scaled(model.optimizer),
        "data_parallel": is_data_parallel(model.optimizer),
    }


def with_loss_scaling(optimizer: Any, precision: str) -> Any:
    """``optimizer`` wrapped in Keras' dynamic loss scaling when ``precision`` needs it (make
    the result data-parallel: the ranks then skip overflowing steps together)."""
    if precision != "mixed_float16" or is_loss_scaled(optimizer):  # the user's compiled one
        return optimizer
    return keras.optimizers.LossScaleOptimizer(optimizer)


def loss_scale_metrics(optimizer: Any) -> dict[str, float]:
    """``{"loss_scale": <the loss scale in use>}``, or {} without loss scaling."""
    if not is_loss_scaled(optimizer):
        return {}
    return {"loss_scale": float(optimizer.dynamic_scale.numpy())}


def state_checkpoint(model: Any, optimizer: Any) -> tf.train.Checkpoint:
    """The checkpoint of ``model`` and ``optimizer``: the state a run saves and resumes
    (with the gradient noise scale's averages, when the optimizer measures it)."""
    return tf.train.Checkpoint(model=model, optimizer=optimizer, **_noise_scale_child(optimizer))


def _noise_scale_child(optimizer: Any, saved: Sequence[str] | None = None) -> dict[str, Any]:
    """The noise scale's checkpoint child, if ``optimizer`` measures it (and, given the
    ``saved`` variable names, only if the checkpoint has it: an older one, or one of a run
    of one rank, leaves the averages at their start)."""
    noise = noise_scale_of(optimizer)
    if noise is None:
        return {}
    if saved is not None and not any(name.startswith(f"{NOISE_KEY}/") for name in saved):
        return {}
    return {NOISE_KEY: noise}


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
    names = [name for name, _ in tf.train.list_variables(prefix)]
    saved_scaled = any(name.startswith("optimizer/inner_optimizer/") for name in names)
    target = optimizer
    if is_loss_scaled(optimizer) and not saved_scaled:
        target = optimizer.inner_optimizer
    elif saved_scaled and not is_loss_scaled(optimizer):
        target = _Children({"inner_optimizer": optimizer})
    children = {"model": model, "optimizer": target, **_noise_scale_child(optimizer, names)}
    tf.train.Checkpoint(**children).read(prefix).assert_existing_objects_matched()


def compile_gradients_with_xla(model: Any) -> None:
    """Train ``model`` with its forward and backward pass compiled by XLA.

    Replaces the compiled model's ``train_step`` (Keras' own: forward, loss,
    gradients, update, metrics) by the same step in which forward, loss and
    gradients (of the scaled loss under ``mixed_float16``) run as one
    ``tf.function(jit_compile=True)``; the data-parallel optimizer then unscales,
    averages and applies them outside XLA. XLA compiles once per input shape. Call
    after ``model.compile`` with the optimizer the model trains with.
    """
    if type(model).train_step is not keras.Model.train_step:
        raise ValueError(
            f"train.jit_compile=true: {type(model).__name__} defines its own train_step; "
            "tntrun compiles Keras' standard step: set train.jit_compile=false"
        )
    optimizer, variables = model.optimizer, model.trainable_variables
    scaled = is_loss_scaled(optimizer)

    @tf.function(jit_compile=True, reduce_retracing=True)
    def gradients(x, y, sample_weight):
        with tf.GradientTape() as tape:
            y_pred = model(x, training=True)
            loss = model.compute_loss(x, y, y_pred, sample_weight, training=True)
            target = loss * tf.cast(optimizer.dynamic_scale, loss.dtype) if scaled else loss
        return loss, y_pred, tape.gradient(target, variables)

    def train_step(data):
        if not optimizer.built:  # its loss scale is read inside XLA
            optimizer.build(variables)
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
        loss, y_pred, grads = gradients(x, y, sample_weight)
        samples = tf.shape(tf.nest.flatten(x)[0])[0]
        keras_internals.loss_tracker(model).update_state(loss, sample_weight=samples)
        note_loss(optimizer, loss, scaled=scaled)
        optimizer.apply(grads, variables)
        return model.compute_metrics(x, y, y_pred, sample_weight)

    model.train_step = train_step
