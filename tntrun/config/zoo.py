"""Building the configured dataset and model (shared by the driver and the ranks).

The driver sizes the dataset (``info()``) and vets both targets before launch;
the ranks build them for real. Targets may be tntrun's zoo or the user's own
modules in the working directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hydra.utils import get_class, instantiate
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from tntrun.config.callback_checks import check_callbacks
from tntrun.config.compile_checks import check_compile_keys, check_optimizer_target
from tntrun.config.user_code import (
    check_target,
    constant_return,
    find_target,
    is_function_target,
)
from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.function import SIZE_KEYS, FunctionDataset
from tntrun.errors import PlanError
from tntrun.models.base import SIZED_BY_DATASET

# Dataset keys that steer the engine rather than the dataset's constructor.
ENGINE_KEYS = ("distribute",)


def _dataset_args(section: Mapping[str, Any]) -> dict[str, Any]:
    if isinstance(section, DictConfig):  # the driver's, composed (a dry run may miss keys)
        section = OmegaConf.to_container(section, resolve=True)
    return {k: v for k, v in section.items() if k not in ENGINE_KEYS}


def build_dataset(section: Mapping[str, Any]) -> Any:
    """The dataset object the ``dataset`` section's ``_target_`` names; a function (which
    returns tf.data datasets) is wrapped, not called: only a rank may import TensorFlow."""
    args = _dataset_args(section)
    target = args.get("_target_")
    if isinstance(target, str) and is_function_target(target):
        keys = {k: v for k, v in args.items() if k != "_target_"}
        return FunctionDataset(target, **keys)
    return instantiate(args)


def _dataset_keys(cfg: DictConfig) -> tuple[list[str], list[str]]:
    """(the dataset keys its target must take, the keys tntrun reads itself that it may
    take): a function's stated sizes go to it only if it names them, and when missing are
    reported together by the sizing (``FunctionDataset.info``)."""
    keys = [k for k in cfg.dataset if k not in ("_target_", *ENGINE_KEYS)]
    target = cfg.dataset._target_
    if not is_function_target(target):
        return keys, []
    named = find_target("dataset", target).names
    return [k for k in keys if k not in SIZE_KEYS], [k for k in SIZE_KEYS if k in named]


def distributes_automatically(section: Mapping[str, Any]) -> bool:
    """False when the dataset shards and batches itself (``dataset.distribute=false``)."""
    return section.get("distribute", True) is not False


def build_model(section: Mapping[str, Any], info: DatasetInfo) -> Any:
    """The model the ``model`` section's ``_target_`` names, sized for the dataset."""
    return instantiate(section, input_shape=info.input_shape, num_classes=info.num_classes)


def check_targets(cfg: DictConfig, choices: dict[str, str]) -> None:
    """Both targets exist and take the config's keys, and a dataset that distributes itself
    can (PlanError naming the keys otherwise)."""
    for group, example in (("model", "mymodels.build"), ("dataset", "mydata.MyDataset")):
        if OmegaConf.is_missing(cfg[group], "_target_"):
            raise PlanError(
                f"{group}._target_ is not set: give {group}._target_={example} "
                "(a module in the working directory or an installed package)"
            )
    model_keys = [k for k in cfg.model if k != "_target_"]
    check_target("model", cfg.model._target_, model_keys, SIZED_BY_DATASET, choices.get("model"))
    returned = constant_return(cfg.model._target_)
    if returned is not None:
        raise PlanError(
            f"model._target_={cfg.model._target_} returns {returned}, never a model: return "
            "the keras.Model it builds (e.g. return keras.Sequential([...]))"
        )
    target = cfg.dataset._target_
    keys, sized = _dataset_keys(cfg)
    check_target("dataset", target, keys, sized, choices.get("dataset"))
    compile_keys = OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, ["loss", "loss_weights", "metrics"]), resolve=True
    )
    check_compile_keys(**compile_keys)
    check_optimizer_target(cfg.optimizer)
    check_callbacks(OmegaConf.to_container(cfg.callbacks, resolve=True))
    manual = not distributes_automatically(cfg.dataset)
    if manual and (is_function_target(target) or not hasattr(get_class(target), "load_for_rank")):
        raise PlanError(
            f"dataset.distribute=false needs a dataset with load_for_rank(); "
            f"{target} has none: set dataset.distribute=true"
        )


@dataclass(frozen=True)
class SizedDataset:
    """The dataset's sizes for planning, and whether they were assumed (data not present)."""

    info: DatasetInfo
    assumed: str | None = None  # why the published sizes stand in, for the dry run
    dataset: Any = None


def size_dataset(cfg: DictConfig, allow_published: bool) -> SizedDataset:
    """Build the dataset and read its ``info()``.

    Without its data (a missing mandatory key or path), ``allow_published``
    (a dry run) plans with the dataset's published sizes when it has them;
    otherwise the missing key is one config error.
    """
    try:
        dataset = build_dataset(cfg)
        return SizedDataset(dataset.info(), dataset=dataset)
    except MissingMandatoryValue as err:
        missing = f"dataset.{err.full_key}" if err.full_key else "a dataset key"
        problem = f"{missing} is not set: give {missing}=<path>"
    except FileNotFoundError as err:
        problem, missing = str(err), str(err).split("=", 1)[0]
    except Exception as err:  # a dataset's own argument check
        message = str(err.__cause__ or err)
        named = message if message.startswith("dataset.") else f"dataset: {message}"
        raise PlanError(named) from None
    published = getattr(get_class(cfg._target_), "published_info", None)
    if not (allow_published and published):
        raise PlanError(problem)
    known = {
        k: v
        for k, v in OmegaConf.to_container(cfg, resolve=True, throw_on_missing=False).items()
        if k != "_target_" and v != "???"
    }
    info = published(**known)
    return SizedDataset(
        info,
        assumed=(
            f"{missing} is not there yet: planned with the published sizes "
            f"({info.num_train:,} train / {info.num_val:,} validation samples, "
            f"{info.num_classes} classes); a real run reads them from the data"
        ),
    )
