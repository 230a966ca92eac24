"""scikit-learn's bundled handwritten digits: real data, no download."""

from __future__ import annotations

import gzip
import importlib.util
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.splits import stratified_split

if TYPE_CHECKING:
    import tensorflow as tf


@dataclass
class DigitsConfig:
    _target_: str = "tntrun.datasets.digits.DigitsDataset"
    validation_fraction: float = 0.2
    # false: the dataset shards and micro-batches itself per rank (load_for_rank).
    distribute: bool = True


SCHEMAS = {"digits": DigitsConfig}


def digits_csv() -> Path:
    """The digits file inside the installed scikit-learn (found without importing it)."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("dataset=digits needs scikit-learn: pip install scikit-learn")
    return Path(spec.origin).parent / "datasets" / "data" / "digits.csv.gz"


class DigitsDataset:
    """8x8 grey-scale digits (1797 samples, 10 classes), scaled to [0, 1].

    The validation split is stratified and fixed by ``split_seed``, so every rank
    and every run sees the same held-out images.
    """

    def __init__(self, validation_fraction: float = 0.2, split_seed: int = 0) -> None:
        if not 0.0 < validation_fraction < 1.0:
            raise ValueError(
                f"dataset.validation_fraction={validation_fraction}: choose a value in (0, 1)"
            )
        self.validation_fraction = validation_fraction
        self.split_seed = split_seed

    @cached_property
    def _splits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        with gzip.open(digits_csv(), "rt") as f:
            table = np.loadtxt(f, delimiter=",", dtype=np.float32)
        x, y = table[:, :-1] / 16.0, table[:, -1].astype(np.int64)
        train, val = stratified_split(y, self.validation_fraction, self.split_seed)
        return x[train], x[val], y[train], y[val]

    def info(self) -> DatasetInfo:
        x_train, x_val, _, _ = self._splits
        return DatasetInfo(
            num_train=len(x_train), num_val=len(x_val), input_shape=(64,), num_classes=10
        )

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (features, label) datasets for training and validation."""
        import tensorflow as tf

        x_train, x_val, y_train, y_val = self._splits
        return (
            tf.data.Dataset.from_tensor_slices((x_train, y_train)),
            tf.data.Dataset.from_tensor_slices((x_val, y_val)),
        )

    def load_for_rank(
        self, *, rank: int, size: int, micro_batch: int, val_micro_batch: int, seed: int
    ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Manual distribution: this rank's own micro-batched training and validation data.

        Each rank keeps a fixed slice of the training set and reshuffles only
        within it; the engine repeats the stream and takes the planned steps.
        """
        train, val = self.load()
        x_train = self._splits[0]
        local = train.shard(size, rank).shuffle(len(x_train) // size + 1, seed=seed + rank)
        return (
            local.batch(micro_batch, drop_remainder=True),
            val.shard(size, rank).batch(val_micro_batch),
        )
