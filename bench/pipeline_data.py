"""Deterministic image sets on disk for `bench/input_pipeline.py`.

Images are smooth colour fields with mild noise (so JPEG compresses them
like photographs, not like white noise), of assorted sizes around the
benchmark's 64x64 input, fixed by a seed.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def picture(rng: np.random.Generator, sides: tuple[int, int] = (80, 120)) -> np.ndarray:
    """One uint8 RGB image: a 4x4 colour grid, bilinearly upsampled, plus noise."""
    height, width = (int(n) for n in rng.integers(*sides, size=2))
    grid = rng.random((4, 4, 3)) * 255
    rows, cols = np.linspace(0, 3, height), np.linspace(0, 3, width)
    r0, c0 = np.minimum(rows.astype(int), 2), np.minimum(cols.astype(int), 2)
    fr, fc = (rows - r0)[:, None, None], (cols - c0)[None, :, None]
    top = grid[r0][:, c0] * (1 - fc) + grid[r0][:, c0 + 1] * fc
    bottom = grid[r0 + 1][:, c0] * (1 - fc) + grid[r0 + 1][:, c0 + 1] * fc
    image = top * (1 - fr) + bottom * fr + rng.normal(0, 6, (height, width, 3))
    return np.clip(image, 0, 255).astype(np.uint8)


def jpeg(image: np.ndarray) -> bytes:
    import tensorflow as tf

    return tf.io.encode_jpeg(image, quality=90).numpy()


def write_image_folder(root: Path, classes: int, per_class: int, seed: int = 0) -> Path:
    """``root/class_NN/NNNN.jpg``: ``classes`` x ``per_class`` JPEGs."""
    rng = np.random.default_rng(seed)
    for c in range(classes):
        folder = root / f"class_{c:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for i in range(per_class):
            (folder / f"{i:04d}.jpg").write_bytes(jpeg(picture(rng)))
    return root


def _example(encoded: bytes, label: int) -> bytes:
    import tensorflow as tf

    feature = {
        "image/encoded": tf.train.Feature(bytes_list=tf.train.BytesList(value=[encoded])),
        "image/class/label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_imagenet_records(
    root: Path, classes: int, train: tuple[int, int], val: tuple[int, int], seed: int = 0
) -> Path:
    """Model Garden layout (1-based labels); ``train``/``val`` = (files, records per file)."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    for split, (files, per_file) in (("train", train), ("validation", val)):
        for f in range(files):
            with tf.io.TFRecordWriter(str(root / f"{split}-{f:05d}-of-{files:05d}")) as writer:
                for _ in range(per_file):
                    label = int(rng.integers(0, classes)) + 1
                    writer.write(_example(jpeg(picture(rng)), label))
    return root
