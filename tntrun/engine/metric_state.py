"""Metrics exact across ranks: each rank's metric *state* summed over the ranks.

Why state, not results: averaging each rank's ``result()`` (weighted by its samples) is
right for means only; precision, recall, AUC, F1, IoU or R2 of the whole set are not a
weighted mean of the shards' values. Keras keeps every built-in metric's state in additive
variables (totals and counts, true/false positives per threshold, a confusion matrix), so
the sum of the ranks' states is the state one process would hold after seeing every shard,
and ``result()`` of that sum is the single-process value. A user's own metric is summed the
same way: its state variables must be additive too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf

# A state summed as float64 stays exact for integer counts up to 2**53.
SUMMABLE_KINDS = ("f", "i", "u")  # numpy dtype kinds: float, signed and unsigned int


class UnsummableMetric(TypeError):
    """A metric whose state variable cannot be summed over ranks (e.g. a string or bool)."""


def state_variables(model: Any) -> list[Any]:
    """The state variables of ``model.metrics`` (loss tracker, compiled metrics, the
    user's), each once, in the order of ``model.metrics``: the same on every rank."""
    found: dict[int, Any] = {}
    for metric in leaf_metrics(model.metrics):
        for variable in metric.variables:
            found.setdefault(id(variable), (metric, variable))
    for metric, variable in found.values():
        check_summable(metric.name, variable)
    return [variable for _, variable in found.values()]


def leaf_metrics(metrics: Sequence[Any]) -> list[Any]:
    """``metrics`` with each container (the compiled metrics) replaced by its metrics, in
    order, so a refusal names the metric the user knows."""
    leaves = []
    for metric in metrics:
        inner = getattr(metric, "metrics", None)
        leaves += leaf_metrics(inner) if isinstance(inner, list) else [metric]
    return leaves


def check_summable(metric_name: str, variable: Any) -> None:
    """Refuse, in one line, a state variable whose dtype cannot be summed."""
    kind = np.dtype(tf.as_dtype(variable.dtype).as_numpy_dtype).kind
    if kind not in SUMMABLE_KINDS:
        raise UnsummableMetric(
            f"metric {metric_name!r}: its state variable {variable.name!r} of dtype "
            f"{variable.dtype} cannot be summed over ranks; tntrun sums every metric's state "
            "(it must be additive numbers, as Keras' own metrics' are)"
        )


def pack(variables: Sequence[Any]) -> np.ndarray:
    """All ``variables`` flattened into one float64 vector, in order."""
    if not variables:
        return np.zeros(0, np.float64)
    return np.concatenate([np.asarray(v.numpy(), np.float64).ravel() for v in variables])


def unpack_into(variables: Sequence[Any], vector: np.ndarray) -> None:
    """Assign ``vector`` (as :func:`pack` made it) back to ``variables``, each in its dtype."""
    offset = 0
    for variable in variables:
        shape = tuple(variable.shape)
        size = int(np.prod(shape, dtype=np.int64))
        part = vector[offset : offset + size].reshape(shape)
        dtype = np.dtype(tf.as_dtype(variable.dtype).as_numpy_dtype)
        # In the variable's own dtype: Keras' assign of another dtype costs a cast op.
        variable.assign(np.rint(part).astype(dtype) if dtype.kind != "f" else part.astype(dtype))
        offset += size
    if offset != vector.size:
        raise ValueError(f"{vector.size} state values for variables of {offset}")


def sum_metric_state(
    model: Any, name: str, extra: np.ndarray | None = None
) -> tuple[dict[str, float], np.ndarray]:
    """Sum the state of ``model.metrics`` over the ranks, leave the sums in the metrics and
    return their results, with the sum of ``extra`` (other numbers to sum, in the same
    allreduce): one Sum-allreduce of one float64 vector. Every rank calls it; a rank that
    saw no sample contributes a reset (zero) state."""
    variables = state_variables(model)
    local = pack(variables)
    extra = np.zeros(0, np.float64) if extra is None else np.asarray(extra, np.float64)
    vector = np.concatenate([local, extra])
    total = hvd.allreduce(tf.constant(vector), op=hvd.Sum, name=name).numpy()
    unpack_into(variables, total[: local.size])
    return scalar_results(model.get_metrics_result()), total[local.size :]


def scalar_results(results: dict[str, Any]) -> dict[str, float]:
    """Results as floats; a vector result (``F1Score(average=None)``: one per class) as
    ``name_0``, ``name_1``, ... since a logged metric is one number."""
    scalars: dict[str, float] = {}
    for key, value in results.items():
        values = np.asarray(value, np.float64)
        if values.ndim == 0:
            scalars[key] = float(values)
        else:
            scalars.update({f"{key}_{i}": float(v) for i, v in enumerate(values.ravel())})
    return scalars
