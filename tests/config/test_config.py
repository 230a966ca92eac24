"""Config composition through Hydra's compose API (no TensorFlow, no launch)."""

from __future__ import annotations

import pytest
from hydra.errors import ConfigCompositionException

GROUPS = ("model", "dataset", "optimizer", "schedule", "horovod", "tracking")


def test_default_experiment_composes(compose_cfg):
    cfg = compose_cfg()
    for group in GROUPS:
        assert group in cfg, f"config group {group!r} missing from the default config"
    assert cfg.global_batch_size == 64
    assert cfg.nodes == 1 and cfg.gpus == 0 and cfg.ranks_per_node == 2
    assert cfg.dataset._target_ == "tntrun.datasets.digits.DigitsDataset"
    assert cfg.model._target_ == "tntrun.models.mlp.build_mlp"


def test_group_and_value_overrides(compose_cfg):
    cfg = compose_cfg("optimizer=sgd", "global_batch_size=128", "train.epochs=3", "nodes=2")
    assert cfg.optimizer.name == "sgd" and cfg.optimizer.base_batch_size == 256
    assert cfg.global_batch_size == 128 and cfg.train.epochs == 3 and cfg.nodes == 2


def test_unknown_key_is_rejected_naming_it(compose_cfg):
    with pytest.raises(ConfigCompositionException, match="global_batch_sise"):
        compose_cfg("global_batch_sise=32")


def test_unknown_group_option_lists_the_available_ones(compose_cfg):
    with pytest.raises(Exception, match="mlp"):
        compose_cfg("model=not_a_model")


def test_every_yaml_in_conf_composes(compose_cfg):
    from importlib.resources import files

    conf = files("tntrun.conf")
    for group in (p for p in conf.iterdir() if p.is_dir() and not p.name.startswith("_")):
        for option in group.iterdir():
            if option.name.endswith(".yaml"):
                name = option.name.removesuffix(".yaml")
                cfg = compose_cfg(f"{group.name}={name}")
                assert cfg is not None, f"{group.name}={name} does not compose"
