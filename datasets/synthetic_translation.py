"""Random token sequences and a fixed rule to map them, for throughput tests of translation.

Each source is ``min_length``..``max_length - 1`` random token ids; the target
is the source reversed (``task="reverse"``), mapped through a fixed random
permutation of the vocabulary (``"permute"``) or copied (``"copy"``). Nothing
is stored: the splits are generated from ``seed`` (validation from a derived
seed) when loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.translation_text import FIRST_TOKEN_ID, PairArrays, pad_pairs, to_dataset

if TYPE_CHECKING:
    import tensorflow as tf

TASKS = ("reverse", "permute", "copy")


@dataclass
class SyntheticTranslationConfig:
    _target_: str = "tntrun.datasets.synthetic_translation.SyntheticTranslationDataset"
    vocab_size: int = 1000
    max_length: int = 64
    num_train: int = 10_000
    num_val: int = 500
    # Shortest source; max_length - 1 gives full-length sequences (steady throughput).
    min_length: int = 1
    task: str = "reverse"
    seed: int = 0


SCHEMAS = {"synthetic_translation": SyntheticTranslationConfig}


class SyntheticTranslationDataset:
    """Random sentences over ``vocab_size`` ids (special ids included) and their targets."""

    def __init__(
        self,
        vocab_size: int = 1000,
        max_length: int = 64,
        num_train: int = 10_000,
        num_val: int = 500,
        min_length: int = 1,
        task: str = "reverse",
        seed: int = 0,
    ) -> None:
        if vocab_size <= FIRST_TOKEN_ID:
            raise ValueError(
                f"dataset.vocab_size={vocab_size}: needs more than the {FIRST_TOKEN_ID} special ids"
            )
        if not 1 <= min_length <= max_length - 1:
            raise ValueError(
                f"dataset.min_length={min_length}: choose 1..max_length - 1 ({max_length - 1})"
            )
        if task not in TASKS:
            raise ValueError(f"dataset.task={task!r}: choose one of {', '.join(TASKS)}")
        if num_train < 1 or num_val < 1:
            raise ValueError("dataset.num_train and dataset.num_val must be at least 1")
        self.vocab_size, self.max_length = vocab_size, max_length
        self.num_train, self.num_val = num_train, num_val
        self.min_length, self.task, self.seed = min_length, task, seed

    @cached_property
    def permutation(self) -> np.ndarray:
        """The fixed id map of ``task="permute"`` (special ids map to themselves)."""
        rng = np.random.default_rng([self.seed, 1])
        tokens = rng.permutation(np.arange(FIRST_TOKEN_ID, self.vocab_size))
        return np.concatenate([np.arange(FIRST_TOKEN_ID), tokens])

    def _target(self, source: np.ndarray) -> np.ndarray:
        if self.task == "reverse":
            return source[::-1]
        if self.task == "permute":
            return self.permutation[source]
        return source

    def arrays(self, split: str) -> PairArrays:
        """Padded ids of ``split`` ("train" or "val")."""
        count, stream = {"train": (self.num_train, 0), "val": (self.num_val, 2)}[split]
        rng = np.random.default_rng([self.seed, stream])
        lengths = rng.integers(self.min_length, self.max_length, count)
        tokens = rng.integers(FIRST_TOKEN_ID, self.vocab_size, (count, self.max_length - 1))
        sources = [tokens[i, :n] for i, n in enumerate(lengths.tolist())]
        return pad_pairs(sources, [self._target(s) for s in sources], self.max_length)

    def info(self) -> DatasetInfo:
        return DatasetInfo(
            num_train=self.num_train,
            num_val=self.num_val,
            input_shape=(self.max_length,),
            task="translation",
            num_classes=self.vocab_size,
        )

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched ``((source, target_input), target_output)`` training and validation data."""
        return to_dataset(self.arrays("train")), to_dataset(self.arrays("val"))
