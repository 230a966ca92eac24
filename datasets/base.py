"""The dataset contract: what the driver and the ranks need from a dataset.

A dataset is a class named by ``dataset._target_`` (tntrun's own or the user's,
imported from the working directory). Its constructor takes the config's keys.
``info()`` sizes it without TensorFlow (the driver plans with it before any
rank starts); ``load()`` returns unbatched ``tf.data.Dataset`` splits on the
ranks, which tntrun shards and batches. A dataset that shards and batches
itself (``dataset.distribute=false``) implements ``load_for_rank()`` instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import tensorflow as tf

Shape = tuple[int, ...]
# One input's shape, or (a model of several named inputs) a shape per input name.
InputShape = Shape | Mapping[str, Shape]


@dataclass(frozen=True)
class DatasetInfo:
    """What the planner needs to know about a dataset (computed without TensorFlow)."""

    num_train: int
    num_val: int
    # A sample's features without the batch dimension; for features given as a dict (a
    # multi-input model) a mapping input name -> shape, which the model builder gets as is.
    input_shape: InputShape
    num_classes: int
    # "classification" (label per sample) or "translation" (token sequences, BLEU).
    task: str = "classification"


@runtime_checkable
class Dataset(Protocol):
    """What every dataset implements."""

    def info(self) -> DatasetInfo:
        """Sizes and shapes, without importing TensorFlow."""
        ...

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (features, label) or (features, label, sample_weight) training and
        validation splits; features and labels may be dicts (named inputs and outputs)."""
        ...


def named_inputs(info: DatasetInfo) -> bool:
    """Whether the features are a dict of named inputs (``input_shape`` a mapping)."""
    return isinstance(info.input_shape, Mapping)


def sequence_length_of(info: DatasetInfo) -> int | None:
    """The first dimension of a single input (a translation's sequence length), else None."""
    shape = info.input_shape
    return None if isinstance(shape, Mapping) or not shape else int(shape[0])


class RankShardedDataset(Dataset, Protocol):
    """A dataset that shards and micro-batches itself (``dataset.distribute=false``)."""

    def load_for_rank(
        self, *, rank: int, size: int, micro_batch: int, val_micro_batch: int, seed: int
    ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """This rank's batched training stream and validation batches."""
        ...


class PublishedSizes(Protocol):
    """A dataset whose sizes are published, so a run can be planned before the data exists."""

    @classmethod
    def published_info(cls, **config: Any) -> DatasetInfo:
        """The published sizes for this config (e.g. ImageNet-1k's 1,281,167 / 50,000)."""
        ...
