"""The image datasets: synthetic images and image folders, decoded, labelled and shared
between ranks (on files tests/zoo/conftest.py generates: see tests/helpers/images.py)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module
from tests.helpers.images import SIZE, batches_of, colour_of, folder_ids

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.datasets.image_folder import ImageFolderDataset  # noqa: E402
from tntrun.datasets.synthetic_images import SyntheticImages  # noqa: E402
from tntrun.planning.plan import DatasetInfo  # noqa: E402

pytestmark = pytest.mark.slow


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
