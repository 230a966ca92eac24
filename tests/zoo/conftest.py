"""Fixtures of the zoo's tests: image folders and ImageNet TFRecords written once per module
(tests/helpers/images.py generates them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.images import (
    TRAIN_SHARDS,
    VAL_SHARDS,
    colour_of,
    solid_image,
    write_image,
    write_records,
    write_split,
)


@pytest.fixture(scope="module")
def image_root(tmp_path_factory) -> Path:
    """3 classes x 5 images (JPEG and PNG, assorted sizes) under train/, 2 classes in val/."""
    root = tmp_path_factory.mktemp("images")
    for c, name in enumerate(["cat", "dog", "emu"]):
        for i in range(5):
            suffix = ".png" if i % 2 else ".JPG"
            write_image(
                root / "train" / name / f"{i}{suffix}", solid_image(colour_of(c, i), 20 + 3 * i, 30)
            )
    for c, name in enumerate(["cat", "dog"]):
        for i in range(2):
            write_image(root / "val" / name / f"v{i}.png", solid_image(colour_of(c, i), 12, 12))
    (root / "train" / "notes.txt").write_text("ignored")
    return root


@pytest.fixture(scope="module")
def tfds_dir(tmp_path_factory) -> Path:
    """TFDS layout under imagenet2012/5.1.0/, next to an older version 2.0.1."""
    root = tmp_path_factory.mktemp("tfds")
    folder = root / "imagenet2012" / "5.1.0"
    keys = {"image_key": "image", "label_key": "label", "label_offset": 0}
    for split, shards, first in (("train", TRAIN_SHARDS, 0), ("validation", VAL_SHARDS, 11)):
        write_split(
            folder,
            lambda i, n, s=split: f"imagenet2012-{s}.tfrecord-{i:05d}-of-{n:05d}",
            shards,
            first,
            **keys,
        )
    info = {
        "name": "imagenet2012",
        "splits": [
            {"name": "train", "shardLengths": [str(n) for n in TRAIN_SHARDS], "numBytes": "1"},
            {"name": "validation", "shardLengths": [str(n) for n in VAL_SHARDS]},
        ],
    }
    (folder / "dataset_info.json").write_text(json.dumps(info))
    for split in ("train", "validation"):
        old = root / "imagenet2012" / "2.0.1" / f"imagenet2012-{split}.tfrecord-00000-of-00001"
        write_records(old, [0], **keys)
    return root


@pytest.fixture(scope="module")
def garden_dir(tmp_path_factory) -> Path:
    """Model Garden layout, 1-based labels; one validation file (fewer files than ranks)."""
    root = tmp_path_factory.mktemp("garden")
    keys = {"image_key": "image/encoded", "label_key": "image/class/label", "label_offset": 1}
    write_split(root, lambda i, n: f"train-{i:05d}-of-{n:05d}", (6, 5), 0, **keys)
    write_split(root, lambda i, n: f"validation-{i:05d}-of-{n:05d}", (5,), 11, **keys)
    return root
