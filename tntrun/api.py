"""tntrun's Python API: compose, plan and run experiments from a script or a notebook.

    from tntrun import api

    exp = api.compose(["model=cnn", "train.epochs=2"])   # Hydra overrides, no CLI
    plan = api.plan(exp)                                  # pure: sizes, batches, LR, command
    result = api.run(exp)                                 # real ranks; blocks until they end
    print(result.status, result.run_id, result.metrics["val_accuracy"])

``config_dir`` adds your own config directory (``conf/model/mine.yaml``);
``_target_`` may name modules in the working directory. Bad input raises
:class:`~tntrun.errors.PlanError` with one line per problem, before any rank starts.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from tntrun.contract.run_status import RunStatus
from tntrun.errors import PlanError
from tntrun.experiment import Experiment, RunResult

__all__ = ["Experiment", "PlanError", "RunResult", "compose", "plan", "run"]


def compose(
    overrides: Sequence[str] = (), config_dir: str | os.PathLike[str] | None = None
) -> Experiment:
    """Compose tntrun's config from Hydra overrides (``"model=cnn"``, ``"train.epochs=2"``)."""
    from tntrun.config.compose import compose_config
    from tntrun.config.user_code import add_user_path

    add_user_path()
    cfg, choices, run_dir = compose_config(list(overrides), config_dir)
    return Experiment(cfg, tuple(overrides), choices, run_dir)


def plan(experiment: Experiment | Sequence[str]):
    """The immutable plan of an experiment (world size, micro-batch, scaled LR, steps,
    launch command), without launching anything. Raises PlanError."""
    from tntrun.preparation import resolve

    exp = _experiment(experiment)
    return resolve(exp, exp.run_dir or Path(exp.config.output_root) / "plan").plan


def run(experiment: Experiment | Sequence[str], config_dir: str | None = None) -> RunResult:
    """Run an experiment (or overrides) to its end and return its outcome.

    Raises PlanError for bad input; otherwise the result carries the status
    (FINISHED, FAILED, KILLED; PLANNED for ``dry_run=true``), the tracked run's
    id, the run directory and the final metrics.
    """
    from tntrun.config.user_code import add_user_path
    from tntrun.console import ensure_console
    from tntrun.driver import run as run_experiment

    add_user_path()  # user modules (model._target_=mymodels.build) from the working directory
    ensure_console()  # the driver's lines, unless this process set up logging itself
    result = run_experiment(_experiment(experiment, config_dir))
    if result.status == RunStatus.INVALID and result.run_id is None:
        raise PlanError(list(result.problems))
    return result


def _experiment(
    experiment: Experiment | Sequence[str], config_dir: str | None = None
) -> Experiment:
    if isinstance(experiment, Experiment):
        return experiment
    return compose(list(experiment), config_dir)
