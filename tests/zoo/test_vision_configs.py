"""The vision zoo's configs: every model and dataset option composes and builds, and sizing a
dataset (info()) does not import TensorFlow."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.config.zoo import build_dataset, build_model  # noqa: E402
from tntrun.planning.plan import DatasetInfo  # noqa: E402

pytestmark = pytest.mark.slow


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
