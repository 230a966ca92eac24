"""Automatic dataset distribution: shuffle alike, shard by rank, micro-batch.

Each epoch's order is a function of (seed, epoch) alone, so a run resumed at
epoch E sees exactly the batches an uninterrupted run sees at epoch E.
"""

from __future__ import annotations

from collections.abc import Callable

import tensorflow as tf

from tntrun.engine.sample_weights import scaled_by


def shard_size(num_samples: int, rank: int, size: int) -> int:
    """Samples that ``Dataset.shard(size, rank)`` keeps of ``num_samples``."""
    return len(range(rank, num_samples, size))


def distribute_train(
    dataset: tf.data.Dataset,
    *,
    num_samples: int,
    micro_batch: int,
    steps_per_epoch: int,
    rank: int,
    size: int,
    seed: int,
    first_epoch: int,
    epochs: int,
    drop_remainder: bool = True,
) -> tf.data.Dataset:
    """Per-rank training stream of ``steps_per_epoch`` micro-batches for each remaining epoch.

    Every rank shuffles with the same per-epoch seed (the same global order),
    then keeps every ``size``-th sample starting at ``rank``: an epoch covers
    each sample once. With ``drop_remainder`` the samples past the last full
    global batch are skipped (they differ per epoch); without it the last
    global batch is filled with zero-weight copies, so every rank still runs
    the same number of full steps and padding adds nothing to loss or metrics. Elements
    are ``(x, y)`` or ``(x, y, sample_weight)`` of any structure (dicts of named inputs
    and outputs): padding multiplies the sample weight(s) by 0.
    """
    padding = steps_per_epoch * micro_batch * size - num_samples

    def one_epoch(epoch: int) -> tf.data.Dataset:
        order = seed * 100_003 + epoch
        shuffled = dataset.shuffle(num_samples, seed=order, reshuffle_each_iteration=False)
        if not drop_remainder and padding > 0:
            shuffled = padded(shuffled, dataset, padding)
        return (
            shuffled.shard(size, rank).batch(micro_batch, drop_remainder=True).take(steps_per_epoch)
        )

    return chained(one_epoch, first_epoch, epochs).prefetch(tf.data.AUTOTUNE)


def padded(shuffled: tf.data.Dataset, dataset: tf.data.Dataset, padding: int) -> tf.data.Dataset:
    """``shuffled`` and ``padding`` zero-weight copies of ``dataset``'s first sample after it."""
    filler = dataset.take(1).repeat(padding).map(scaled_by(0.0))
    return shuffled.map(scaled_by(1.0)).concatenate(filler)


def chained(
    one_epoch: Callable[[int], tf.data.Dataset], first_epoch: int, epochs: int
) -> tf.data.Dataset:
    """One pipeline per epoch, chained: the epoch is a Python int, so each epoch's shuffle
    seed is fixed when the pipeline is built."""
    stream = one_epoch(first_epoch)
    for epoch in range(first_epoch + 1, epochs):
        stream = stream.concatenate(one_epoch(epoch))
    return stream


def distribute_eval(
    dataset: tf.data.Dataset, *, micro_batch: int, rank: int, size: int
) -> tf.data.Dataset:
    """This rank's share of an evaluation set: every sample is evaluated exactly once."""
    return dataset.shard(size, rank).batch(micro_batch).prefetch(tf.data.AUTOTUNE)
