"""Building the configured dataset and model (shared by the driver and the ranks)."""

from __future__ import annotations

from typing import Any

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from tntrun.plan import DatasetInfo

# Dataset keys that steer the engine rather than the dataset's constructor.
ENGINE_KEYS = ("distribute",)


def build_dataset(cfg: DictConfig) -> Any:
    """The dataset object named by ``dataset._target_``."""
    args = {k: v for k, v in OmegaConf.to_container(cfg, resolve=True).items()
            if k not in ENGINE_KEYS}  # fmt: skip
    return instantiate(args)


def distributes_automatically(cfg: DictConfig) -> bool:
    """False when the dataset shards and batches itself (``dataset.distribute=false``)."""
    return bool(cfg.get("distribute", True))


def build_model(cfg: DictConfig, info: DatasetInfo) -> Any:
    """The model named by ``model._target_``, sized for the dataset."""
    return instantiate(cfg, input_shape=info.input_shape, num_classes=info.num_classes)
