"""ImageNet (ILSVRC 2012) from local TFRecords, TFDS or TF Model Garden layout.

TFDS ``imagenet2012``: ``imagenet2012-{train,validation}.tfrecord-NNNNN-of-NNNNN``
(possibly under ``imagenet2012/<version>/``) with features ``image`` (JPEG) and
``label`` (0-based), split sizes in ``dataset_info.json``. Model Garden:
``{train,validation}-NNNNN-of-NNNNN`` with ``image/encoded`` and
``image/class/label`` (1-based). Images must be JPEG, as both layouts store them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.imagenet_files import (
    Records,
    count_records,
    find_records,
    recorded_split_sizes,
)
from tntrun.datasets.pixels import normalize_channels

if TYPE_CHECKING:
    import tensorflow as tf

MEAN_RGB = (0.485 * 255, 0.456 * 255, 0.406 * 255)
STDDEV_RGB = (0.229 * 255, 0.224 * 255, 0.225 * 255)
CROP_AREA = (0.08, 1.0)
CROP_ASPECT_RATIO = (3 / 4, 4 / 3)
# TFRecord files each rank reads concurrently (interleaved).
CYCLE_LENGTH = 16


@dataclass
class ImagenetConfig:
    _target_: str = "tntrun.datasets.imagenet.ImagenetDataset"
    # A folder holding the TFRecords (or a parent such as ~/tensorflow_datasets).
    data_dir: str = "???"
    image_size: int = 224
    num_classes: int = 1000
    # Subtracted from stored labels; null: 0 for TFDS, 1 for Model Garden records.
    label_offset: int | None = None
    # Split sizes for the planner; null: from dataset_info.json, else counted (slow-ish).
    num_train: int | None = None
    num_val: int | None = None
    # Serialized records (~110 KB each) in each rank's shuffle buffer.
    shuffle_buffer: int = 10_000
    # Evaluation: resize the shorter side to image_size / eval_crop_fraction, centre crop.
    eval_crop_fraction: float = 0.875
    # ImageNet must shard its files per rank (load_for_rank): keep false.
    distribute: bool = False


SCHEMAS = {"imagenet": ImagenetConfig}


def _normalize(image: Any, image_size: int, batch: int | None = None) -> Any:
    """ImageNet mean/std normalisation of an ``image_size`` x ``image_size`` RGB image
    (or of a batch of ``batch`` of them)."""
    import tensorflow as tf

    shape = (image_size, image_size, 3) if batch is None else (batch, image_size, image_size, 3)
    return tf.ensure_shape(normalize_channels(image, MEAN_RGB, STDDEV_RGB, shape), shape)


def train_crop(jpeg: Any, seed: Any, image_size: int) -> Any:
    """Random-resized crop (area 8-100 %, aspect 3/4-4/3) and random horizontal flip, in
    0-255 pixel values (not yet normalised: that is done a batch at a time).

    Only the crop is decoded and it is resized bilinearly without antialiasing,
    as in TF Model Garden's ResNet recipe (antialiasing costs about a third of
    the pipeline's CPU here). ``seed`` is a stateless seed of shape [2]; when
    no crop fits in 10 attempts the whole image is used.
    """
    import tensorflow as tf

    crop_seed, flip_seed = tf.unstack(tf.random.experimental.stateless_split(seed, 2))
    begin, crop, _ = tf.image.stateless_sample_distorted_bounding_box(
        tf.io.extract_jpeg_shape(jpeg),
        bounding_boxes=tf.constant([[[0.0, 0.0, 1.0, 1.0]]]),
        seed=crop_seed,
        min_object_covered=0.0,
        aspect_ratio_range=CROP_ASPECT_RATIO,
        area_range=CROP_AREA,
        max_attempts=10,
        use_image_if_no_bounding_boxes=True,
    )
    window = tf.stack([begin[0], begin[1], crop[0], crop[1]])
    image = tf.io.decode_and_crop_jpeg(jpeg, window, channels=3)
    image = tf.image.resize(image, [image_size, image_size])
    return tf.image.stateless_random_flip_left_right(image, flip_seed)


def eval_image(jpeg: Any, image_size: int, crop_fraction: float = 0.875) -> Any:
    """Shorter side resized to ``image_size / crop_fraction``, then the centre crop."""
    import tensorflow as tf

    image = tf.io.decode_jpeg(jpeg, channels=3)
    shorter = round(image_size / crop_fraction)
    hw = tf.cast(tf.shape(image)[:2], tf.float32)
    scale = shorter / tf.reduce_min(hw)
    new_hw = tf.maximum(tf.cast(tf.round(hw * scale), tf.int32), shorter)
    image = tf.image.resize(image, new_hw)  # bilinear, no antialiasing: as in training
    top, left = tf.unstack((new_hw - image_size) // 2)
    image = image[top : top + image_size, left : left + image_size]
    return _normalize(image, image_size)


class ImagenetDataset:
    """ImageNet classification with the standard ResNet preprocessing.

    Training: random-resized crop to ``image_size`` and horizontal flip;
    evaluation: resize and centre crop; both normalised with the ImageNet
    per-channel mean and standard deviation. Labels are int64 in [0, num_classes).
    """

    def __init__(
        self,
        data_dir: str,
        image_size: int = 224,
        num_classes: int = 1000,
        label_offset: int | None = None,
        num_train: int | None = None,
        num_val: int | None = None,
        shuffle_buffer: int = 10_000,
        eval_crop_fraction: float = 0.875,
    ) -> None:
        if image_size < 1 or num_classes < 1 or shuffle_buffer < 1:
            raise ValueError(
                f"dataset.image_size={image_size}, dataset.num_classes={num_classes}, "
                f"dataset.shuffle_buffer={shuffle_buffer}: each must be >= 1"
            )
        if not 0.0 < eval_crop_fraction <= 1.0:
            raise ValueError(f"dataset.eval_crop_fraction={eval_crop_fraction}: use (0, 1]")
        self.data_dir = Path(data_dir).expanduser()
        self.image_size = image_size
        self.num_classes = num_classes
        self._label_offset = label_offset
        self.num_train = num_train
        self.num_val = num_val
        self.shuffle_buffer = shuffle_buffer
        self.eval_crop_fraction = eval_crop_fraction

    # ImageNet-1k (ILSVRC 2012) as published: training and validation images.
    PUBLISHED = {"train": 1_281_167, "validation": 50_000, "classes": 1000}

    @classmethod
    def published_info(
        cls,
        image_size: int = 224,
        num_classes: int = 1000,
        num_train: int | None = None,
        num_val: int | None = None,
        **_: object,
    ) -> DatasetInfo:
        """ImageNet-1k's published sizes, to plan a run before the records are on disk."""
        return DatasetInfo(
            num_train=int(num_train or cls.PUBLISHED["train"]),
            num_val=int(num_val or cls.PUBLISHED["validation"]),
            input_shape=(image_size, image_size, 3),
            num_classes=num_classes,
        )

    @cached_property
    def records(self) -> Records:
        return find_records(self.data_dir)

    @property
    def label_offset(self) -> int:
        if self._label_offset is not None:
            return self._label_offset
        return self.records.layout.label_offset

    def info(self) -> DatasetInfo:
        sizes = {"train": self.num_train, "validation": self.num_val}
        if None in sizes.values():
            found = self.records
            files = {"train": found.train, "validation": found.val}
            recorded = recorded_split_sizes(
                found.directory, {name: len(paths) for name, paths in files.items()}
            )
            for split, size in sizes.items():
                if size is None:
                    sizes[split] = recorded.get(split) or sum(map(count_records, files[split]))
        return DatasetInfo(
            num_train=int(sizes["train"]),
            num_val=int(sizes["validation"]),
            input_shape=(self.image_size, self.image_size, 3),
            num_classes=self.num_classes,
        )

    def _parser(self, batched: bool = False):
        """Map from a serialized example (or a batch of them) to (JPEG bytes, 0-based
        int64 label)."""
        import tensorflow as tf

        layout, offset = self.records.layout, self.label_offset
        features = {
            layout.image_key: tf.io.FixedLenFeature([], tf.string),
            layout.label_key: tf.io.FixedLenFeature([], tf.int64),
        }
        parse_records = tf.io.parse_example if batched else tf.io.parse_single_example

        def parse(records):
            example = parse_records(records, features)
            return example[layout.image_key], example[layout.label_key] - offset

        return parse

    def _train_batches(self, records: tf.data.Dataset, *, seed: int, batch: int) -> tf.data.Dataset:
        """Augmented, normalised (images, labels) batches of ``batch`` (a last partial
        batch is dropped); crops and flips come from seeded stateless ops, one seed
        per record, so a sample's crop does not depend on the batch size.

        Records are batched before parsing: one ``parse_example`` per batch, the
        per-image crop in a ``map_fn`` and one normalisation per batch cost less
        CPU than per-sample elements (tf.data's per-element overhead is about as
        large as decoding a small crop).
        """
        import tensorflow as tf

        parse, size = self._parser(batched=True), self.image_size
        image_spec = tf.TensorSpec((size, size, 3), tf.float32)

        def preprocess(batch_records, seeds):
            jpegs, labels = parse(batch_records)
            images = tf.map_fn(
                lambda pair: train_crop(pair[0], pair[1], size),
                (jpegs, seeds),
                fn_output_signature=image_spec,
            )
            return _normalize(images, size, batch), labels

        seeds = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True).batch(2)
        pairs = tf.data.Dataset.zip(records, seeds).batch(batch, drop_remainder=True)
        return pairs.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)

    def _eval_samples(self, records: tf.data.Dataset) -> tf.data.Dataset:
        import tensorflow as tf

        parse, size, fraction = self._parser(), self.image_size, self.eval_crop_fraction

        def preprocess(record):
            jpeg, label = parse(record)
            return eval_image(jpeg, size, fraction), label

        return records.map(preprocess, num_parallel_calls=tf.data.AUTOTUNE)

    def load(self) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """Unbatched (image, label) splits for the automatic mode (small subsets only:
        the engine would buffer the whole decoded training set to shuffle it)."""
        import tensorflow as tf

        found = self.records
        train = tf.data.TFRecordDataset([str(p) for p in found.train])
        val = tf.data.TFRecordDataset([str(p) for p in found.val])
        train = self._train_batches(train, seed=0, batch=1).unbatch()
        return train, self._eval_samples(val)

    def load_for_rank(
        self, *, rank: int, size: int, micro_batch: int, val_micro_batch: int, seed: int
    ) -> tuple[tf.data.Dataset, tf.data.Dataset]:
        """This rank's training stream and validation share, sharded before decoding.

        Training files are split among the ranks once; each rank reshuffles its
        files and records (``shuffle_buffer``) every pass. Validation files are
        split the same way, so every validation image is on exactly one rank.
        """
        import tensorflow as tf

        autotune = tf.data.AUTOTUNE
        found = self.records
        records = _rank_records(found.train, rank, size, shuffle_seed=seed + rank).shuffle(
            self.shuffle_buffer, seed=seed + rank, reshuffle_each_iteration=True
        )
        train = self._train_batches(
            records, seed=seed * 1_000_003 + rank, batch=micro_batch
        ).prefetch(autotune)
        val_records = _rank_records(found.val, rank, size, shuffle_seed=None)
        val = self._eval_samples(val_records).batch(val_micro_batch).prefetch(autotune)
        return train, val


def _rank_records(
    files: Sequence[Path], rank: int, size: int, *, shuffle_seed: int | None
) -> tf.data.Dataset:
    """Serialized records of this rank's share of ``files``, files sharded before reading.

    The file list is the sorted one ``info()`` counted (what
    ``Dataset.list_files(pattern, shuffle=False)`` yields), identical on all ranks.
    """
    import tensorflow as tf

    names = tf.data.Dataset.from_tensor_slices([str(p) for p in files])
    if len(files) < size:
        # Fewer files than ranks: file sharding would leave ranks without data, so
        # every rank reads all files and keeps every size-th record instead.
        return tf.data.TFRecordDataset(names).shard(size, rank)
    names = names.shard(size, rank)
    local_files = len(range(rank, len(files), size))
    if shuffle_seed is not None:
        names = names.shuffle(local_files, seed=shuffle_seed, reshuffle_each_iteration=True)
    return names.interleave(
        tf.data.TFRecordDataset,
        cycle_length=min(CYCLE_LENGTH, local_files),
        num_parallel_calls=tf.data.AUTOTUNE,
    )
