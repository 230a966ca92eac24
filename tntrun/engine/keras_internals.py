"""Every private Keras 3 (and TensorFlow) name tntrun's data parallelism needs, in one place.

Why private: the averaging lives inside the optimizer's ``apply`` and the agreement vector
leaves Keras' compiled step as one more output, and Keras offers no public hook for
either. Keras 3.15 (TF 2.21) and the Keras of TF 2.18 name them alike; when a Keras release
renames one, this module is the one to change, and tests/engine/test_data_parallel.py
fails first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf
from tensorflow.python.ops import control_flow_util


def compiled_step(model: Any, step: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Keras' own train function around ``step`` (``tf.function``, steps per execution)."""
    return model._make_function(step)


def schedule_of(optimizer: Any) -> Any:
    """The learning rate as the optimizer holds it: a schedule object, or a variable."""
    return optimizer._learning_rate


def tracked_variables(optimizer: Any) -> list:
    """The variables the optimizer was built on, in its slot order."""
    return list(optimizer._trainable_variables)


def variable_index(optimizer: Any, variable: Any) -> int:
    """``variable``'s index in the optimizer's slot order."""
    return optimizer._get_variable_index(variable)


def overwrites_with_gradient(optimizer: Any, variable: Any) -> bool:
    """Whether the optimizer assigns ``variable`` its "gradient" (a float8 scale), which must
    be neither scaled nor averaged as a gradient."""
    return optimizer._overwrite_variable_with_gradient(variable)


def count_step(optimizer: Any) -> None:
    """One more ``iterations`` without an update (a micro-step, a skipped step)."""
    optimizer._iterations.assign_add(1)


def tracing_into_xla() -> bool:
    """Whether the function being traced is compiled by XLA (``jit_compile``)."""
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
    """The axes a built ``BatchNormalization`` reduces over (all but its feature axis)."""
    return list(layer._reduction_axes)


def all_layers(model: Any) -> list[Any]:
    """Every layer inside ``model``, nested models' included (Keras' own traversal)."""
    return list(model._flatten_layers(include_self=False, recursive=True))


def build_metrics(model: Any, element_spec: Any) -> None:
    """Build the compiled loss and metrics from a batch's structure (TensorSpecs), as
    ``fit`` and ``evaluate`` do before their first batch, for a rank that has none."""
    model._symbolic_build(data_batch=element_spec)
