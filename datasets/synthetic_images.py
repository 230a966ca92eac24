"""Random images of any shape for throughput benchmarks (nothing to download or read)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tntrun.datasets.base import DatasetInfo

if TYPE_CHECKING:
    import tensorflow as tf


@dataclass
class SyntheticImagesConfig:
    _target_: str = "tntrun.datasets.synthetic_images.SyntheticImages"
    image_size: int = 32
    channels: int = 3
    num_classes: int = 10
    num_train: int = 2048
    num_val: int = 512
    seed: int = 0
    # Distinct random images kept in memory; sample i shows image i % pool_size.
    pool_size: int = 16
    # false: shuffle indices, not images, and shard per rank (load_for_rank), so
    # memory stays small for ImageNet shapes and millions of samples.
    distribute: bool = False


SCHEMAS = {"synthetic_images": SyntheticImagesConfig}


class SyntheticImages:
    """``num_train + num_val`` float32 images in [0, 1) with random labels.

    Images and labels are fixed by ``seed`` but unrelated to each other: the set
    measures speed, not learning. Only ``pool_size`` images and one label per
    sample are stored; samples are made by indexing them in a ``map``.
    """

    def __init__(
        self,
        image_size: int = 32,
        channels: int = 3,
        num_classes: int = 10,
        num_train: int = 2048,
        num_val: int = 512,
        seed: int = 0,
        pool_size: int = 16,
    ) -> None:
        minimums = {
            "image_size": (image_size, 1),
            "channels": (channels, 1),
            "num_classes": (num_classes, 1),
            "num_train": (num_train, 1),
            "num_val": (num_val, 0),
            "pool_size": (pool_size, 1),
        }
        for key, (value, least) in minimums.items():
            if value < least:
                raise ValueError(f"dataset.{key}={value}: use a value >= {least}")
        self.image_size = image_size
        self.channels = channels
        self.num_classes = num_classes
        self.num_train = num_train
        self.num_val = num_val
        self.seed = seed
        self.pool_size = min(pool_size, num_train + num_val)

    def info(self) -> DatasetInfo:
        return DatasetInfo(
            num_train=self.num_train,
            num_val=self.num_val,
            input_shape=(self.image_size, self.image_size, self.channels),
            num_classes=self.num_classes,
        )

    def labels(self) -> np.ndarray:
        """Every sample's label, training samples first (int32 to halve the memory)."""
        rng = np.random.default_rng([self.seed, 0])
        total = self.num_train + self.num_val
        return rng.integers(0, self.num_classes, total, dtype=np.int32)

    def images(self) -> np.ndarray:
        """The pool of distinct images, shape (pool_size, size, size, channels)."""
        rng = np.random.default_rng([self.seed, 1])
        shape = (self.pool_size, self.image_size, self.image_size, self.channels)
        return rng.random(shape, dtype=np.float32)

    def _sampler(self, offset: int):
        """Map from a split's sample indices (any shape) to (images, labels); ``offset`` is
        the split's start. Mapped after batching, it gathers a whole batch in one step."""
        import tensorflow as tf

        pool = tf.constant(self.images())
        labels = tf.constant(self.labels())
        pool_size = tf.constant(self.pool_size, tf.int64)

        def sample(index):
            i = index + offset
            return tf.gather(pool, i % pool_size), tf.cast(tf.gather(labels, i), tf.int64)

        return sample

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (image, label) datasets for training and validation."""
        import tensorflow as tf

        return (
            tf.data.Dataset.range(self.num_train).map(self._sampler(0)),
            tf.data.Dataset.range(self.num_val).map(self._sampler(self.num_train)),
        )

    def load_for_rank(
        self, *, rank: int, size: int, micro_batch: int, val_micro_batch: int, seed: int
    ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Manual distribution: each rank keeps every ``size``-th index and reshuffles them.

        Indices are batched first and each batch is gathered at once: the pipeline costs
        next to no CPU, so the set measures the model, not its input.
        """
        import tensorflow as tf

        autotune = tf.data.AUTOTUNE
        local = tf.data.Dataset.range(self.num_train).shard(size, rank)
        train = (
            local.shuffle(self.num_train // size + 1, seed=seed + rank)
            .batch(micro_batch, drop_remainder=True)
            .map(self._sampler(0))
            .prefetch(autotune)
        )
        val = (
            tf.data.Dataset.range(self.num_val)
            .shard(size, rank)
            .batch(val_micro_batch)
            .map(self._sampler(self.num_train))
            .prefetch(autotune)
        )
        return train, val
