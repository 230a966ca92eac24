"""The ImageNet reader: TFDS and Model Garden TFRecords, split sizes, preprocessing and the
ranks' shares (on records tests/zoo/conftest.py writes: see tests/helpers/images.py)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tests.helpers.components import require_module
from tests.helpers.images import NUM_CLASSES, SIZE, batches_of, label_of, record_ids, write_records

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.datasets.imagenet import (  # noqa: E402
    MEAN_RGB,
    STDDEV_RGB,
    ImagenetDataset,
    eval_image,
    train_crop,
)
from tntrun.datasets.imagenet_files import count_records  # noqa: E402
from tntrun.datasets.pixels import normalize_channels  # noqa: E402
from tntrun.planning.plan import DatasetInfo  # noqa: E402

pytestmark = pytest.mark.slow


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
