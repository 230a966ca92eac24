"""Cross-rank reductions built on ``horovod.tensorflow`` (Keras-independent)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf


def weighted_mean(values: Mapping[str, float], weight: float, name: str) -> dict[str, float]:
    """Average ``values`` over ranks, each rank weighted by ``weight`` (its sample count).

    One Sum-allreduce of ``[w*v_1, ..., w*v_k, w]``; every rank must call it with
    the same keys in the same order.
    """
    local = weighted_vector(values, weight)
    total = hvd.allreduce(tf.constant(local), op=hvd.Sum, name=name).numpy()
    return means_of(list(values), total)


def weighted_vector(values: Mapping[str, float], weight: float) -> np.ndarray:
    """``[w*v_1, ..., w*v_k, w]``: this rank's part of a weighted mean, to be summed."""
    return np.array([weight * float(v) for v in values.values()] + [float(weight)], np.float64)


def means_of(keys: Sequence[str], total: np.ndarray) -> dict[str, float]:
    """The weighted means from the ranks' summed :func:`weighted_vector` (NaN: no weight)."""
    if total[-1] <= 0:
        return {k: float("nan") for k in keys}
    return {k: float(total[i] / total[-1]) for i, k in enumerate(keys)}


def weights_checksum(variables: Sequence[tf.Variable]) -> float:
    """A float64 checksum of model weights, equal on all ranks while they stay in sync."""
    total = 0.0
    for variable in variables:
        values = variable.numpy().astype(np.float64)
        total += float(np.abs(values).sum() + values.sum())
    return total


def checksums_across_ranks(variables: Sequence[tf.Variable], name: str) -> np.ndarray:
    """Every rank's weight checksum, indexed by rank."""
    local = tf.constant([weights_checksum(variables)], tf.float64)
    return hvd.allgather(local, name=name).numpy()
