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


def read_npz(path: Path) -> dict[str, np.ndarray]:
    """The arrays of ``KEYS`` in ``path``; an error naming ``dataset.path`` if it is no .npz
    file with them (a pickle, a text file, a single .npy array, a truncated file)."""
    save = f"save the file with numpy.savez(path, {'=..., '.join(KEYS)}=...)"
    try:
        data = np.load(path)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"dataset.path={path} is not an .npz file ({err}): {save}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"dataset.path={path} holds one array (.npy), not an .npz: {save}")
    with data:
        missing = [k for k in KEYS if k not in data]
        if missing:
            raise FileNotFoundError(f"dataset.path={path} lacks {', '.join(missing)}: {save}")
        return {k: data[k] for k in KEYS}


def check_finite(x: np.ndarray, what: str) -> None:
    """NaN or infinite features would make the first step's loss NaN on some rank: refuse
    them before launch, naming the first bad sample."""
    if x.dtype.kind not in "biuf":
        raise ValueError(f"{what} has dtype {x.dtype}: features must be numbers")
    if x.dtype.kind != "f" or not len(x):
        return  # integers and booleans are finite
    finite = np.isfinite(x.reshape(len(x), -1)).all(axis=1)
    if not finite.all():
        bad = np.flatnonzero(~finite)
        raise ValueError(
            f"{what} has NaN or infinite values in {len(bad)} sample(s), the first at index "
            f"{bad[0]}: clean or drop them before training"
        )


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
        arrays = read_npz(self.path)
        for key in ("x_train", "x_val"):
            check_finite(arrays[key], f"dataset.path={self.path}: {key}")
        return arrays

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
