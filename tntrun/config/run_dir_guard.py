"""A refused command line leaves no run directory behind.

Hydra creates the run directory (``hydra.run.dir``, with ``.hydra/`` and ``cli.log``)
before tntrun's code sees the config. :class:`RunDirGuard`, a Hydra callback, notes which
directories of that path do not exist yet when the run starts; :func:`remove_created`
removes them again when the driver refuses the run, and never a directory that existed
before (a resume into an existing directory keeps it and everything in it).
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

# The directories this process's run would create, outermost first (one run at a time).
_created: list[Path] = []


def missing_parts(path: Path) -> list[Path]:
    """``path`` and its ancestors that do not exist, outermost first."""
    missing = []
    for part in [path, *path.parents]:
        if part.exists():
            break
        missing.append(part)
    return missing[::-1]


class RunDirGuard(Callback):
    """Notes, before Hydra creates it, what of the run directory's path is new."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Hydra's ${now:} resolver caches its value on the node: the job sees this path.
        _created.clear()
        try:
            run_dir = OmegaConf.select(config, "hydra.run.dir")
        except OmegaConfBaseException:
            return  # Hydra reports it when it makes the directory; nothing to remove
        _created[:] = missing_parts(Path(str(run_dir)).resolve())


def _close_logs_under(folder: Path) -> None:
    """Close the logging handlers writing into ``folder`` (Hydra's ``cli.log``)."""
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in list(getattr(logger, "handlers", [])):
            name = getattr(handler, "baseFilename", None)
            if name and Path(name).is_relative_to(folder):
                logger.removeHandler(handler)
                handler.close()


def remove_created(run_dir: Path) -> None:
    """Remove ``run_dir`` and its emptied parents if this process's run created them."""
    run_dir = run_dir.resolve()
    if run_dir not in _created:
        return  # it existed before this command: keep it, and what is in it
    _close_logs_under(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    for parent in reversed(_created[: _created.index(run_dir)]):
        try:
            os.rmdir(parent)  # only when empty: another run may have written there since
        except OSError:
            break
    _created.clear()
