"""Numbers in English words to the same numbers in German words, generated offline.

``321_021`` is ``three hundred twenty-one thousand twenty-one`` in English and
``dreihunderteinundzwanzigtausendeinundzwanzig`` in German. The German
compound is split into its parts (``drei hundert ein und zwanzig tausend ein
und zwanzig``), so the word-level vocabulary stays small; translating still
needs reordering (``twenty-one`` -> ``ein und zwanzig``), the ``eins``/``ein``/
``eine`` forms and the teens and tens. BLEU is computed on the split form
(:meth:`NumbersTranslationDataset.decode`); :func:`join_german` writes the
compound. Conventions: American English without "and" (``one hundred one``);
German without a leading "ein" before hundert/tausend (``hundertdrei``,
``tausend``), ``eine Million``/``zwei Millionen`` as separate words.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.translation_text import PairArrays, Vocabulary, pad_pairs, to_dataset

if TYPE_CHECKING:
    import tensorflow as tf

MAX_SUPPORTED = 9_999_999

EN_ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
EN_TENS = ("", "", *["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"])
DE_UNITS = ["null", "eins", "zwei", "drei", "vier", "fünf", "sechs", "sieben", "acht", "neun"]
DE_TEENS = [
    "zehn",
    "elf",
    "zwölf",
    "dreizehn",
    "vierzehn",
    "fünfzehn",
    "sechzehn",
    "siebzehn",
    "achtzehn",
    "neunzehn",
]
DE_TENS = (
    "",
    "",
    *["zwanzig", "dreißig", "vierzig", "fünfzig", "sechzig", "siebzig", "achtzig", "neunzig"],
)
DE_MILLION = ("Million", "Millionen")


@dataclass
class NumbersTranslationConfig:
    _target_: str = "tntrun.datasets.numbers_translation.NumbersTranslationDataset"
    num_train: int = 20_000
    num_val: int = 1_000
    max_length: int = 16
    max_number: int = 999_999
    seed: int = 0


SCHEMAS = {"numbers_translation": NumbersTranslationConfig}


def _check_range(n: int) -> None:
    if not 0 <= n <= MAX_SUPPORTED:
        raise ValueError(f"{n} is outside the supported range 0..{MAX_SUPPORTED}")


def _english_below_thousand(n: int) -> list[str]:
    hundreds, rest = divmod(n, 100)
    tokens = [EN_ONES[hundreds], "hundred"] if hundreds else []
    if rest >= 20:
        tokens.append(EN_TENS[rest // 10])
        if rest % 10:
            tokens += ["-", EN_ONES[rest % 10]]
    elif rest:
        tokens.append(EN_ONES[rest])
    return tokens


def english_tokens(n: int) -> list[str]:
    """``n`` in English words, the hyphen of ``twenty-one`` as a token of its own."""
    _check_range(n)
    if n == 0:
        return ["zero"]
    millions, thousands, rest = n // 1_000_000, n // 1000 % 1000, n % 1000
    tokens = []
    if millions:
        tokens += [*_english_below_thousand(millions), "million"]
    if thousands:
        tokens += [*_english_below_thousand(thousands), "thousand"]
    return tokens + _english_below_thousand(rest)


def english_words(n: int) -> str:
    """``n`` written in English: ``21`` -> ``twenty-one``."""
    return " ".join(english_tokens(n)).replace(" - ", "-")


def _german_below_thousand(n: int, final: bool) -> list[str]:
    """Parts of 1..999; ``final``: nothing follows (``eins``), else ``ein`` (``eintausend``)."""
    hundreds, rest = divmod(n, 100)
    tokens = []
    if hundreds:
        tokens += [] if hundreds == 1 else [DE_UNITS[hundreds]]
        tokens.append("hundert")
    units, tens = rest % 10, rest // 10
    if rest == 1:
        tokens.append("eins" if final else "ein")
    elif rest < 10 and rest:
        tokens.append(DE_UNITS[rest])
    elif 10 <= rest < 20:
        tokens.append(DE_TEENS[rest - 10])
    elif rest >= 20:
        if units:
            tokens += ["ein" if units == 1 else DE_UNITS[units], "und"]
        tokens.append(DE_TENS[tens])
    return tokens


def german_tokens(n: int) -> list[str]:
    """``n`` in German, the compound split into parts: ``21`` -> ``ein und zwanzig``."""
    _check_range(n)
    if n == 0:
        return ["null"]
    millions, thousands, rest = n // 1_000_000, n // 1000 % 1000, n % 1000
    tokens = []
    if millions:
        tokens += ["eine", DE_MILLION[0]] if millions == 1 else [DE_UNITS[millions], DE_MILLION[1]]
    if thousands:
        tokens += [] if thousands == 1 else _german_below_thousand(thousands, final=False)
        tokens.append("tausend")
    if rest:
        tokens += _german_below_thousand(rest, final=True)
    return tokens


def join_german(tokens: list[str]) -> str:
    """The written German of :func:`german_tokens`: parts joined, ``Million(en)`` apart."""
    for i, token in enumerate(tokens):
        if token in DE_MILLION:
            words = ["".join(tokens[:i]), token, "".join(tokens[i + 1 :])]
            return " ".join(w for w in words if w)
    return "".join(tokens)


def german_words(n: int) -> str:
    """``n`` written in German: ``2023`` -> ``zweitausenddreiundzwanzig``."""
    return join_german(german_tokens(n))


def number_vocabulary() -> Vocabulary:
    """Every English and German token of the supported range, in a fixed order."""
    covering = [*range(1000), 1000, 1_000_000, 2_000_000]
    english = (t for n in covering for t in english_tokens(n))
    german = (t for n in covering for t in german_tokens(n))
    return Vocabulary([*english, *german])


def longest_sentence(max_number: int) -> int:
    """An upper bound of the tokens of any number up to ``max_number`` (either language).

    Numbers whose digits are all 9 have the most tokens for their digit count.
    """
    all_nines = 10 ** len(str(max_number)) - 1
    n = min(all_nines, MAX_SUPPORTED)
    return max(len(english_tokens(n)), len(german_tokens(n)))


def sample_numbers(count: int, max_number: int, seed: int) -> np.ndarray:
    """``count`` distinct numbers in 0..max_number, a function of ``seed`` alone.

    Half are uniform in the range, half first draw a digit count uniformly, so
    short numbers (and their special forms) appear too; duplicates are skipped.
    """
    if count > max_number + 1:
        raise ValueError(f"cannot draw {count} distinct numbers from 0..{max_number}")
    rng = np.random.default_rng(seed)
    digits = len(str(max_number))
    chosen: dict[int, None] = {}
    while len(chosen) < count:
        batch = max(2 * (count - len(chosen)), 1024)
        uniform = rng.integers(0, max_number + 1, batch)
        d = rng.integers(1, digits + 1, batch)
        low = np.where(d == 1, 0, 10 ** (d - 1))
        high = np.minimum(10**d - 1, max_number)
        by_digits = low + (rng.random(batch) * (high - low + 1)).astype(np.int64)
        mixed = np.where(rng.random(batch) < 0.5, uniform, np.minimum(by_digits, high))
        for n in mixed.tolist():
            chosen.setdefault(n, None)
            if len(chosen) == count:
                break
    return np.fromiter(chosen, np.int64, count)


class NumbersTranslationDataset:
    """English number words -> German number words; train and validation numbers are disjoint.

    All ``num_train + num_val`` numbers are drawn together without repetition
    (fixed by ``seed``); the first ``num_train`` are the training split.
    """

    def __init__(
        self,
        num_train: int = 20_000,
        num_val: int = 1_000,
        max_length: int = 16,
        max_number: int = 999_999,
        seed: int = 0,
    ) -> None:
        if not 0 < max_number <= MAX_SUPPORTED:
            raise ValueError(
                f"dataset.max_number={max_number}: choose a value in 1..{MAX_SUPPORTED}"
            )
        if num_train < 1 or num_val < 1 or num_train + num_val > max_number + 1:
            raise ValueError(
                f"dataset.num_train={num_train} + dataset.num_val={num_val} distinct numbers "
                f"do not fit 0..{max_number}: lower them or raise dataset.max_number"
            )
        needed = longest_sentence(max_number) + 1
        if max_length < needed:
            raise ValueError(
                f"dataset.max_length={max_length} is too short for numbers up to {max_number}: "
                f"use at least {needed} (longest sentence + BOS/EOS)"
            )
        self.num_train, self.num_val = num_train, num_val
        self.max_length, self.max_number, self.seed = max_length, max_number, seed

    @cached_property
    def vocabulary(self) -> Vocabulary:
        return number_vocabulary()

    @cached_property
    def numbers(self) -> tuple[np.ndarray, np.ndarray]:
        """(training numbers, validation numbers)."""
        drawn = sample_numbers(self.num_train + self.num_val, self.max_number, self.seed)
        return drawn[: self.num_train], drawn[self.num_train :]

    def arrays(self, split: str) -> PairArrays:
        """Padded ids of ``split`` ("train" or "val")."""
        numbers = dict(zip(("train", "val"), self.numbers, strict=True))[split]
        vocab = self.vocabulary
        sources = [vocab.encode(english_tokens(n)) for n in numbers.tolist()]
        targets = [vocab.encode(german_tokens(n)) for n in numbers.tolist()]
        return pad_pairs(sources, targets, self.max_length)

    def info(self) -> DatasetInfo:
        return DatasetInfo(
            num_train=self.num_train,
            num_val=self.num_val,
            input_shape=(self.max_length,),
            task="translation",
            num_classes=len(self.vocabulary),
        )

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched ``((source, target_input), target_output)`` training and validation data."""
        return to_dataset(self.arrays("train")), to_dataset(self.arrays("val"))

    def decode(self, ids) -> str:
        """Token ids (up to EOS) as the space-separated tokens BLEU is computed on."""
        return " ".join(self.vocabulary.decode(ids))

    def bleu_sources(self, limit: int) -> np.ndarray:
        """Padded source ids of the first ``limit`` validation pairs (as in ``val_text``)."""
        return self.arrays("val").source[:limit]

    def val_text(self) -> tuple[list[str], list[str]]:
        """(English sources, German references) of the validation split, tokens space-separated."""
        numbers = self.numbers[1].tolist()
        return (
            [" ".join(english_tokens(n)) for n in numbers],
            [" ".join(german_tokens(n)) for n in numbers],
        )
