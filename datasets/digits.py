"""scikit-learn's bundled handwritten digits: real data, no download."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from tntrun.plan import DatasetInfo

if TYPE_CHECKING:
    import tensorflow as tf


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
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split

        x, y = load_digits(return_X_y=True)
        x = (x / 16.0).astype(np.float32)
        return train_test_split(
            x,
            y.astype(np.int64),
            test_size=self.validation_fraction,
            stratify=y,
            random_state=self.split_seed,
        )

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
