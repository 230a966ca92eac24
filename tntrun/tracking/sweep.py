"""Hydra sweeps (``tntrun -m ...``) as one parent run with a child run per job.

The parent is created in ``on_multirun_start``, before any job runs, which
also creates the store and the experiment once, so parallel launchers never
race on a fresh SQLite file. Jobs find the parent through a file in the sweep
directory, which works for in-process, forked and cluster launchers alike.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig

from tntrun.tracking import Tracker, children_of, tracker_for
from tntrun.tracking.logged_model import register_best_job
from tntrun.tracking.provenance import source_tags
from tntrun.tracking.report import write_report
from tntrun.tracking.sweep_parent import PARENT_FILE, parent_run_id

# Jobs of the sweeps ended in this process whose runs did not finish, as the store says:
# with a cluster launcher (submitit) the jobs ran elsewhere and only the store knows.
unfinished_jobs: list[str] = []


def _tracker(config: DictConfig) -> Tracker:
    return tracker_for(config.tracking, Path(config.output_root))


def sweep_parent() -> str | None:
    """The parent run id of the sweep this job belongs to (None outside a sweep)."""
    hydra_cfg = HydraConfig.get()
    if hydra_cfg.mode != RunMode.MULTIRUN:
        return None
    return parent_run_id(Path(hydra_cfg.sweep.dir))


class SweepTracking(Callback):
    """Opens the sweep's parent run before the jobs and closes it after them."""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
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
        tracker.set_tag("children.finished", str(statuses.count("FINISHED")))
        if children:
            write_report(tracker, children, sweep_dir / "report")
            register_best_job(tracker, children, config.tracking)  # tracking.register_model
        ok = statuses and all(status == "FINISHED" for status in statuses)
        tracker.finish("FINISHED" if ok else "FAILED")
        unfinished_jobs.extend(child.run_id for child in children if child.status != "FINISHED")
        if not children:
            unfinished_jobs.append(f"sweep {sweep_dir.name}: no job recorded a run")
        print(
            f"tntrun: sweep parent run {tracker.run_id}: {statuses.count('FINISHED')}/"
            f"{len(statuses)} jobs finished; report in {sweep_dir / 'report'}"
        )
