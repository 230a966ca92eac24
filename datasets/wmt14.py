"""WMT14 English-German (or any parallel text) with a shared sentencepiece vocabulary.

``data_dir`` holds line-aligned text files: by default ``train.en``/``train.de``
and ``newstest2014.en``/``newstest2014.de`` (relative names are looked up in
``data_dir``). Nothing is downloaded.

Preparation happens once and is cached, so ``info()`` is fast after the first
call and never imports TensorFlow:

1. vocabulary: ``vocab_file`` (default ``<data_dir>/spm_<model_type>_<vocab_size>.model``)
   is loaded, or, when the file is missing, trained with sentencepiece on both
   training sides (ids: 0 pad, 1 BOS, 2 EOS, 3 unknown) and saved there;
2. encoding: both splits are encoded, pairs longer than ``max_length - 1``
   pieces are dropped (``long_pairs=filter``) or cut (``truncate``), empty
   pairs are dropped, and the ids are saved as ``.npz`` with a ``meta.json``
   of counts under ``cache_dir`` (default ``<data_dir>/.tntrun_cache``), in a
   folder keyed by the files, the vocabulary and these settings.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.text_files import atomic_write, pair_chunks, read_lines
from tntrun.datasets.translation_text import (
    BOS_ID,
    EOS_ID,
    LONG_PAIR_MODES,
    PAD_ID,
    UNK_ID,
    fit_pair,
    strip_special,
)

if TYPE_CHECKING:
    import tensorflow as tf

FILE_KEYS = ("train_source", "train_target", "val_source", "val_target")
HOW_TO_FIX = (
    "put line-aligned parallel text there (e.g. WMT14 en-de: train.en/train.de and "
    "newstest2014.en/newstest2014.de) or set dataset.data_dir and the file name keys"
)


@dataclass
class Wmt14Config:
    _target_: str = "tntrun.datasets.wmt14.Wmt14Dataset"
    data_dir: str = "???"
    train_source: str = "train.en"
    train_target: str = "train.de"
    val_source: str = "newstest2014.en"
    val_target: str = "newstest2014.de"
    # A sentencepiece .model (relative to data_dir); trained there when missing.
    # null: spm_<model_type>_<vocab_size>.model in data_dir.
    vocab_file: str | None = None
    vocab_size: int = 32_000
    model_type: str = "bpe"
    # Sentences sampled from the training text to train the vocabulary (0: all).
    vocab_sample_sentences: int = 2_000_000
    max_length: int = 64
    # Pairs longer than max_length - 1 pieces: filter (drop) or truncate.
    long_pairs: str = "filter"
    # Encoded splits and counts; null: <data_dir>/.tntrun_cache.
    cache_dir: str | None = None


SCHEMAS = {"wmt14": Wmt14Config}


def sentences_per_batch(batch_tokens: int, max_length: int) -> int:
    """Sentences in a token-budget batch of padded ``max_length`` pairs (the seed's 4096 tokens)."""
    sentences = batch_tokens // max_length
    if sentences < 1:
        raise ValueError(f"batch_tokens={batch_tokens} is less than one max_length={max_length}")
    return sentences


class Wmt14Dataset:
    """Parallel text encoded with a shared sentencepiece vocabulary, padded to ``max_length``."""

    def __init__(
        self,
        data_dir: str,
        train_source: str = "train.en",
        train_target: str = "train.de",
        val_source: str = "newstest2014.en",
        val_target: str = "newstest2014.de",
        vocab_file: str | None = None,
        vocab_size: int = 32_000,
        model_type: str = "bpe",
        vocab_sample_sentences: int = 2_000_000,
        max_length: int = 64,
        long_pairs: str = "filter",
        cache_dir: str | None = None,
    ) -> None:
        if long_pairs not in LONG_PAIR_MODES:
            raise ValueError(
                f"dataset.long_pairs={long_pairs!r}: choose one of {', '.join(LONG_PAIR_MODES)}"
            )
        if max_length < 2:
            raise ValueError(f"dataset.max_length={max_length}: use at least 2 (token + EOS)")
        self.data_dir = Path(data_dir).expanduser()
        self.names = dict(
            zip(FILE_KEYS, (train_source, train_target, val_source, val_target), strict=True)
        )
        self.vocab_file = vocab_file or f"spm_{model_type}_{vocab_size}.model"
        self.vocab_size, self.model_type = vocab_size, model_type
        self.vocab_sample_sentences = vocab_sample_sentences
        self.max_length, self.long_pairs = max_length, long_pairs
        self.cache_root = Path(cache_dir).expanduser() if cache_dir else None

    # -- files ---------------------------------------------------------------

    @cached_property
    def files(self) -> dict[str, Path]:
        """The four text files; FileNotFoundError naming the config key when one is missing."""
        if not self.data_dir.is_dir():
            raise FileNotFoundError(
                f"dataset.data_dir={self.data_dir} is not a directory: {HOW_TO_FIX}"
            )
        files = {key: self.data_dir / name for key, name in self.names.items()}
        for key, path in files.items():
            if not path.is_file():
                raise FileNotFoundError(f"dataset.{key}={path} does not exist: {HOW_TO_FIX}")
        return files

    @property
    def vocab_path(self) -> Path:
        return self.data_dir / self.vocab_file

    # -- vocabulary ----------------------------------------------------------

    def train_vocabulary(self) -> Path:
        """Train the sentencepiece model on both training sides and save it as ``vocab_path``."""
        import sentencepiece as spm

        files = self.files
        target = self.vocab_path
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            prefix = Path(tmp) / "spm"
            spm.SentencePieceTrainer.train(
                input=[str(files["train_source"]), str(files["train_target"])],
                model_prefix=str(prefix),
                vocab_size=self.vocab_size,
                model_type=self.model_type,
                character_coverage=1.0,
                pad_id=PAD_ID,
                bos_id=BOS_ID,
                eos_id=EOS_ID,
                unk_id=UNK_ID,
                input_sentence_size=self.vocab_sample_sentences,
                shuffle_input_sentence=True,
                hard_vocab_limit=False,
                num_threads=os.cpu_count() or 1,
                minloglevel=2,
            )
            os.replace(prefix.with_suffix(".vocab"), target.with_suffix(".vocab"))
            os.replace(prefix.with_suffix(".model"), target)
        return target

    @cached_property
    def processor(self) -> Any:
        """The sentencepiece processor (trains the vocabulary first when it is missing)."""
        import sentencepiece as spm

        if not self.vocab_path.is_file():
            print(
                f"wmt14: training a {self.vocab_size}-piece {self.model_type} vocabulary "
                f"into {self.vocab_path}",
                flush=True,
            )
            self.train_vocabulary()
        return spm.SentencePieceProcessor(model_file=str(self.vocab_path))

    # -- encoded cache -------------------------------------------------------

    def cache_dir(self) -> Path:
        """The folder of this configuration's encoded splits (trains the vocabulary if needed)."""
        if not self.vocab_path.is_file():
            self.processor  # noqa: B018 - trains and saves the vocabulary
        stats = {
            key: [str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns]
            for key, p in self.files.items()
        }
        key = json.dumps(
            {
                "files": stats,
                "vocab": hashlib.sha256(self.vocab_path.read_bytes()).hexdigest(),
                "max_length": self.max_length,
                "long_pairs": self.long_pairs,
            },
            sort_keys=True,
        )
        root = self.cache_root or self.data_dir / ".tntrun_cache"
        return root / f"wmt14-{hashlib.sha256(key.encode()).hexdigest()[:16]}"

    def _encode_split(self, split: str) -> tuple[dict[str, np.ndarray], int]:
        """Ragged ids (values + lengths per side) of a split, and the pairs dropped.

        The files are streamed in chunks, so memory holds the ids, not the text.
        """
        parts: dict[str, list[np.ndarray]] = {
            f"{side}_{kind}": [] for side in ("source", "target") for kind in ("values", "lengths")
        }
        total = 0
        for sources, targets in pair_chunks(
            self.files[f"{split}_source"], self.files[f"{split}_target"], split
        ):
            total += len(sources)
            encoded = zip(
                self.processor.encode(sources), self.processor.encode(targets), strict=True
            )
            kept = [
                fit_pair(s, t, self.max_length, self.long_pairs) if s and t else None
                for s, t in encoded
            ]
            for index, side in enumerate(("source", "target")):
                rows = [pair[index] for pair in kept if pair]
                parts[f"{side}_values"].append(np.array([i for r in rows for i in r], np.int32))
                parts[f"{side}_lengths"].append(np.array([len(r) for r in rows], np.int32))
        arrays = {
            key: np.concatenate(chunks) if chunks else np.zeros(0, np.int32)
            for key, chunks in parts.items()
        }
        return arrays, total - len(arrays["source_lengths"])

    @cached_property
    def meta(self) -> dict[str, Any]:
        """Counts of the prepared splits (prepares them on first use)."""
        folder = self.cache_dir()
        meta_file = folder / "meta.json"
        if meta_file.is_file():
            return json.loads(meta_file.read_text())
        meta: dict[str, Any] = {"vocab_size": int(self.processor.get_piece_size())}
        for split in ("train", "val"):
            arrays, dropped = self._encode_split(split)
            atomic_write(folder / f"{split}.npz", lambda p, a=arrays: np.savez(p, **a))
            meta[f"num_{split}"] = len(arrays["source_lengths"])
            meta[f"dropped_{split}"] = dropped
        atomic_write(meta_file, lambda p: p.write_text(json.dumps(meta, indent=2)))
        return meta

    # -- the dataset protocol ------------------------------------------------

    # WMT14 English-German as published (the TFDS/tensor2tensor training set, newstest2014).
    PUBLISHED = {"train": 4_508_785, "validation": 3_003}

    @classmethod
    def published_info(
        cls, vocab_size: int = 32_000, max_length: int = 64, **_: object
    ) -> DatasetInfo:
        """WMT14 en-de's published pair counts (before length filtering): plan without the text."""
        return DatasetInfo(
            num_train=cls.PUBLISHED["train"],
            num_val=cls.PUBLISHED["validation"],
            input_shape=(max_length,),
            num_classes=vocab_size,
            task="translation",
        )

    def info(self) -> DatasetInfo:
        meta = self.meta
        if meta["num_train"] == 0 or meta["num_val"] == 0:
            raise ValueError(
                f"dataset.max_length={self.max_length} with long_pairs={self.long_pairs} leaves "
                f"{meta['num_train']} training and {meta['num_val']} validation pairs: "
                "raise dataset.max_length or use dataset.long_pairs=truncate"
            )
        return DatasetInfo(
            num_train=meta["num_train"],
            num_val=meta["num_val"],
            input_shape=(self.max_length,),
            num_classes=meta["vocab_size"],
            task="translation",
        )

    def _split(self, split: str) -> tf.data.Dataset:
        import tensorflow as tf

        max_length = self.max_length
        with np.load(self.cache_dir() / f"{split}.npz") as data:
            source = tf.RaggedTensor.from_row_lengths(data["source_values"], data["source_lengths"])
            target = tf.RaggedTensor.from_row_lengths(data["target_values"], data["target_lengths"])

        def pad(ids):
            return tf.pad(ids, [[0, max_length - tf.shape(ids)[0]]])

        def example(src, tgt):
            eos, bos = tf.constant([EOS_ID]), tf.constant([BOS_ID])
            src_ids = tf.ensure_shape(pad(tf.concat([src, eos], 0)), [max_length])
            tgt_in = tf.ensure_shape(pad(tf.concat([bos, tgt], 0)), [max_length])
            tgt_out = tf.ensure_shape(pad(tf.concat([tgt, eos], 0)), [max_length])
            return (src_ids, tgt_in), tgt_out

        return tf.data.Dataset.from_tensor_slices((source, target)).map(example)

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched ``((source, target_input), target_output)`` training and validation data."""
        self.info()
        return self._split("train"), self._split("val")

    # -- translation helpers -------------------------------------------------

    def encode_sources(self, lines: Sequence[str], max_length: int | None = None) -> np.ndarray:
        """Source ids + EOS for decoding, padded to the longest (cut at ``max_length`` - 1)."""
        limit = (max_length or self.max_length) - 1
        rows = [ids[:limit] + [EOS_ID] for ids in self.processor.encode(list(lines))]
        padded = np.full((len(rows), max(map(len, rows), default=1)), PAD_ID, np.int32)
        for i, row in enumerate(rows):
            padded[i, : len(row)] = row
        return padded

    def decode(self, ids) -> str:
        """Detokenised text of pieces ids (up to EOS)."""
        return self.processor.decode(strip_special(ids))

    def bleu_sources(self, limit: int) -> np.ndarray:
        """Padded source ids of the first ``limit`` validation sentences (as in ``val_text``)."""
        return self.encode_sources(self.val_text()[0][:limit])

    def val_text(self) -> tuple[list[str], list[str]]:
        """(sources, references) of the whole validation files, for BLEU."""
        return read_lines(self.files["val_source"]), read_lines(self.files["val_target"])
