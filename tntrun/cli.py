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
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from tntrun.config.checks import choice_problems, split_argv, user_choices
from tntrun.config.compose import CONFIG_NAME
from tntrun.config.schema import register
from tntrun.config.user_code import add_user_path
from tntrun.console import ensure_console
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR
from tntrun.contract.run_lock import RunDirBusy, take_early
from tntrun.driver import run
from tntrun.errors import print_problems
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
    result: RunResult = run(experiment_of(cfg))
    print_problems(result.problems)
    if result.exit_code and HydraConfig.get().mode == RunMode.RUN:
        sys.exit(result.exit_code)
    if result.exit_code:
        _failed_jobs.append(result.exit_code)  # a sweep goes on with its other jobs
    return result.objective(cfg.tracking.objective)  # what sweepers such as Optuna optimise


class LockRunDir(Callback):
    """Lock a single run's directory before Hydra writes ``.hydra/`` and its log there, so
    that a second run into a running one's directory is refused with nothing of it touched
    (the driver holds the lock from here on; a sweep's jobs each lock their own)."""

    def on_run_start(self, config: DictConfig, **kwargs: object) -> None:
        try:
            run_dir = Path(str(OmegaConf.select(config, "hydra.run.dir"))).absolute()
        except Exception:  # a dir that only resolves inside the job: the driver locks it
            return
        try:
            take_early(run_dir)
        except RunDirBusy as busy:
            print_problems([str(busy)])
            sys.exit(EXIT_CONFIG_ERROR)


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


def main() -> None:
    """Console-script entry point; a sweep exits non-zero if any of its jobs failed."""
    # A script's background job starts with SIGINT ignored (POSIX shells without job
    # control), which Python keeps: Ctrl-C (or `kill -INT`) must stop a run whatever its parent.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    code = _subcommand(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    add_user_path()  # as `python -m` would: user modules from the working directory
    overrides, config_dirs = split_argv(sys.argv[1:])
    problems = choice_problems(overrides, config_dirs)
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
