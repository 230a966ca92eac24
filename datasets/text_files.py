"""The text files a translation dataset is made of: read as line-aligned pairs in chunks,
and cache files written whole (ranks preparing the same data never see half a file)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from itertools import islice, zip_longest
from pathlib import Path

ENCODE_CHUNK = 100_000  # pairs read (and encoded) at a time


def atomic_write(path: Path, write) -> None:
    """``write(temporary path)`` then rename: concurrent ranks never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def read_lines(path: Path) -> list[str]:
    """The lines of a UTF-8 text file, without their newlines."""
    with path.open(encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def pair_chunks(source: Path, target: Path, split: str) -> Iterator[tuple[list[str], list[str]]]:
    """Aligned (source lines, target lines) chunks; ValueError when the line counts differ."""
    with source.open(encoding="utf-8") as src, target.open(encoding="utf-8") as tgt:
        pairs = zip_longest(src, tgt)
        while chunk := list(islice(pairs, ENCODE_CHUNK)):
            if chunk[-1][0] is None or chunk[-1][1] is None:
                raise ValueError(
                    f"dataset.{split}_source and dataset.{split}_target differ in lines "
                    f"({source} vs {target}): the files must be line-aligned"
                )
            yield [s.rstrip("\n") for s, _ in chunk], [t.rstrip("\n") for _, t in chunk]
