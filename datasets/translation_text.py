"""Shared helpers of the translation datasets: special ids, word vocabularies, padding.

Every translation dataset in the zoo uses the same id convention, which the
Transformer and the decoders in ``tntrun.models.translate`` rely on:
``0`` padding, ``1`` BOS (begin of sentence), ``2`` EOS (end of sentence),
``3`` unknown token; real tokens start at :data:`FIRST_TOKEN_ID`.

An example is ``((source_ids, target_input_ids), target_output_ids)``, each an
int32 vector of ``max_length`` ids padded with 0: the source and the target
output end with EOS, the target input starts with BOS (``target_input`` is
``target_output`` shifted right by one position).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tensorflow as tf

PAD_ID, BOS_ID, EOS_ID, UNK_ID = 0, 1, 2, 3
SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>")
FIRST_TOKEN_ID = len(SPECIAL_TOKENS)
LONG_PAIR_MODES = ("filter", "truncate")


class Vocabulary:
    """A word-level vocabulary: the special tokens, then ``tokens`` in the given order."""

    def __init__(self, tokens: Iterable[str]) -> None:
        self.tokens: tuple[str, ...] = SPECIAL_TOKENS + tuple(
            t for t in dict.fromkeys(tokens) if t not in SPECIAL_TOKENS
        )
        self._ids = {t: i for i, t in enumerate(self.tokens)}

    def __len__(self) -> int:
        return len(self.tokens)

    def encode(self, tokens: Sequence[str]) -> list[int]:
        return [self._ids.get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        """Tokens of ``ids`` up to the first EOS, without padding and BOS."""
        return [self.tokens[i] for i in strip_special(ids)]


def strip_special(ids: Iterable[int]) -> list[int]:
    """The real token ids of a decoded or padded sequence: stops at EOS, drops PAD and BOS."""
    kept = []
    for i in ids:
        i = int(i)
        if i == EOS_ID:
            break
        if i not in (PAD_ID, BOS_ID):
            kept.append(i)
    return kept


@dataclass(frozen=True)
class PairArrays:
    """Padded int32 arrays of a split, each of shape (pairs, max_length)."""

    source: np.ndarray
    target_input: np.ndarray
    target_output: np.ndarray

    def __len__(self) -> int:
        return len(self.source)


def fit_pair(
    source: Sequence[int], target: Sequence[int], max_length: int, mode: str
) -> tuple[list[int], list[int]] | None:
    """``source``/``target`` ids (without specials) fitted to ``max_length`` - 1 tokens.

    One position is kept for EOS (source, target output) or BOS (target
    input). ``mode="filter"`` drops a too long pair (returns None),
    ``"truncate"`` cuts it.
    """
    if mode not in LONG_PAIR_MODES:
        raise ValueError(f"long pair mode {mode!r}: choose one of {', '.join(LONG_PAIR_MODES)}")
    room = max_length - 1
    if len(source) <= room and len(target) <= room:
        return list(source), list(target)
    if mode == "filter":
        return None
    return list(source[:room]), list(target[:room])


def pad_pairs(
    sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]], max_length: int
) -> PairArrays:
    """Padded model inputs and labels for token id pairs that fit ``max_length`` - 1."""
    n = len(sources)
    if len(targets) != n:
        raise ValueError(f"{n} sources but {len(targets)} targets")
    source = np.full((n, max_length), PAD_ID, np.int32)
    target_input = np.full((n, max_length), PAD_ID, np.int32)
    target_output = np.full((n, max_length), PAD_ID, np.int32)
    for row, (src, tgt) in enumerate(zip(sources, targets, strict=True)):
        if len(src) >= max_length or len(tgt) >= max_length:
            raise ValueError(
                f"pair {row} has {len(src)}/{len(tgt)} tokens: max_length={max_length} "
                f"leaves room for {max_length - 1} (one position is BOS/EOS)"
            )
        source[row, : len(src) + 1] = [*src, EOS_ID]
        target_input[row, : len(tgt) + 1] = [BOS_ID, *tgt]
        target_output[row, : len(tgt) + 1] = [*tgt, EOS_ID]
    return PairArrays(source, target_input, target_output)


def to_dataset(arrays: PairArrays) -> tf.data.Dataset:
    """Unbatched ``((source, target_input), target_output)`` elements of the arrays."""
    import tensorflow as tf

    return tf.data.Dataset.from_tensor_slices(
        ((arrays.source, arrays.target_input), arrays.target_output)
    )
