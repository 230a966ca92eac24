"""Arrays from a local ``.npz`` file: ``x_train``, ``y_train``, ``x_val``, ``y_val``.

A model of several named inputs or outputs reads dicts: ``x_train__<input name>`` (one
array per ``keras.Input`` name, likewise ``x_val__<name>``) and ``y_train__<output name>``
(per output layer name), so the file alone says how the model is fed.
"""

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
NAMED = "__"  # x_train__<name>: one of several named inputs (or outputs, for y_)
Arrays = np.ndarray | dict[str, np.ndarray]  # one array, or one per input/output name


@dataclass
class NpzConfig:
    _target_: str = "tntrun.datasets.npz.NpzDataset"
    path: str = "???"


SCHEMAS = {"npz": NpzConfig}


def read_npz(path: Path) -> dict[str, Arrays]:
    """The arrays of ``KEYS`` in ``path`` (a dict for named ``<key>__<name>`` arrays); an
    error naming ``dataset.path`` if it is no .npz file with them (a pickle, a text file, a
    single .npy array, a truncated file)."""
    save = f"save the file with numpy.savez(path, {'=..., '.join(KEYS)}=...)"
    try:
        data = np.load(path)
    except (OSError, ValueError, EOFError) as err:
        raise ValueError(f"dataset.path={path} is not an .npz file ({err}): {save}") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise ValueError(f"dataset.path={path} holds one array (.npy), not an .npz: {save}")
    with data:
        arrays = {k: _entry(data, k, path) for k in KEYS}
    missing = [k for k, found in arrays.items() if found is None]
    if missing:
        raise FileNotFoundError(f"dataset.path={path} lacks {', '.join(missing)}: {save}")
    for prefix in ("x", "y"):
        _check_same_names(arrays[f"{prefix}_train"], arrays[f"{prefix}_val"], prefix, path)
    return arrays


def _entry(data: np.lib.npyio.NpzFile, key: str, path: Path) -> Arrays | None:
    """``data[key]``, or the dict of its ``key__<name>`` arrays, or None."""
    named = {k.removeprefix(key + NAMED): data[k] for k in data.files if k.startswith(key + NAMED)}
    if key in data.files and named:
        raise ValueError(
            f"dataset.path={path} has both {key} and {key}{NAMED}<name> arrays: keep {key} "
            f"for one {'input' if key[0] == 'x' else 'output'} or only {key}{NAMED}<name>"
        )
    return data[key] if key in data.files else (named or None)


def _check_same_names(train: Arrays, val: Arrays, prefix: str, path: Path) -> None:
    """Training and validation name the same inputs (outputs)."""
    names = [sorted(a) if isinstance(a, dict) else None for a in (train, val)]
    if names[0] != names[1]:
        raise ValueError(
            f"dataset.path={path}: {prefix}_train names {names[0] or 'one array'} but "
            f"{prefix}_val {names[1] or 'one array'}: give both splits the same "
            f"{prefix}_<split>{NAMED}<name> arrays"
        )


def samples(arrays: Arrays, what: str) -> int:
    """The sample count of one array or of named arrays (which must agree)."""
    if not isinstance(arrays, dict):
        return len(arrays)
    counts = {name: len(a) for name, a in arrays.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"{what}: the named arrays differ in length ({counts}): align them")
    return next(iter(counts.values()))


def shape_of(arrays: Arrays) -> tuple[int, ...] | dict[str, tuple[int, ...]]:
    """A sample's shape, or one per name."""
    if isinstance(arrays, dict):
        return {name: tuple(a.shape[1:]) for name, a in arrays.items()}
    return tuple(arrays.shape[1:])


def as_features(arrays: Arrays) -> Arrays:
    """Features as float32, named ones alike."""
    if isinstance(arrays, dict):
        return {name: a.astype(np.float32) for name, a in arrays.items()}
    return arrays.astype(np.float32)


def _values(arrays: Arrays) -> list[tuple[str, np.ndarray]]:
    if isinstance(arrays, dict):
        return [(f"{NAMED}{name}", a) for name, a in arrays.items()]
    return [("", arrays)]


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


def check_labels(y: np.ndarray, what: str) -> None:
    """Labels are class ids 0, 1, ...: a NaN or negative one would fail or mislead the
    loss on some rank after launch; refuse it naming the first bad sample."""
    if y.dtype.kind not in "biuf":
        raise ValueError(f"{what} has dtype {y.dtype}: labels must be integer class ids")
    if not len(y):
        return
    rows = y.reshape(len(y), -1)
    if y.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(rows).all(axis=1))
        if len(bad):
            raise ValueError(
                f"{what} has NaN or infinite labels in {len(bad)} sample(s), the first at "
                f"index {bad[0]}: give every sample its class id (0, 1, ...) or drop it"
            )
    bad = np.flatnonzero((rows < 0).any(axis=1))
    if len(bad):
        raise ValueError(
            f"{what} has negative labels in {len(bad)} sample(s), the first at index {bad[0]} "
            f"({rows[bad[0]].min():g}): class ids run from 0 to the class count - 1: relabel"
        )


class NpzDataset:
    """Classification data saved with ``numpy.savez(path, x_train=..., y_train=..., ...)``.

    Labels are integer class ids; the class count is the largest label + 1 (over all
    outputs when there are several). Named arrays (``x_train__<name>``) load as dicts.
    """

    def __init__(self, path: str) -> None:
        self.path = Path(path).expanduser()

    @cached_property
    def _arrays(self) -> dict[str, Arrays]:
        if not self.path.is_file():
            raise FileNotFoundError(
                f"dataset.path={self.path} does not exist: point it at an .npz file with "
                f"{', '.join(KEYS)}"
            )
        arrays = read_npz(self.path)
        for key in KEYS:
            what = f"dataset.path={self.path}: {key}"
            if key[0] == "x":
                for suffix, x in _values(arrays[key]):
                    check_finite(x, what + suffix)
            else:
                for suffix, y in _values(arrays[key]):
                    check_labels(y, what + suffix)
        if not samples(arrays["x_train"], f"dataset.path={self.path}"):
            raise ValueError(
                f"dataset.path={self.path}: x_train has no samples: an epoch needs at least "
                "one training sample (save the training split as x_train, y_train)"
            )
        for split in ("train", "val"):
            n = {samples(arrays[f"{p}_{split}"], f"dataset.path={self.path}") for p in "xy"}
            if len(n) > 1:
                raise ValueError(
                    f"dataset.path={self.path}: x_{split} and y_{split} differ in length "
                    f"({' vs '.join(map(str, sorted(n)))}): align them"
                )
        return arrays

    def info(self) -> DatasetInfo:
        a = self._arrays
        labels = [y for key in ("y_train", "y_val") for _, y in _values(a[key]) if len(y)]
        return DatasetInfo(
            num_train=samples(a["x_train"], "x_train"),
            num_val=samples(a["x_val"], "x_val"),
            input_shape=shape_of(a["x_train"]),
            num_classes=int(max(y.max() for y in labels)) + 1,
        )

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (features, label) datasets for training and validation; dicts for
        named arrays."""
        import tensorflow as tf

        a = self._arrays
        return (
            tf.data.Dataset.from_tensor_slices((as_features(a["x_train"]), a["y_train"])),
            tf.data.Dataset.from_tensor_slices((as_features(a["x_val"]), a["y_val"])),
        )
