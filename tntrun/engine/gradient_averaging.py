"""Gradients averaged over the ranks: one ``hvd.grouped_allreduce`` per dtype, compressed
dense gradients, sparse ones as Horovod takes them (allgathered), ``None`` kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf


def scaled(gradient: Any, factor: tf.Tensor) -> Any:
    """``gradient * factor`` for a dense gradient or ``tf.IndexedSlices``."""
    if isinstance(gradient, tf.IndexedSlices):
        values = gradient.values * tf.cast(factor, gradient.values.dtype)
        return tf.IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


def grouped_average(tensors: Sequence[Any]) -> list[Any]:
    """Rank averages of ``tensors``: one ``grouped_allreduce`` per dtype (usually one)."""
    by_dtype: dict[tf.DType, list[int]] = {}
    for i, tensor in enumerate(tensors):
        by_dtype.setdefault(tensor.dtype, []).append(i)
    averaged: list[Any] = [None] * len(tensors)
    for positions in by_dtype.values():
        reduced = hvd.grouped_allreduce([tensors[i] for i in positions], op=hvd.Average)
        for i, tensor in zip(positions, reduced, strict=True):
            averaged[i] = tensor
    return averaged


def allreduce_gradients(grads: Sequence[Any], compression: Any, extra: tf.Tensor | None) -> tuple:
    """(rank-averaged ``grads`` with ``None`` kept, rank-averaged ``extra``).

    Dense gradients are compressed before and decompressed after the allreduce.
    """
    present = [i for i, g in enumerate(grads) if g is not None]
    sent, contexts = [], []
    for i in present:
        if isinstance(grads[i], tf.IndexedSlices):
            sent.append(grads[i])
            contexts.append((False, None))
        else:
            compressed, context = compression.compress(grads[i])
            sent.append(compressed)
            contexts.append((True, context))
    reduced = grouped_average(sent if extra is None else [*sent, extra])
    averaged: list[Any] = [None] * len(grads)
    for i, tensor, (dense, context) in zip(present, reduced[: len(sent)], contexts, strict=True):
        averaged[i] = compression.decompress(tensor, context) if dense else tensor
    return averaged, (None if extra is None else reduced[-1])
