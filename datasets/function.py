"""A dataset given as a function that returns ``tf.data`` datasets: ``dataset._target_=
mydata.make``, where ``make(**keys)`` returns ``(train, val)`` or one dataset.

The driver plans without TensorFlow, so it cannot call such a function to learn the
data's size: the config states it (``num_train``, ``num_val``, ``num_classes``,
``input_shape``), and the function is called on the ranks only, where the stated sizes
and shapes are checked against what it returned before the first step.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from tntrun.datasets.base import DatasetInfo, InputShape

if TYPE_CHECKING:
    import tensorflow as tf

# The sizes a function's config states; passed on to the function when it names them.
SIZE_KEYS = ("num_train", "num_val", "num_classes", "input_shape")
EXAMPLES = {
    "num_train": "<training samples>",
    "num_val": "<validation samples>",
    "num_classes": "<classes>",
    "input_shape": "[<dims of one sample>]",
}


class DatasetMismatch(ValueError):
    """What the function returned does not match the sizes the config states."""


def _shape(value: Any, where: str) -> tuple[int, ...]:
    dims = [value] if isinstance(value, int) else value
    if not isinstance(dims, Sequence) or not all(isinstance(d, int) and d > 0 for d in dims):
        raise ValueError(f"{where}={value}: give a sample's dims as a list, e.g. [28,28]")
    return tuple(dims)


def stated_shape(value: Any) -> InputShape:
    """``dataset.input_shape`` as given: a list of dims, or a mapping input name -> dims."""
    if isinstance(value, Mapping):
        return {str(k): _shape(v, f"dataset.input_shape.{k}") for k, v in value.items()}
    return _shape(value, "dataset.input_shape")


def stated_info(target: str, sizes: Mapping[str, Any]) -> DatasetInfo:
    """The sizes the config states, or one line naming exactly the keys to add."""
    missing = [k for k in SIZE_KEYS if sizes.get(k) is None]
    if missing:
        adds = " ".join(f"+dataset.{k}={EXAMPLES[k]}" for k in missing)
        raise ValueError(
            f"dataset._target_={target} is a function returning tf.data datasets, which tntrun "
            f"cannot size before launch without TensorFlow: state the size, add {adds}"
        )
    for key, low in (("num_train", 1), ("num_val", 1), ("num_classes", 1)):
        if not isinstance(sizes[key], int) or sizes[key] < low:
            raise ValueError(f"dataset.{key}={sizes[key]}: give a whole number >= {low}")
    return DatasetInfo(
        num_train=sizes["num_train"],
        num_val=sizes["num_val"],
        input_shape=stated_shape(sizes["input_shape"]),
        num_classes=sizes["num_classes"],
    )


class FunctionDataset:
    """The dataset contract (``info()``, ``load()``) around a function returning datasets."""

    def __init__(self, target: str, **keys: Any) -> None:
        self.target = target
        self.sizes = {k: keys[k] for k in SIZE_KEYS if k in keys}
        self.arguments = {k: v for k, v in keys.items() if k not in SIZE_KEYS}

    def info(self) -> DatasetInfo:
        return stated_info(self.target, self.sizes)

    def function(self) -> Callable[..., Any]:
        module, _, name = self.target.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """The function's (train, val), checked against the stated sizes; one dataset is
        split: its first ``num_train`` samples train, the next ``num_val`` validate."""
        function, info = self.function(), self.info()
        named = inspect.signature(function).parameters
        sizes = {k: v for k, v in self.sizes.items() if k in named}
        made = function(**self.arguments, **sizes)
        train, val = self._splits(made, info)
        for split, dataset, stated in (("train", train, "num_train"), ("val", val, "num_val")):
            check_split(self.target, split, dataset, getattr(info, stated), stated, info)
        return train, val

    def _splits(self, made: Any, info: DatasetInfo) -> tuple[Any, Any]:
        import tensorflow as tf

        if isinstance(made, tf.data.Dataset):
            return made.take(info.num_train), made.skip(info.num_train).take(info.num_val)
        pair = tuple(made) if isinstance(made, tuple | list) else ()
        if len(pair) == 2 and all(isinstance(d, tf.data.Dataset) for d in pair):
            return pair
        raise DatasetMismatch(
            f"dataset._target_={self.target} returned {type(made).__name__}: return a "
            "tf.data.Dataset or a (train, val) pair of them"
        )


def check_split(
    target: str, split: str, dataset: Any, samples: int, key: str, info: DatasetInfo
) -> None:
    """The split's elements are (features, label[, weight]) of the stated input shape, and
    its length (when the dataset knows it) the stated one."""
    spec = dataset.element_spec
    if not isinstance(spec, tuple) or len(spec) not in (2, 3):
        raise DatasetMismatch(
            f"dataset._target_={target}: the {split} dataset's elements are not "
            "(features, label) or (features, label, sample_weight) tuples: yield those"
        )
    check_features(target, split, spec[0], info.input_shape)
    known = int(dataset.cardinality())
    if known >= 0 and known != samples:
        raise DatasetMismatch(
            f"dataset.{key}={samples}, but dataset._target_={target}'s {split} dataset has "
            f"{known} samples: set dataset.{key}={known}"
        )


def check_features(target: str, split: str, spec: Any, stated: InputShape) -> None:
    """The features' spec fits ``dataset.input_shape`` (a batched dataset does not)."""
    specs = spec if isinstance(spec, Mapping) else {"": spec}
    shapes = stated if isinstance(stated, Mapping) else {"": stated}
    if sorted(specs) != sorted(shapes):
        said = sorted(shapes) if isinstance(stated, Mapping) else "one input"
        found = sorted(specs) if isinstance(spec, Mapping) else "one tensor"
        raise DatasetMismatch(
            f"dataset.input_shape names {said}, but dataset._target_={target}'s {split} "
            f"features are {found}: state one shape per feature name"
        )
    for name, feature in specs.items():
        if not feature.shape.is_compatible_with(shapes[name]):
            key = f"dataset.input_shape{'.' + name if name else ''}"
            raise DatasetMismatch(
                f"{key}={list(shapes[name])}, but dataset._target_={target}'s {split} "
                f"features have shape {feature.shape.as_list()} per element: state that shape "
                "(and return unbatched datasets: tntrun batches them)"
            )
