"""Automatic dataset distribution: shuffle alike, shard by rank, micro-batch."""

from __future__ import annotations

import tensorflow as tf


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
) -> tf.data.Dataset:
    """Per-rank training stream with exactly ``steps_per_epoch`` micro-batches per epoch.

    All ranks shuffle with the same seed (same global order each epoch), then
    each keeps every ``size``-th sample starting at ``rank``. Every rank yields
    the same number of steps, so collectives never wait on a missing step.
    """
    return (
        dataset.shuffle(num_samples, seed=seed, reshuffle_each_iteration=True)
        .shard(size, rank)
        .batch(micro_batch, drop_remainder=True)
        .take(steps_per_epoch)
        .prefetch(tf.data.AUTOTUNE)
    )


def distribute_eval(
    dataset: tf.data.Dataset, *, micro_batch: int, rank: int, size: int
) -> tf.data.Dataset:
    """This rank's share of an evaluation set: every sample is evaluated exactly once."""
    return dataset.shard(size, rank).batch(micro_batch).prefetch(tf.data.AUTOTUNE)
