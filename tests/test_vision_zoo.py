"""The vision zoo: CNN and ResNet models, synthetic, image-folder and ImageNet datasets.

Every reader runs on files generated here: solid-colour images whose colour
encodes a sample id, so decoded, cropped and normalised pixels still tell
which sample (and hence which label) a rank received.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from tests.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

import keras  # noqa: E402

from tntrun.config.zoo import build_dataset, build_model  # noqa: E402
from tntrun.datasets.image_folder import ImageFolderDataset  # noqa: E402
from tntrun.datasets.imagenet import (  # noqa: E402
    MEAN_RGB,
    STDDEV_RGB,
    ImagenetDataset,
    count_records,
    eval_image,
    train_crop,
)
from tntrun.datasets.pixels import normalize_channels  # noqa: E402
from tntrun.datasets.synthetic_images import SyntheticImages  # noqa: E402
from tntrun.models.cnn import build_cnn  # noqa: E402
from tntrun.models.resnet import build_resnet  # noqa: E402
from tntrun.planning.plan import DatasetInfo  # noqa: E402

pytestmark = pytest.mark.slow

SIZE = 16  # image side the readers resize to


def trainable_count(model) -> int:
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def one_sgd_step(model, x: np.ndarray, y: np.ndarray) -> float:
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        run_eagerly=True,  # tracing a deep ResNet's train step costs more than running it
    )
    loss, _ = model.train_on_batch(x, y)
    return float(loss)


# ---------------------------------------------------------------- models


@pytest.mark.parametrize(
    ("builder", "input_shape", "hparams"),
    [
        (build_cnn, (32, 32, 3), {}),
        (build_cnn, (64,), {"dropout": 0.5}),  # digits: 64 features viewed as 8x8x1
        (build_resnet, (32, 32, 3), {"depth": 18, "stem": "small", "weight_decay": 1e-4}),
        (build_resnet, (32, 32, 3), {"depth": 34, "zero_init_residual": True}),
        (build_resnet, (32, 32, 3), {"depth": 50, "stem": "small", "weight_decay": 1e-4}),
    ],
)
def test_model_trains_one_step(builder, input_shape, hparams):
    model = builder(input_shape, 7, **hparams)
    rng = np.random.default_rng(0)
    x = rng.random((2, *input_shape), dtype=np.float32)
    y = np.array([1, 6])
    assert np.isfinite(one_sgd_step(model, x, y))
    assert model(x, training=False).shape == (2, 7)


@pytest.mark.parametrize("depth", [101, 152])
def test_deep_resnets_build_and_run_forward(depth):
    model = build_resnet((32, 32, 3), 5, depth=depth)
    logits = model(np.zeros((2, 32, 32, 3), np.float32), training=False)
    assert logits.shape == (2, 5) and np.isfinite(logits.numpy()).all()


@pytest.mark.parametrize(("depth", "params"), [(18, 11_689_512), (50, 25_557_032)])
def test_resnet_parameter_counts_match_the_reference(depth, params):
    assert trainable_count(build_resnet((224, 224, 3), 1000, depth=depth)) == params


def test_stems_set_the_resolution_of_the_last_stage():
    small = build_resnet((32, 32, 3), 10, depth=18, stem="small")
    imagenet = build_resnet((32, 32, 3), 10, depth=18, stem="imagenet")
    assert small.get_layer("layer4_1_out").output.shape[1:3] == (4, 4)
    assert imagenet.get_layer("layer4_1_out").output.shape[1:3] == (1, 1)
    assert len(imagenet.layers) > len(small.layers)  # the max-pool and its padding


def test_zero_init_residual_zeroes_each_blocks_last_batchnorm():
    model = build_resnet((32, 32, 3), 10, depth=50, stem="small", zero_init_residual=True)
    gammas = {
        layer.name: layer.gamma.numpy()
        for layer in model.layers
        if isinstance(layer, keras.layers.BatchNormalization)
    }
    residual_ends = [name for name in gammas if name.endswith("_bn3")]
    assert len(residual_ends) == 16  # 3 + 4 + 6 + 3 bottleneck blocks
    for name, gamma in gammas.items():
        assert (gamma == 0).all() == (name in residual_ends), name
    bn = model.get_layer("bn1")
    assert bn.momentum == 0.9 and bn.epsilon == 1e-5


def test_weight_decay_is_half_the_factor_on_every_kernel():
    wd = 1e-4
    model = build_resnet((16, 16, 3), 10, depth=18, stem="small", weight_decay=wd)
    kernels = [w for w in model.trainable_weights if "kernel" in w.name]
    assert len(model.losses) == len(kernels) == 21  # 20 convolutions (3 projections) + dense
    expected = wd / 2 * sum(float(tf.reduce_sum(k**2)) for k in kernels)
    assert float(tf.add_n(model.losses)) == pytest.approx(expected, rel=1e-4)
    assert build_resnet((16, 16, 3), 10, depth=18, stem="small").losses == []


def test_resnet_rejects_unknown_options():
    with pytest.raises(ValueError, match="model.depth=20"):
        build_resnet((32, 32, 3), 10, depth=20)
    with pytest.raises(ValueError, match="model.stem=tiny"):
        build_resnet((32, 32, 3), 10, depth=18, stem="tiny")
    with pytest.raises(ValueError, match="perfect square"):
        build_cnn((10,), 3)


# ---------------------------------------------------------------- synthetic images


def test_synthetic_images_are_deterministic_and_sharded_by_index():
    data = SyntheticImages(
        image_size=8, channels=3, num_classes=5, num_train=20, num_val=7, seed=3, pool_size=4
    )
    assert data.info() == DatasetInfo(20, 7, (8, 8, 3), 5)
    labels, pool = data.labels(), data.images()
    same_seed = SyntheticImages(num_classes=5, num_train=20, num_val=7, seed=3)
    assert (labels == same_seed.labels()).all()
    assert not (labels == SyntheticImages(num_classes=5, num_train=20, num_val=7).labels()).all()

    train, val = data.load()
    x, y = next(iter(train.skip(5)))
    assert x.dtype == tf.float32 and x.shape == (8, 8, 3) and y.dtype == tf.int64
    np.testing.assert_array_equal(x.numpy(), pool[5 % 4])
    assert int(y) == labels[5]
    assert [int(y) for _, y in val] == list(labels[20:])

    seen = []
    for rank in (0, 1):
        train, val = data.load_for_rank(rank=rank, size=2, micro_batch=3, val_micro_batch=2, seed=0)
        assert [tuple(x.shape) for x, _ in train] == [(3, 8, 8, 3)] * 3  # 10 samples, drop 1
        mine = {(j % 4, labels[j]) for j in range(rank, 20, 2)}  # (pool image, label)
        for x, y in train.unbatch():
            image = next(k for k in range(4) if (pool[k] == x.numpy()).all())
            assert (image, int(y)) in mine, "a training sample of this rank's shard"
        seen += [int(y) for _, batch in val for y in batch]
        assert [int(y) for _, batch in val for y in batch] == list(labels[20 + rank :: 2])
        val_images = np.concatenate([x.numpy() for x, _ in val])
        np.testing.assert_array_equal(val_images, pool[np.arange(20 + rank, 27, 2) % 4])
    assert sorted(seen) == sorted(labels[20:])


# ---------------------------------------------------------------- image folders


def colour_of(class_id: int, index: int) -> tuple[int, int, int]:
    return 40 + 80 * class_id, 20 + 40 * index, 128


def solid_image(colour, height: int, width: int) -> np.ndarray:
    return np.broadcast_to(np.array(colour, np.uint8), (height, width, 3)).copy()


def write_image(path: Path, image: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    encode = tf.io.encode_png if path.suffix == ".png" else tf.io.encode_jpeg
    tf.io.write_file(str(path), encode(image))


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


def folder_ids(images: np.ndarray) -> list[tuple[int, int]]:
    """(class, index) of each decoded solid-colour image scaled to [0, 1]."""
    mean = images.reshape(len(images), -1, 3).mean(axis=1) * 255
    return [(round((r - 40) / 80), round((g - 20) / 40)) for r, g, _ in mean]


def batches_of(dataset) -> tuple[np.ndarray, np.ndarray]:
    xs, ys = zip(*[(x.numpy(), y.numpy()) for x, y in dataset], strict=True)
    return np.concatenate(xs), np.concatenate(ys)


def test_image_folder_splits_decodes_and_labels(image_root):
    data = ImageFolderDataset(str(image_root / "train"), image_size=SIZE)
    assert data.info() == DatasetInfo(12, 3, (SIZE, SIZE, 3), 3)
    assert data.classes == ["cat", "dog", "emu"]
    train, val = data.load()
    x, y = batches_of(train.batch(20))
    assert x.shape == (12, SIZE, SIZE, 3) and x.dtype == np.float32 and y.dtype == np.int64
    assert x.min() >= 0.0 and x.max() <= 1.0
    ids = folder_ids(x) + folder_ids(batches_of(val.batch(20))[0])
    assert sorted(ids) == [(c, i) for c in range(3) for i in range(5)]
    assert [c for c, _ in folder_ids(x)] == list(y)
    # Each image is one colour: resizing keeps it uniform.
    assert np.abs(x - x.mean(axis=(1, 2), keepdims=True)).max() < 0.02


def test_image_folder_ranks_share_files_disjointly(image_root):
    data = ImageFolderDataset(str(image_root / "train"), image_size=SIZE, validation_fraction=0.4)
    shares = {}
    for rank in (0, 1):
        train, val = data.load_for_rank(rank=rank, size=2, micro_batch=2, val_micro_batch=4, seed=5)
        x, y = batches_of(train)
        assert x.shape == (4, SIZE, SIZE, 3)  # 9 training images: 5 and 4 per rank, pairs
        assert [c for c, _ in folder_ids(x)] == list(y)
        second_epoch = folder_ids(batches_of(train)[0])  # reshuffled alike on every rank
        shares[rank] = (set(folder_ids(x)), set(second_epoch), folder_ids(batches_of(val)[0]))
    assert not shares[0][0] & shares[1][0], "ranks train on different images in an epoch"
    assert not shares[0][1] & shares[1][1], "... in every epoch"
    val0, val1 = shares[0][2], shares[1][2]
    assert not set(val0) & set(val1) and len(val0) + len(val1) == 6


def test_image_folder_cache_yields_what_decoding_every_pass_yields(image_root):
    def everything(cache: bool) -> list[tuple[np.ndarray, np.ndarray]]:
        data = ImageFolderDataset(
            str(image_root / "train"), image_size=SIZE, validation_fraction=0.4, cache=cache
        )
        assert data.caches() is cache
        streams = [
            data.load_for_rank(rank=rank, size=2, micro_batch=2, val_micro_batch=4, seed=5)
            for rank in (0, 1)
        ]
        passes = [batches_of(train) for train, _ in streams for _ in range(3)]  # reshuffled
        passes += [batches_of(val) for _, val in streams]
        return passes + [batches_of(split.batch(32)) for split in data.load()]

    for (x, y), (x_plain, y_plain) in zip(everything(True), everything(False), strict=True):
        np.testing.assert_array_equal(x, x_plain)
        np.testing.assert_array_equal(y, y_plain)

    # null: cached when the decoded images fit in memory (AUTO_CACHE_BYTES per rank).
    assert ImageFolderDataset(str(image_root / "train"), image_size=SIZE).caches()
    assert not ImageFolderDataset(str(image_root / "train"), image_size=8192).caches()
    eight = ImageFolderDataset(
        str(image_root / "train"), val_dir=str(image_root / "val"), image_size=SIZE, cache=True
    )
    _, val = eight.load_for_rank(rank=5, size=8, micro_batch=2, val_micro_batch=2, seed=0)
    assert list(val) == [], "4 validation images: ranks 4-7 get none"


def test_image_folder_with_val_dir_and_imagenet_normalisation(image_root):
    data = ImageFolderDataset(
        str(image_root / "train"),
        val_dir=str(image_root / "val"),
        image_size=8,
        normalization="imagenet",
    )
    assert data.info() == DatasetInfo(15, 4, (8, 8, 3), 3)
    x, y = batches_of(data.load()[1].batch(10))
    assert list(y) == [0, 0, 1, 1]
    unit = np.array([colour_of(c, i) for c in (0, 1) for i in (0, 1)]) / 255
    expected = (unit - np.array([0.485, 0.456, 0.406])) / np.array([0.229, 0.224, 0.225])
    np.testing.assert_allclose(x.mean(axis=(1, 2)), expected, atol=0.02)


def test_image_folder_missing_or_empty_dir_is_a_config_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"dataset.data_dir=.*nowhere does not exist: "):
        ImageFolderDataset(str(tmp_path / "nowhere")).info()
    (tmp_path / "empty" / "cat").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"dataset.data_dir=.*empty does not exist: "):
        ImageFolderDataset(str(tmp_path / "empty")).info()


# ---------------------------------------------------------------- ImageNet TFRecords

NUM_CLASSES = 4
TRAIN_SHARDS = (4, 4, 3)  # records per file; sample ids 0..10
VAL_SHARDS = (3, 2)  # ids 11..15


def sample_colour(sample_id: int) -> tuple[int, int, int]:
    return 20 + 12 * sample_id, 235 - 12 * sample_id, 100


def label_of(sample_id: int) -> int:
    return sample_id % NUM_CLASSES


def write_records(path: Path, ids, image_key: str, label_key: str, label_offset: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tf.io.TFRecordWriter(str(path)) as writer:
        for k in ids:
            jpeg = tf.io.encode_jpeg(solid_image(sample_colour(k), 24 + k, 40), quality=95)
            feature = {
                image_key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[jpeg.numpy()])),
                label_key: tf.train.Feature(
                    int64_list=tf.train.Int64List(value=[label_of(k) + label_offset])
                ),
                "image/format": tf.train.Feature(bytes_list=tf.train.BytesList(value=[b"JPEG"])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


def write_split(folder: Path, name_of, shards, first_id: int, **keys) -> list[int]:
    ids = []
    for i, count in enumerate(shards):
        chunk = list(range(first_id + len(ids), first_id + len(ids) + count))
        write_records(folder / name_of(i, len(shards)), chunk, **keys)
        ids += chunk
    return ids


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


def record_ids(images: np.ndarray) -> list[int]:
    """Sample ids of normalised solid-colour images."""
    rgb = images.reshape(len(images), -1, 3).mean(axis=1) * STDDEV_RGB + MEAN_RGB
    return [round((r - 20) / 12) for r in rgb[:, 0]]


def test_imagenet_info_from_dataset_info_json_and_from_record_framing(tfds_dir, garden_dir):
    tfds = ImagenetDataset(str(tfds_dir), image_size=SIZE, num_classes=NUM_CLASSES)
    assert tfds.records.directory == tfds_dir / "imagenet2012" / "5.1.0"
    assert tfds.records.layout.name == "tfds" and tfds.label_offset == 0
    assert tfds.info() == DatasetInfo(11, 5, (SIZE, SIZE, 3), NUM_CLASSES)
    garden = ImagenetDataset(str(garden_dir), image_size=SIZE, num_classes=NUM_CLASSES)
    assert garden.records.layout.name == "model_garden" and garden.label_offset == 1
    assert garden.info() == DatasetInfo(11, 5, (SIZE, SIZE, 3), NUM_CLASSES)
    for path in garden.records.train + garden.records.val:
        assert count_records(path) == sum(1 for _ in tf.data.TFRecordDataset(str(path)))
    overridden = ImagenetDataset(str(garden_dir), num_train=1_281_167, num_val=50_000)
    assert overridden.info() == DatasetInfo(1_281_167, 50_000, (224, 224, 3), 1000)


def test_imagenet_split_sizes_from_num_examples(tmp_path):
    folder = tmp_path / "imagenet2012" / "5.0.0"
    keys = {"image_key": "image", "label_key": "label", "label_offset": 0}
    write_records(folder / "imagenet2012-train.tfrecord-00000-of-00001", [0, 1], **keys)
    write_records(folder / "imagenet2012-validation.tfrecord-00000-of-00001", [2], **keys)
    (folder / "dataset_info.json").write_text(
        json.dumps(
            {
                "splits": [
                    {"name": "train", "statistics": {"numExamples": "1281167"}},
                    {"name": "validation", "numExamples": "50000"},
                ]
            }
        )
    )
    info = ImagenetDataset(str(tmp_path)).info()
    assert (info.num_train, info.num_val) == (1_281_167, 50_000)


def test_count_records_rejects_a_truncated_file(tmp_path, garden_dir):
    data = (garden_dir / "validation-00000-of-00001").read_bytes()
    (tmp_path / "cut").write_bytes(data[:-10])
    with pytest.raises(ValueError, match="truncated"):
        count_records(tmp_path / "cut")


@pytest.mark.parametrize("layout", ["tfds", "garden"])
def test_imagenet_ranks_get_disjoint_normalised_correctly_labelled_shares(
    layout, tfds_dir, garden_dir
):
    root = tfds_dir if layout == "tfds" else garden_dir
    data = ImagenetDataset(str(root), image_size=SIZE, num_classes=NUM_CLASSES, shuffle_buffer=8)
    train_seen, val_seen = [], []
    for rank in (0, 1):
        train, val = data.load_for_rank(rank=rank, size=2, micro_batch=2, val_micro_batch=2, seed=1)
        assert train.element_spec[0].shape.as_list() == [2, SIZE, SIZE, 3]
        x, y = batches_of(train)
        assert x.dtype == np.float32 and y.dtype == np.int64 and len(x) >= 4
        ids = record_ids(x)
        assert list(y) == [label_of(k) for k in ids], "labels are 0-based and match images"
        # Solid images stay uniform through crop, resize and flip; values are normalised.
        assert np.abs(x - x.mean(axis=(1, 2), keepdims=True)).max() < 0.05
        assert x.min() > -2.2 and x.max() < 2.7
        train_seen += ids
        vx, vy = batches_of(val)
        val_seen += record_ids(vx)
        assert list(vy) == [label_of(k) for k in record_ids(vx)]
    assert len(set(train_seen)) == len(train_seen) and set(train_seen) <= set(range(11))
    assert sorted(val_seen) == list(range(11, 16)), "every validation image on exactly one rank"


def test_imagenet_load_yields_every_sample(garden_dir):
    train, val = ImagenetDataset(str(garden_dir), image_size=SIZE).load()
    x, y = batches_of(train.batch(32))
    assert sorted(record_ids(x)) == list(range(11)) and x.shape[1:] == (SIZE, SIZE, 3)
    assert sorted(record_ids(batches_of(val.batch(32))[0])) == list(range(11, 16))


def test_eval_preprocessing_resizes_the_shorter_side_and_crops_the_centre():
    image = np.zeros((40, 80, 3), np.uint8)
    image[:, 16:64] = 255  # a white band: the centre crop (cols ~22-58) sees only white
    jpeg = tf.io.encode_jpeg(image, quality=100)
    out = eval_image(jpeg, SIZE).numpy()
    assert out.shape == (SIZE, SIZE, 3)
    white = (np.array([255.0] * 3) - MEAN_RGB) / STDDEV_RGB
    np.testing.assert_allclose(out, np.broadcast_to(white, out.shape), atol=0.05)


def test_tiled_normalisation_gives_the_values_of_broadcasting():
    image = tf.random.stateless_uniform((5, 6, 3), seed=[1, 2], maxval=255.0)
    np.testing.assert_array_equal(
        normalize_channels(image, MEAN_RGB, STDDEV_RGB, (5, 6, 3)), (image - MEAN_RGB) / STDDEV_RGB
    )


def test_train_crops_are_random_but_reproducible():
    image = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    jpeg = tf.io.encode_jpeg(image)
    crops = [train_crop(jpeg, tf.constant([s, 7], tf.int64), SIZE).numpy() for s in range(4)]
    assert all(c.shape == (SIZE, SIZE, 3) for c in crops)
    assert not np.allclose(crops[0], crops[1])
    np.testing.assert_array_equal(
        crops[2], train_crop(jpeg, tf.constant([2, 7], tf.int64), SIZE).numpy()
    )


def test_imagenet_missing_or_empty_dir_is_a_config_error(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"dataset.data_dir=.*nope does not exist: "):
        ImagenetDataset(str(tmp_path / "nope")).info()
    (tmp_path / "imagenet2012").mkdir()
    with pytest.raises(FileNotFoundError, match="no ImageNet TFRecords"):
        ImagenetDataset(str(tmp_path)).info()


# ---------------------------------------------------------------- configs and the driver

NEW_MODELS = ["cnn", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
NEW_DATASETS = ["synthetic_images", "image_folder", "imagenet"]


@pytest.mark.parametrize(
    "option", [f"model={m}" for m in NEW_MODELS] + [f"dataset={d}" for d in NEW_DATASETS]
)
def test_new_configs_compose(compose_cfg, option):
    cfg = compose_cfg(option)
    group, name = option.split("=")
    assert cfg[group]._target_.startswith(f"tntrun.{group}s.")
    if name.startswith("resnet"):
        assert cfg.model.depth == int(name.removeprefix("resnet"))


def test_composed_configs_build_models_and_datasets(compose_cfg, image_root):
    folder = f"dataset.data_dir={image_root / 'train'}"
    cfg = compose_cfg(
        "model=resnet18", "model.stem=small", "dataset=image_folder", folder, "dataset.image_size=8"
    )
    info = build_dataset(cfg.dataset).info()
    assert info == DatasetInfo(12, 3, (8, 8, 3), 3)
    assert build_model(cfg.model, info).output_shape == (None, 3)
    with pytest.raises(Exception, match="stem"):
        compose_cfg("model=resnet50", "model.stem=huge")
    cfg = compose_cfg("model=cnn", "dataset=synthetic_images")
    assert build_dataset(cfg.dataset).info() == DatasetInfo(2048, 512, (32, 32, 3), 10)
    assert cfg.dataset.distribute is False


def test_info_does_not_import_tensorflow(tmp_path, image_root, tfds_dir, garden_dir):
    # A full-size TFDS file set (empty files): sizes come from dataset_info.json.
    full = tmp_path / "imagenet2012" / "5.1.0"
    full.mkdir(parents=True)
    for split, shards in (("train", 1024), ("validation", 64)):
        for i in range(shards):
            (full / f"imagenet2012-{split}.tfrecord-{i:05d}-of-{shards:05d}").touch()
    splits = [
        {"name": "train", "shardLengths": [str(1251)] * 1024},
        {"name": "validation", "shardLengths": [str(781)] * 64},
    ]
    (full / "dataset_info.json").write_text(json.dumps({"splits": splits}))
    code = textwrap.dedent(f"""
        import json, sys, time
        import tntrun.models.cnn, tntrun.models.resnet
        from tntrun.datasets.image_folder import ImageFolderDataset
        from tntrun.datasets.imagenet import ImagenetDataset
        from tntrun.datasets.synthetic_images import SyntheticImages
        makers = {{
            "synthetic_images": lambda: SyntheticImages(image_size=224, num_classes=1000,
                                                        num_train=1281167, num_val=50000),
            "image_folder": lambda: ImageFolderDataset({str(image_root / "train")!r}),
            "imagenet_tfds": lambda: ImagenetDataset({str(tfds_dir)!r}),
            "imagenet_garden_counted": lambda: ImagenetDataset({str(garden_dir)!r}),
            "imagenet_full_json": lambda: ImagenetDataset({str(tmp_path)!r}),
        }}
        out = {{}}
        for name, make in makers.items():
            start = time.perf_counter()
            info = make().info()
            out[name] = [time.perf_counter() - start, info.num_train, info.num_val]
        out["tf"] = [m for m in ("tensorflow", "tf_keras", "keras") if m in sys.modules]
        print(json.dumps(out))
    """)
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    out = json.loads(result.stdout)
    assert out.pop("tf") == [], "info() imported TensorFlow"
    assert out["imagenet_full_json"][1:] == [1024 * 1251, 64 * 781]
    assert out["imagenet_garden_counted"][1:] == [11, 5]
    print({name: f"{seconds * 1000:.1f} ms" for name, (seconds, *_) in out.items()})
