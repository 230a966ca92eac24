"""Arrays from a local ``.npz`` file: ``x_train``, ``y_train``, ``x_val``, ``y_val``."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tntrun.datasets.base import DatasetInfo

if TYPE_CHECKING:
    import tensorflow as tf

KEYS = ("x_train", "y_train", "x_val", "y_val")


@dataclass
class NpzConfig:
    _target_: str = "tntrun.datasets.npz.NpzDataset"
    path: str = "???"


SCHEMAS = {"npz": NpzConfig}


class NpzDataset:
    """Classification data saved with ``numpy.savez(path, x_train=..., y_train=..., ...)``.

    Labels are integer class ids; the class count is the largest label + 1.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser()

    @cached_property
    def _arrays(self) -> dict[str, np.ndarray]:
        if not self.path.is_file():
            raise FileNotFoundError(
                f"dataset.path={self.path} does not exist: point it at an .npz file with "
                f"{', '.join(KEYS)}"
            )
        with np.load(self.path) as data:
            missing = [k for k in KEYS if k not in data]
            if missing:
                raise FileNotFoundError(
                    f"dataset.path={self.path} lacks {', '.join(missing)}: save the file with "
                    f"numpy.savez(path, {'=..., '.join(KEYS)}=...)"
                )
            return {k: data[k] for k in KEYS}

    def info(self) -> DatasetInfo:
        a = self._arrays
        return DatasetInfo(
            num_train=len(a["x_train"]),
            num_val=len(a["x_val"]),
            input_shape=tuple(a["x_train"].shape[1:]),
            num_classes=int(max(a["y_train"].max(), a["y_val"].max())) + 1,
        )

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (features, label) datasets for training and validation."""
        import tensorflow as tf

        a = self._arrays
        return (
            tf.data.Dataset.from_tensor_slices((a["x_train"].astype(np.float32), a["y_train"])),
            tf.data.Dataset.from_tensor_slices((a["x_val"].astype(np.float32), a["y_val"])),
        )
