"""Every private Keras 3 (and TensorFlow) name tntrun relies on, and every assumption about
the order in which Keras calls things, in one place.

Why private: the averaging lives inside the optimizer's ``apply``, the agreement vector
leaves Keras' compiled step as one more output, and Keras offers no public hook for
either. Each name below was checked on Keras :data:`CHECKED_ON` (TensorFlow 2.21; the
Keras of TF 2.18 names them alike), with the Keras source file it comes from; when a
Keras release renames one or changes an order, this module is the one to change, and
tests/engine/test_keras_internals.py fails first (in-process, in seconds).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import control_flow_util

CHECKED_ON = "3.15.1"  # the Keras version every name and order here was checked on

# Call orders of public methods that tntrun relies on (keras/src/backend/tensorflow/
# trainer.py, ``train_step``; keras/src/optimizers/base_optimizer.py, ``apply_gradients``):
# - ``train_step`` passes the step's loss through ``optimizer.scale_loss`` before taking
#   the gradients, and updates through ``optimizer.apply_gradients``, which calls
#   ``optimizer.apply``: the data-parallel optimizer (averaging_optimizer.py) notes the
#   loss in ``scale_loss`` and averages in ``apply``, so every update is averaged;
# - ``fit`` calls ``make_train_function`` before ``on_train_begin``: see
#   :func:`replace_train_function` (step_agreement.py).


def compiled_step(model: Any, step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Keras' own train function around ``step`` (``tf.function``, steps per execution):
    keras/src/backend/tensorflow/trainer.py, ``Trainer._make_function``."""
    return model._make_function(step)


def replace_train_function(model: Any, train_function: Callable[[Any], Any]) -> None:
    """Make ``model`` run ``train_function`` for each step of the ``fit`` being started: call
    it from a callback's ``on_train_begin``.

    The order this relies on (keras/src/backend/tensorflow/trainer.py, ``fit``):
    ``make_train_function()`` first (it sets ``model.train_function`` unless one is set),
    then ``callbacks.on_train_begin()``, then ``model.train_function(iterator)`` for each
    step, read from the attribute at every step. ``train_on_batch`` then runs the
    replacement too (``make_train_function`` keeps a train function already set).
    """
    model.train_function = train_function


def schedule_of(optimizer: Any) -> Any:
    """The learning rate as the optimizer holds it: a schedule object, or a variable
    (keras/src/optimizers/base_optimizer.py; the public ``learning_rate`` evaluates a
    schedule)."""
    return optimizer._learning_rate


def tracked_variables(optimizer: Any) -> list:
    """The variables the optimizer was built on, in its slot order
    (keras/src/optimizers/base_optimizer.py, ``build``)."""
    return list(optimizer._trainable_variables)


def variable_index(optimizer: Any, variable: Any) -> int:
    """``variable``'s index in the optimizer's slot order (base_optimizer.py)."""
    return optimizer._get_variable_index(variable)


def overwrites_with_gradient(optimizer: Any, variable: Any) -> bool:
    """Whether the optimizer assigns ``variable`` its "gradient" (a float8 scale), which must
    be neither scaled nor averaged as a gradient (base_optimizer.py)."""
    return optimizer._overwrite_variable_with_gradient(variable)


def count_step(optimizer: Any) -> None:
    """One more ``iterations`` without an update (a micro-step, a skipped step):
    base_optimizer.py keeps the counter in ``_iterations``."""
    optimizer._iterations.assign_add(1)


def tracing_into_xla() -> bool:
    """Whether the function being traced is compiled by XLA (``jit_compile``): TensorFlow's
    private ``control_flow_util`` (checked on TF 2.21)."""
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def compile_arguments(model: Any) -> dict[str, Any]:
    """What ``model.compile`` was given (optimizer, loss, loss_weights, metrics,
    weighted_metrics, ...), as given: Keras 3.15 keeps them in ``_compile_config`` (its
    public ``get_compile_config`` returns them serialised). Empty for a model not compiled."""
    if not getattr(model, "compiled", False) or not hasattr(model, "_compile_config"):
        return {}
    return dict(model._compile_config.config)


def made_by_activation(tensor: Any) -> bool:
    """Whether a symbolic ``tensor`` is a softmax's or sigmoid's output: Keras 3.15's TF
    backend marks those with ``_keras_logits`` (its losses then read the logits)."""
    op_type = getattr(getattr(tensor, "op", None), "type", None)
    return hasattr(tensor, "_keras_logits") or op_type in ("Softmax", "Sigmoid")


def producing_layer(output: Any) -> Any:
    """The layer that made a functional model's symbolic ``output`` (Keras 3.15 records it
    in ``_keras_history``)."""
    history = getattr(output, "_keras_history", None)
    return getattr(history, "operation", None)


# Checked against Keras 3.15.1 (keras/src/layers/normalization/batch_normalization.py):
# ``call`` takes the batch's (mean, variance) from ``self._moments(inputs, mask)`` in
# training, and uses them both to normalise and to update the moving statistics.
def replace_moments(layer: Any, moments: Callable[[Any, Any], tuple[Any, Any]]) -> None:
    """Make a ``BatchNormalization`` layer take its batch statistics from ``moments``."""
    object.__setattr__(layer, "_moments", moments)


def reduction_axes(layer: Any) -> list[int]:
    """The axes a built ``BatchNormalization`` reduces over (all but its feature axis), set
    in its ``build`` (batch_normalization.py)."""
    return list(layer._reduction_axes)


def all_layers(model: Any, include_self: bool = False) -> list[Any]:
    """Every layer inside ``model``, nested models' included, and ``model`` itself first with
    ``include_self`` (Keras' own traversal: keras/src/layers/layer.py, ``_flatten_layers``)."""
    return list(model._flatten_layers(include_self=include_self, recursive=True))


def loss_tracker(model: Any) -> Any:
    """The ``Mean`` metric a compiled model's ``train_step`` feeds the loss to (its "loss"
    log): keras/src/trainers/trainer.py sets ``_loss_tracker`` in ``compile``. A
    ``train_step`` of one's own updates it to report the loss as Keras' does."""
    return model._loss_tracker


def build_metrics(model: Any, element_spec: Any) -> None:
    """Build the compiled loss and metrics from a batch's structure (TensorSpecs), as
    ``fit`` and ``evaluate`` do before their first batch, for a rank that has none."""
    model._symbolic_build(data_batch=element_spec)
