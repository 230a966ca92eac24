"""Hydra sweeps (``tntrun -m ...``) as one parent run with a child run per job.

The parent is created in ``on_multirun_start``, before any job runs, which
also creates the store and the experiment once, so parallel launchers never
race on a fresh SQLite file. Jobs find the parent through a file in the sweep
directory, which works for in-process, forked and cluster launchers alike.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from tntrun.config.settings import tracking_settings
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR
from tntrun.contract.metrics import lowest_is_best
from tntrun.contract.run_status import RunStatus
from tntrun.errors import print_problems
from tntrun.tracking import RunSummary, Tracker, TrackerSettings, children_of, tracker_for
from tntrun.tracking.logged_model import register_best_job
from tntrun.tracking.provenance import source_tags
from tntrun.tracking.report import write_report
from tntrun.tracking.seed_groups import seed_groups, seeds_line
from tntrun.tracking.sweep_parent import PARENT_FILE, parent_run_id

# Jobs of the sweeps ended in this process whose runs did not finish, as the store says:
# with a cluster launcher (submitit) the jobs ran elsewhere and only the store knows.
unfinished_jobs: list[str] = []


def _tracker(config: DictConfig) -> Tracker:
    """The sweep's tracker, made as a job's is (:class:`TrackerSettings`)."""
    tracking = OmegaConf.to_container(config.tracking, resolve=True)
    return tracker_for(TrackerSettings.of_section(tracking, config.output_root))


def sweeper_direction(config: DictConfig) -> str | None:
    """Which way the sweeper optimises the jobs' objective (Optuna's ``direction``:
    minimize or maximize), None when it does not say (the basic sweeper)."""
    direction = OmegaConf.select(config, "hydra.sweeper.direction", default=None)
    direction = getattr(direction, "name", direction)  # Optuna's Direction enum
    return direction if direction in ("minimize", "maximize") else None


def direction_note(objective: str, direction: str | None) -> str | None:
    """One line when the sweeper optimises the objective the other way than its name says
    (Optuna minimises by default; tntrun's default objective is val_accuracy)."""
    if direction is None or lowest_is_best(objective) == (direction == "minimize"):
        return None
    seeks, wanted = ("lowest", "maximize") if direction == "minimize" else ("highest", "minimize")
    return (
        f"hydra.sweeper.direction={direction} seeks the {seeks} tracking.objective={objective} "
        f"(and the sweep registers that job): set hydra.sweeper.direction={wanted} to optimise it"
    )


def sweep_parent() -> str | None:
    """The parent run id of the sweep this job belongs to (None outside a sweep)."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return parent_run_id(Path(hydra_cfg.sweep.dir))


class SweepTracking(Callback):
    """Opens the sweep's parent run before the jobs and closes it after them."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        direction = sweeper_direction(config)
        if config.dry_run and direction is not None:  # Optuna would fail on the first NaN
            print_problems(
                [
                    f"dry_run=true: hydra.sweeper.direction={direction} needs each job's "
                    "tracking.objective, which a dry run does not compute: plan a job without "
                    "-m (tntrun dry_run=true <its overrides>)"
                ]
            )
            raise SystemExit(EXIT_CONFIG_ERROR)
        note = direction_note(str(config.tracking.objective), direction)
        if note:
            print(f"tntrun: note: {note}", file=sys.stderr, flush=True)
        if config.dry_run:  # a planned sweep tracks nothing
            return
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        tracker = _tracker(config)
        overrides = " ".join(config.hydra.overrides.task)
        run_id = tracker.start(
            f"sweep {sweep_dir.name}",
            {
                "tntrun.tracking.sweep": "parent",
                "sweep_dir": str(sweep_dir.resolve()),
                "hydra.overrides": overrides,
                **source_tags(),
            },
        )
        (sweep_dir / PARENT_FILE).write_text(run_id)
        print(f"tntrun: sweep parent run {run_id} in {tracker.store}")

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        parent = parent_run_id(sweep_dir)
        if parent is None:
            return
        tracker = _tracker(config)
        tracker.attach(parent)
        children = children_of(tracker)
        statuses = [child.status for child in children]
        tracker.set_tag("children", str(len(children)))
        tracker.set_tag("children.finished", str(statuses.count(RunStatus.FINISHED)))
        ok = bool(statuses) and all(status == RunStatus.FINISHED for status in statuses)
        try:
            if children:
                summarise_jobs(tracker, children, config, sweep_dir)
        except Exception:  # the report failed: the parent still ends, never left RUNNING
            ok = False
            raise
        finally:
            tracker.finish(RunStatus.FINISHED if ok else RunStatus.FAILED)
        unfinished_jobs.extend(
            child.run_id for child in children if child.status != RunStatus.FINISHED
        )
        if not children:
            unfinished_jobs.append(f"sweep {sweep_dir.name}: no job recorded a run")
        print(
            f"tntrun: sweep parent run {tracker.run_id}: {statuses.count(RunStatus.FINISHED)}/"
            f"{len(statuses)} jobs finished; report in {sweep_dir / 'report'}"
        )


def summarise_jobs(
    tracker: Tracker, children: Sequence[RunSummary], config: DictConfig, sweep_dir: Path
) -> None:
    """The sweep's report, its repeats by seed, and its best job registered."""
    write_report(tracker, children, sweep_dir / "report")
    tracking = tracking_settings(OmegaConf.to_container(config.tracking, resolve=True))
    report_repeats(tracker, children, tracking.objective)
    register_best_job(tracker, children, tracking, sweeper_direction(config))


def report_repeats(tracker: Tracker, children: Sequence[RunSummary], objective: str) -> None:
    """Jobs that differ only by seed: the objective's mean and spread per configuration, on
    the console and as the parent run's ``repeats.<N>`` tags."""
    for number, group in enumerate(seed_groups(children), start=1):
        line = seeds_line(group, objective)
        if line is not None:
            print(f"tntrun: {line}")
            tracker.set_tag(f"repeats.{number}", line)
