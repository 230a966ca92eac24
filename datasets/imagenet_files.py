"""Finding and counting ImageNet's TFRecord files, without TensorFlow (the driver sizes the
dataset before any rank starts).

Two layouts: TFDS ``imagenet2012`` (possibly under ``imagenet2012/<version>/``) and the
TF Model Garden's; the first folder under ``dataset.data_dir`` that holds both splits in
one of them is used.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SEARCH_DEPTH = 2  # data_dir, data_dir/imagenet2012, data_dir/imagenet2012/5.1.0


@dataclass(frozen=True)
class Layout:
    name: str
    train_glob: str
    val_glob: str
    image_key: str
    label_key: str
    label_offset: int


LAYOUTS = (
    Layout(
        "tfds",
        "imagenet2012-train.tfrecord-*-of-*",
        "imagenet2012-validation.tfrecord-*-of-*",
        "image",
        "label",
        0,
    ),
    Layout(
        "model_garden", "train-*-of-*", "validation-*-of-*", "image/encoded", "image/class/label", 1
    ),
)


@dataclass(frozen=True)
class Records:
    """The TFRecord files found for a layout."""

    directory: Path
    layout: Layout
    train: tuple[Path, ...]
    val: tuple[Path, ...]


def _newest_first(path: Path) -> tuple[tuple[int, ...], str]:
    parts = path.name.split(".")
    version = tuple(int(p) for p in parts) if all(p.isdigit() for p in parts) else ()
    return version, path.name


def _search_dirs(root: Path) -> Iterator[Path]:
    """``root``, then its sub-folders level by level (version folders newest first)."""
    level = [root]
    for depth in range(SEARCH_DEPTH + 1):
        yield from level
        if depth < SEARCH_DEPTH:
            level = [
                Path(entry.path)
                for folder in level
                for entry in sorted(
                    os.scandir(folder), key=lambda e: _newest_first(Path(e.path)), reverse=True
                )
                if entry.is_dir() and not entry.name.startswith(".")
            ]


def find_records(root: Path) -> Records:
    """The first folder under ``root`` holding both splits in a known layout."""
    if not root.is_dir():
        raise FileNotFoundError(
            f"dataset.data_dir={root} does not exist: point it at ImageNet TFRecords "
            "(TFDS imagenet2012 or TF Model Garden layout)"
        )
    for directory in _search_dirs(root):
        for layout in LAYOUTS:
            train = tuple(sorted(directory.glob(layout.train_glob)))
            val = tuple(sorted(directory.glob(layout.val_glob)))
            if train and val:
                return Records(directory, layout, train, val)
    expected = " or ".join(f"{lay.train_glob} + {lay.val_glob}" for lay in LAYOUTS)
    raise FileNotFoundError(
        f"dataset.data_dir={root} does not exist: no ImageNet TFRecords found in it or "
        f"{SEARCH_DEPTH} folder levels below; expected {expected}"
    )


def count_records(path: Path) -> int:
    """Records in a TFRecord file, read from its framing without TensorFlow.

    Each record is an 8-byte little-endian length, a 4-byte CRC, the data and
    another 4-byte CRC; the data is skipped with a seek.
    """
    count = 0
    with open(path, "rb") as f:
        while header := f.read(12):
            if len(header) < 12:
                raise ValueError(f"{path}: truncated TFRecord header after {count} records")
            (length,) = struct.unpack("<Q", header[:8])
            f.seek(length + 4, os.SEEK_CUR)
            count += 1
        if f.tell() > os.fstat(f.fileno()).st_size:
            raise ValueError(f"{path}: truncated TFRecord after {count - 1} records")
    return count


def recorded_split_sizes(directory: Path, shard_counts: dict[str, int]) -> dict[str, int]:
    """Split sizes from TFDS's ``dataset_info.json`` (empty when absent).

    ``shardLengths`` are used only when they match the files present (a partial
    copy is counted instead); otherwise ``numExamples`` or ``statistics.numExamples``.
    """
    path = directory / "dataset_info.json"
    if not path.is_file():
        return {}
    sizes = {}
    for split in json.loads(path.read_text()).get("splits", []):
        name = split.get("name")
        lengths = split.get("shardLengths")
        total = split.get("numExamples", split.get("statistics", {}).get("numExamples"))
        if lengths and len(lengths) == shard_counts.get(name):
            sizes[name] = sum(int(n) for n in lengths)
        elif total is not None and not lengths:
            sizes[name] = int(total)
    return sizes
