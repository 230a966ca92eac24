"""Labelled images on disk: one sub-folder of JPEG/PNG files per class."""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.pixels import normalize_channels
from tntrun.datasets.splits import stratified_split

if TYPE_CHECKING:
    import tensorflow as tf

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png")
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
# dataset.cache=null caches when a rank's decoded images take at most this much memory.
AUTO_CACHE_BYTES = 1 << 30


class Normalization(Enum):
    # Pixels scaled to [0, 1].
    unit = "unit"
    # [0, 1], then per-channel (x - ImageNet mean) / ImageNet std (needs 3 channels).
    imagenet = "imagenet"


@dataclass
class ImageFolderConfig:
    _target_: str = "tntrun.datasets.image_folder.ImageFolderDataset"
    # <data_dir>/<class name>/**/*.{jpg,jpeg,png}; classes are the sorted folder names.
    data_dir: str = "???"
    # Validation images in the same layout; null: hold out validation_fraction of data_dir.
    val_dir: str | None = None
    validation_fraction: float = 0.2
    split_seed: int = 0
    # Images are resized (squashed) to image_size x image_size.
    image_size: int = 224
    channels: int = 3
    normalization: Normalization = Normalization.unit
    # Decode every image once and keep the float32 result in memory (each rank holds the
    # whole training set); null: only when that is at most 1 GiB per rank.
    cache: bool | None = None
    # false: shuffle file names, not decoded images, and shard per rank (load_for_rank).
    distribute: bool = False


SCHEMAS = {"image_folder": ImageFolderConfig}


def class_folders(root: Path, key: str) -> dict[str, list[str]]:
    """Sorted image paths per class folder under ``root`` (``key`` names it in errors)."""
    if not root.is_dir():
        raise FileNotFoundError(
            f"dataset.{key}={root} does not exist: point it at a folder holding one "
            "sub-folder of JPEG/PNG images per class"
        )
    classes = {}
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if entry.is_dir() and not entry.name.startswith("."):
            files = [
                os.path.join(folder, name)
                for folder, _, names in sorted(os.walk(entry.path))
                for name in sorted(names)
                if name.lower().endswith(IMAGE_SUFFIXES)
            ]
            classes[entry.name] = files
    if not any(classes.values()):
        raise FileNotFoundError(
            f"dataset.{key}={root} does not exist: no <class>/<image>.jpg|.png files in it; "
            "put one sub-folder of JPEG/PNG images per class there"
        )
    return classes


def _flatten(classes: dict[str, list[str]], index: dict[str, int]) -> tuple[np.ndarray, np.ndarray]:
    paths = [path for files in classes.values() for path in files]
    labels = [index[name] for name, files in classes.items() for _ in files]
    return np.array(paths, dtype=str), np.array(labels, dtype=np.int64)


