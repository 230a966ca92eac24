"""Composing tntrun's config from overrides, without Hydra's command line.

The CLI gets its config from ``@hydra.main``; the Python API composes the
same config here, with the same schema, checks and user config directory.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf, open_dict

from tntrun.config.checks import choice_problems, user_choices
from tntrun.config.composition_errors import one_line
from tntrun.config.schema import register
from tntrun.environments import Allocation, layout_from_hosts
from tntrun.errors import PlanError

CONFIG_MODULE = "tntrun.conf"
CONFIG_NAME = "config"


def compose_config(
    overrides: Sequence[str], config_dir: str | os.PathLike[str] | None = None
) -> tuple[DictConfig, dict[str, str], Path]:
    """(config, group choices, default run directory) for ``overrides``.

    ``config_dir`` adds a user config directory (e.g. ``conf/model/mine.yaml``)
    to the search path. Raises PlanError for an unknown group choice or a
    config Hydra cannot compose (typo, wrong type), one line each.
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    register()
    dirs = [str(Path(config_dir).expanduser().resolve())] if config_dir else []
    problems = choice_problems(overrides, dirs)
    if problems:
        raise PlanError(problems)
    search = [f"hydra.searchpath=[file://{dirs[0]}]"] if dirs else []
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
            cfg = compose(
                config_name=CONFIG_NAME, overrides=[*overrides, *search], return_hydra_config=True
            )
    except Exception as err:  # Hydra's composition errors: one line naming the key and fix
        raise PlanError(one_line(err, overrides)) from None
    finally:
        GlobalHydra.instance().clear()
    choices = user_choices(cfg.hydra.runtime.choices)
    run_dir = Path(_resolve_run_dir(cfg)).resolve()
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg, choices, run_dir


def _resolve_run_dir(cfg: DictConfig) -> str:
    """Hydra's ``hydra.run.dir`` (conf/config.yaml: the one place for it), resolved."""
    from hydra.core.utils import setup_globals

    setup_globals()  # Hydra's ${now:} resolver
    return str(OmegaConf.select(cfg, "hydra.run.dir"))


def given_keys(overrides: Sequence[str]) -> set[str]:
    """The config keys the command line set (``+a.b=1`` and ``~a`` name ``a.b`` and ``a``)."""
    return {o.split("=", 1)[0].lstrip("+~") for o in overrides}


def with_allocation_layout(
    cfg: DictConfig, overrides: Sequence[str], allocated: Allocation | None
) -> DictConfig:
    """``cfg`` with the layout keys the host list or the scheduler's allocation (``allocated``)
    fills (those not given), so what is recorded (config.yaml, the run's params) is the
    layout that runs."""
    filled = layout_from_hosts(cfg, allocated, given_keys(overrides))
    if not filled:
        return cfg
    cfg = cfg.copy()
    for key, value in filled.items():
        cfg[key] = value
    return cfg


def plain_config(cfg: DictConfig, overrides: Sequence[str]) -> dict[str, Any]:
    """The resolved config as plain data, with the user's batch intent applied.

    ``micro_batch_size`` or ``batch_tokens`` derive the global batch, so the
    config's default ``global_batch_size`` is dropped unless it was overridden too.
    """
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    derives_global = plain["micro_batch_size"] is not None or plain["batch_tokens"]
    if derives_global and "global_batch_size" not in given_keys(overrides):
        plain["global_batch_size"] = None
    return plain
