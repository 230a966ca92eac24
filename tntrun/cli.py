"""The ``tntrun`` command: Hydra's command line over :mod:`tntrun.driver`.

This process is the driver and never imports TensorFlow. ``tntrun report``,
``tntrun ui`` and ``tntrun sync`` are subcommands; everything else is a Hydra command line
(``tntrun model=cnn``, ``tntrun -m seed=1,2``).
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from tntrun.config.checks import choice_problems, split_argv, user_choices
from tntrun.config.compose import CONFIG_NAME
from tntrun.config.composition_errors import one_line, unresolved
from tntrun.config.run_dir_guard import remove_created
from tntrun.config.schema import register
from tntrun.config.user_code import add_user_path
from tntrun.console import ensure_console
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR
from tntrun.contract.run_lock import RunDirBusy, take_early
from tntrun.contract.run_status import RunStatus
from tntrun.driver import run
from tntrun.errors import print_problems
from tntrun.experiment import Experiment, MissingObjective, RunResult, config_error
from tntrun.tracking import sweep
from tntrun.tracking.sweep import sweep_parent

register()
_failed_jobs: list[int] = []
_task_started: list[bool] = []  # Hydra called the task: its config was composed
FULL_ERROR = "HYDRA_FULL_ERROR"
# What composing a command line's config raises (Hydra's override grammar and config
# errors, OmegaConf's key and type errors, a malformed override's ValueError).
COMPOSITION_ERRORS = (HydraException, OmegaConfBaseException, ValueError)


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
    _task_started.append(True)
    run_dir = Path(HydraConfig.get().runtime.output_dir).resolve()
    try:
        result: RunResult = run(experiment_of(cfg))
    except OmegaConfBaseException as err:  # an interpolation (${...}) that does not resolve
        given = OmegaConf.to_container(HydraConfig.get().overrides.task, resolve=False)
        result = config_error([unresolved(err, given)], run_dir)
    single = HydraConfig.get().mode == RunMode.RUN
    if single and result.status == RunStatus.INVALID:
        remove_created(run_dir)  # refused: nothing of this command stays behind
    print_problems(result.problems)
    if result.exit_code and single:
        sys.exit(result.exit_code)
    if result.exit_code:
        _failed_jobs.append(result.exit_code)  # a sweep goes on with its other jobs
    return _objective(result, cfg.tracking.objective) if not single else float("nan")


def _objective(result: RunResult, key: str) -> float:
    """What sweepers such as Optuna optimise; a finished job without that metric says so in
    one line and fails the sweep (exit 2 at its end) instead of handing it NaN."""
    try:
        return result.objective(key)
    except MissingObjective as missing:
        print_problems([str(missing)])
        _failed_jobs.append(EXIT_CONFIG_ERROR)
        return float("nan")


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


@contextmanager
def composition_errors_raised() -> Iterator[None]:
    """Within: Hydra raises what composing the config raised instead of printing it
    (``HYDRA_FULL_ERROR``, Hydra's own switch), so :func:`main` can say it in one line."""
    before = os.environ.get(FULL_ERROR)
    os.environ[FULL_ERROR] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(FULL_ERROR, None)
        else:
            os.environ[FULL_ERROR] = before


def _hydra_run(overrides: list[str]) -> None:
    """Hydra's entry; what composing the command line's config raised (a misspelled key, a
    wrong type, an unparsable override) ends it in one line and exit 2, before Hydra
    created any run directory; any other error prints its traceback, exit 1."""
    _task_started.clear()
    try:
        with composition_errors_raised():
            _hydra_entry()
    except Exception as err:
        if os.environ.get(FULL_ERROR):  # the user's own switch: Hydra's behaviour
            raise
        if _task_started or not isinstance(err, COMPOSITION_ERRORS):  # not the config's
            traceback.print_exc()
            sys.exit(1)
        print_problems([one_line(err, overrides)])
        sys.exit(EXIT_CONFIG_ERROR)


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
    _hydra_run(overrides)
    if _failed_jobs:
        print(f"tntrun: {len(_failed_jobs)} sweep job(s) failed", file=sys.stderr)
        sys.exit(max(_failed_jobs))
    if sweep.unfinished_jobs:  # jobs a cluster launcher ran elsewhere, judged by the store
        print(f"tntrun: {len(sweep.unfinished_jobs)} sweep job(s) did not finish", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
