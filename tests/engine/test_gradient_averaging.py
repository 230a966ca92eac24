"""Gradients averaged over the ranks, on one rank in-process (the average of one is the
value itself): dtypes grouped and put back in place, ``None`` kept, sparse gradients left
uncompressed, fp16 compression undone, the extra vector returned apart."""

from __future__ import annotations

import numpy as np

from tests.engine.one_rank import horovod_of_one_rank, tf
from tntrun.engine.gradient_averaging import allreduce_gradients, grouped_average, scaled


def sparse() -> tf.IndexedSlices:
    return tf.IndexedSlices(tf.constant([[1.0, 2.0]]), tf.constant([1]), tf.constant([3, 2]))


def test_scaled_multiplies_dense_and_sparse_gradients_in_their_dtype():
    dense = scaled(tf.constant([1.0, 2.0], tf.float16), tf.constant(0.5))
    assert dense.dtype == tf.float16
    np.testing.assert_array_equal(dense.numpy(), [0.5, 1.0])
    slices = scaled(sparse(), tf.constant(2.0))
    assert isinstance(slices, tf.IndexedSlices)
    np.testing.assert_array_equal(slices.values.numpy(), [[2.0, 4.0]])


def test_grouped_average_keeps_each_tensor_in_its_place_across_dtypes():
    hvd = horovod_of_one_rank()
    assert hvd.size() == 1
    tensors = [tf.constant([1.0]), tf.constant([2.0], tf.float64), tf.constant([3.0])]
    averaged = grouped_average(tensors)
    assert [t.dtype for t in averaged] == [tf.float32, tf.float64, tf.float32]
    assert [float(t.numpy()[0]) for t in averaged] == [1.0, 2.0, 3.0]


def test_allreduce_gradients_keeps_none_and_sparse_and_returns_the_extra_apart():
    hvd = horovod_of_one_rank()
    grads = [tf.constant([1.5, 2.5]), None, sparse()]
    averaged, extra = allreduce_gradients(grads, hvd.Compression.fp16, tf.constant([4.0, 1.0]))
    assert averaged[1] is None and isinstance(averaged[2], tf.IndexedSlices)
    assert averaged[0].dtype == tf.float32  # compressed to float16 and back
    np.testing.assert_array_equal(averaged[0].numpy(), [1.5, 2.5])
    np.testing.assert_array_equal(extra.numpy(), [4.0, 1.0])
    assert allreduce_gradients([None], hvd.Compression.none, None) == ([None], None)