class ImageFolderDataset:
    """Images decoded with ``tf.io``, resized to ``image_size`` and scaled or normalised.

    Without ``val_dir`` the validation set is a stratified ``validation_fraction``
    of ``data_dir`` fixed by ``split_seed``, the same on every rank and run.
    """

    def __init__(
        self,
        data_dir: str,
        val_dir: str | None = None,
        validation_fraction: float = 0.2,
        split_seed: int = 0,
        image_size: int = 224,
        channels: int = 3,
        normalization: Normalization | str = Normalization.unit,
        cache: bool | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).expanduser()
        self.val_dir = Path(val_dir).expanduser() if val_dir else None
        if self.val_dir is None and not 0.0 < validation_fraction < 1.0:
            raise ValueError(
                f"dataset.validation_fraction={validation_fraction}: choose a value in (0, 1) "
                "or set dataset.val_dir"
            )
        if image_size < 1 or channels not in (1, 3):
            raise ValueError(
                f"dataset.image_size={image_size}, dataset.channels={channels}: "
                "use image_size >= 1 and 1 or 3 channels"
            )
        self.normalization = Normalization(getattr(normalization, "value", normalization))
        if self.normalization is Normalization.imagenet and channels != 3:
            raise ValueError("dataset.normalization=imagenet needs dataset.channels=3")
        self.validation_fraction = validation_fraction
        self.split_seed = split_seed
        self.image_size = image_size
        self.channels = channels
        self.cache = cache

    @property
    def classes(self) -> list[str]:
        """Class names (sorted folder names of ``data_dir``); label i is ``classes[i]``."""
        return self._splits[4]

    @cached_property
    def _splits(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, list[str]]:
        """(train paths, train labels, val paths, val labels, class names)."""
        train = class_folders(self.data_dir, "data_dir")
        index = {name: i for i, name in enumerate(train)}
        paths, labels = _flatten(train, index)
        if self.val_dir is None:
            kept, held_out = stratified_split(labels, self.validation_fraction, self.split_seed)
            return paths[kept], labels[kept], paths[held_out], labels[held_out], list(train)
        val = class_folders(self.val_dir, "val_dir")
        unknown = sorted(set(val) - set(index))
        if unknown:
            raise ValueError(
                f"dataset.val_dir={self.val_dir} has classes missing from dataset.data_dir: "
                f"{', '.join(unknown)}"
            )
        val_paths, val_labels = _flatten(val, index)
        return paths, labels, val_paths, val_labels, list(train)

    def info(self) -> DatasetInfo:
        train_paths, _, val_paths, _, classes = self._splits
        return DatasetInfo(
            num_train=len(train_paths),
            num_val=len(val_paths),
            input_shape=(self.image_size, self.image_size, self.channels),
            num_classes=len(classes),
        )

    def _decoder(self):
        """Map from (path, label) to (float32 image, label)."""
        import tensorflow as tf

        size, channels = self.image_size, self.channels
        imagenet = self.normalization is Normalization.imagenet

        def decode(path, label):
            image = tf.io.decode_image(
                tf.io.read_file(path), channels=channels, expand_animations=False
            )
            image = tf.image.convert_image_dtype(image, tf.float32)  # [0, 1], 8 or 16 bit
            image = tf.image.resize(image, [size, size], antialias=True)
            if imagenet:
                image = normalize_channels(image, IMAGENET_MEAN, IMAGENET_STD, (size, size, 3))
            return tf.ensure_shape(image, (size, size, channels)), label

        return decode

    def _files(self, split: str) -> tf.data.Dataset:
        import tensorflow as tf

        train_paths, train_labels, val_paths, val_labels, _ = self._splits
        if split == "train":
            return tf.data.Dataset.from_tensor_slices((train_paths, train_labels))
        return tf.data.Dataset.from_tensor_slices((val_paths, val_labels))

    def caches(self) -> bool:
        """Whether decoded images are kept in memory: ``cache``, or (null) when they fit
        in ``AUTO_CACHE_BYTES`` per rank (the whole training set and validation set)."""
        if self.cache is not None:
            return bool(self.cache)
        train_paths, _, val_paths, _, _ = self._splits
        image_bytes = 4 * self.image_size**2 * self.channels
        return (len(train_paths) + len(val_paths)) * image_bytes <= AUTO_CACHE_BYTES

    def _decoded(self, files: tf.data.Dataset) -> tuple[tf.Tensor, tf.Tensor]:
        """All (path, label) pairs of ``files`` decoded now: (images, labels), stacked."""
        import tensorflow as tf

        count = int(files.cardinality())
        if count == 0:
            shape = (0, self.image_size, self.image_size, self.channels)
            return tf.zeros(shape, tf.float32), tf.zeros((0,), tf.int64)
        decoded = files.map(self._decoder(), num_parallel_calls=tf.data.AUTOTUNE)
        return decoded.batch(count).get_single_element()

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (image, label) datasets, decoded once up front when ``caches()``.

        The engine's automatic mode shuffles these with a buffer of the whole
        training set of decoded images: only for sets that fit in memory.
        """
        import tensorflow as tf

        if self.caches():
            decoded = [self._decoded(self._files(split)) for split in ("train", "val")]
            train, val = map(tf.data.Dataset.from_tensor_slices, decoded)
            return train, val
        decode = self._decoder()
        return (
            self._files("train").map(decode, num_parallel_calls=tf.data.AUTOTUNE),
            self._files("val").map(decode, num_parallel_calls=tf.data.AUTOTUNE),
        )

    def load_for_rank(
        self, *, rank: int, size: int, micro_batch: int, val_micro_batch: int, seed: int
    ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Manual distribution: file names are shuffled and sharded, then decoded.

        Every rank shuffles all training file names with the same seed (a new
        order each pass) and keeps every ``size``-th one, so the ranks' shares
        are disjoint in every epoch while only names sit in the shuffle buffer.
        When ``caches()``, every rank decodes all training images once and the
        same shuffle runs over their indices (the same order as over names).
        """
        import tensorflow as tf

        autotune = tf.data.AUTOTUNE
        num_train = len(self._splits[0])

        def this_ranks(elements: tf.data.Dataset) -> tf.data.Dataset:
            shuffled = elements.shuffle(num_train, seed=seed, reshuffle_each_iteration=True)
            return shuffled.shard(size, rank)

        val_files = self._files("val").shard(size, rank)
        if self.caches():
            images, labels = self._decoded(self._files("train"))
            train = (
                this_ranks(tf.data.Dataset.range(num_train))
                .batch(micro_batch, drop_remainder=True)
                .map(lambda index: (tf.gather(images, index), tf.gather(labels, index)))
            )
            val = tf.data.Dataset.from_tensor_slices(self._decoded(val_files))
        else:
            decode = self._decoder()
            train = (
                this_ranks(self._files("train"))
                .map(decode, num_parallel_calls=autotune)
                .batch(micro_batch, drop_remainder=True)
            )
            val = val_files.map(decode, num_parallel_calls=autotune)
        return train.prefetch(autotune), val.batch(val_micro_batch).prefetch(autotune)
