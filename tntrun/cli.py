"""The ``tntrun`` command: Hydra's command line over :mod:`tntrun.driver`.

This process is the driver and never imports TensorFlow. ``tntrun report``,
``tntrun ui`` and ``tntrun sync`` are subcommands; everything else is a Hydra command line
(``tntrun model=cnn``, ``tntrun -m seed=1,2``).
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig

from tntrun.config.checks import choice_problems, split_argv, user_choices
from tntrun.config.compose import CONFIG_NAME, compose_config
from tntrun.config.run_dir_guard import remove_created
from tntrun.config.schema import register
from tntrun.config.user_code import add_user_path
from tntrun.console import ensure_console
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR
from tntrun.contract.run_status import RunStatus
from tntrun.driver import run
from tntrun.errors import PlanError, print_problems
from tntrun.experiment import Experiment, RunResult
from tntrun.tracking import sweep
from tntrun.tracking.sweep import sweep_parent

register()
_failed_jobs: list[int] = []


def experiment_of(cfg: DictConfig) -> Experiment:
    """The job Hydra composed, as the driver's Experiment."""
    hydra_cfg = HydraConfig.get()
    return Experiment(
        config=cfg,
        overrides=tuple(hydra_cfg.overrides.task),
        choices=user_choices(hydra_cfg.runtime.choices),
        run_dir=Path(hydra_cfg.runtime.output_dir).resolve(),
        parent_run_id=sweep_parent(),
        job=hydra_cfg.job.num if hydra_cfg.mode == RunMode.MULTIRUN else None,
    )


@hydra.main(version_base="1.3", config_path="pkg://tntrun.conf", config_name=CONFIG_NAME)
def _hydra_entry(cfg: DictConfig) -> float:
    exp = experiment_of(cfg)
    result: RunResult = run(exp)
    single = HydraConfig.get().mode == RunMode.RUN
    if single and result.status == RunStatus.INVALID and exp.run_dir:
        remove_created(exp.run_dir)  # refused: nothing of this command stays behind
    print_problems(result.problems)
    if result.exit_code and single:
        sys.exit(result.exit_code)
    if result.exit_code:
        _failed_jobs.append(result.exit_code)  # a sweep goes on with its other jobs
    return result.objective(cfg.tracking.objective)  # what sweepers such as Optuna optimise


def _subcommand(argv: list[str]) -> int | None:
    """Run ``tntrun report|ui|sync ...``; None for a training command line."""
    if argv and argv[0] in ("report", "ui", "sync"):
        ensure_console()  # outside Hydra: nobody else sets up logging
    if argv and argv[0] == "report":
        from tntrun.tracking.report import main as report

        return report(argv[1:])
    if argv and argv[0] == "ui":
        from tntrun.tracking.ui import main as ui

        return ui(argv[1:])
    if argv and argv[0] == "sync":
        from tntrun.tracking.sync import main as sync

        return sync(argv[1:])
    return None


def command_line_problems(argv: list[str]) -> list[str]:
    """What Hydra would refuse in ``argv``, one line each, before Hydra's entry creates a
    run directory: a run's config is composed once here (a sweep's choices are checked)."""
    overrides, config_dirs = split_argv(argv)
    flags = [arg for arg in argv if arg.startswith("-") and arg not in config_dirs]
    plain = all(flag.split("=")[0] in ("-cd", "--config-dir") for flag in flags)
    if not plain or len(config_dirs) > 1:  # -m, --cfg, --help...: Hydra's own handling
        return choice_problems(overrides, config_dirs)
    try:
        compose_config(overrides, config_dirs[0] if config_dirs else None)
    except PlanError as refused:
        return refused.problems
    return []


def main() -> None:
    """Console-script entry point; a sweep exits non-zero if any of its jobs failed."""
    # A script's background job starts with SIGINT ignored (POSIX shells without job
    # control), which Python keeps: Ctrl-C (or `kill -INT`) must stop a run whatever its parent.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = _subcommand(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    add_user_path()  # as `python -m` would: user modules from the working directory
    problems = command_line_problems(sys.argv[1:])
    if problems:
        print_problems(problems)
        sys.exit(EXIT_CONFIG_ERROR)
    _hydra_entry()
    if _failed_jobs:
        print(f"tntrun: {len(_failed_jobs)} sweep job(s) failed", file=sys.stderr)
        sys.exit(max(_failed_jobs))
    if sweep.unfinished_jobs:  # jobs a cluster launcher ran elsewhere, judged by the store
        print(f"tntrun: {len(sweep.unfinished_jobs)} sweep job(s) did not finish", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
