"""``tntrun sync <run dir>``: replay into the tracking store what it missed in an outage.

The driver leaves ``tracking_pending.json`` in the run directory when the
store was still unreachable at the end of a run (tracking.outage_grace_s). Sync
completes the run from the directory: the metrics of ``metrics.jsonl`` past the
delivered offset, the hosts' system metrics the run has not received
(``system/relayed.json``), the outputs and the final status. If the run was never
created (or is not in the store given with ``--tracking-uri``), it creates it
with its tags and params (config.yaml, plan.json) and replays every metric.
Progress is saved as it goes, so it can be run again after a failure; once
everything is delivered the pending file is deleted and a second sync has
nothing to do.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from tntrun.contract import run_files
from tntrun.contract.exit_codes import EXIT_TRACKING_PENDING
from tntrun.tracking.outage import Pending, is_outage, sync_line

if TYPE_CHECKING:
    from tntrun.planning.plan import Plan
    from tntrun.tracking import Tracker
    from tntrun.tracking.delivery import Delivery

EXIT_NOT_A_RUN = 2


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tntrun sync",
        description="Replay into the tracking store what a run directory holds and the store "
        "missed while it was unreachable: metrics, artifacts, the final status.",
    )
    parser.add_argument("run_dir", type=Path, help="the run directory the driver named")
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="the store to replay into (default: the run's own store)",
    )
    parser.add_argument(
        "--wait-s",
        type=float,
        default=0.0,
        help="keep retrying while the store is unreachable this long",
    )
    args = parser.parse_args(argv)
    run_dir = args.run_dir.resolve()
    if not (run_dir / run_files.CONFIG).is_file():
        print(f"tntrun sync: {run_dir} is not a run directory (no {run_files.CONFIG})")
        return EXIT_NOT_A_RUN
    pending = Pending.load(run_dir)
    if pending is None:
        print(
            f"tntrun sync: nothing to replay: {run_dir} has no {run_files.TRACKING_PENDING} "
            "(its run reached its store)"
        )
        return 0
    return sync(run_dir, pending, args.tracking_uri or pending.store, args.wait_s)


def sync(run_dir: Path, pending: Pending, uri: str, wait_s: float = 0.0) -> int:
    """Deliver ``pending`` into the store at ``uri``; the exit code."""
    from tntrun.planning.plan import Plan
    from tntrun.tracking.delivery import Delivery, deliver_or_leave_pending, run_models
    from tntrun.tracking.metrics_stream import MetricsRelay

    plan = Plan.load(run_dir / run_files.PLAN)  # its settings, also for a 0.1 run directory
    tracker = store_tracker(plan, uri)
    pending.store = uri  # another store than the run's: its run is found by id or made anew
    problems = tracker.problems()
    if problems:
        for problem in problems:
            print(f"tntrun sync: {problem}")
        print(sync_line(uri, run_dir))
        return EXIT_TRACKING_PENDING
    relay = MetricsRelay.of_run(
        run_dir,
        tracker.log_metrics,
        lambda: tracker.run_id,
        plan.nodes > 1,
        offset=pending.metrics_offset,
    )
    delivery = Delivery(
        tracker,
        run_dir,
        relay,
        pending.status,
        pending.stalled,
        pending.prefix,
        outputs_logged=pending.outputs_logged,
        models=run_models(plan, pending.parent_run_id),
    )
    delivery.open_run = partial(open_synced_run, delivery, plan, pending)
    if deliver_or_leave_pending(delivery, wait_s, lambda: pending) is None:
        return delivered(delivery, pending)
    print(f"tntrun sync: {pending.reason}; {relay.lines_sent} metric lines delivered so far")
    print(sync_line(uri, run_dir))
    return EXIT_TRACKING_PENDING


def store_tracker(plan: Plan, uri: str) -> Tracker:
    """The run's own tracker (its ``tracking`` settings) on the store at ``uri``."""
    from tntrun.tracking import TrackerSettings, tracker_for

    settings = TrackerSettings.of(plan.settings)
    return tracker_for(replace(settings, tracking=replace(settings.tracking, uri=uri)))


def open_synced_run(delivery: Delivery, plan: Plan, pending: Pending) -> None:
    """Work on the pending run: the one the store has by its id, else a new one that gets
    everything (the metrics from the start, the outputs, the params)."""
    from omegaconf import OmegaConf

    from tntrun.tracking.opening import run_params

    tracker, run_dir = delivery.tracker, delivery.run_dir
    if tracker.run_id is None:
        if pending.run_id:
            try:
                tracker.attach(pending.run_id)
            except LookupError as err:  # not in this store: a new run gets everything
                if is_outage(err, pending.store):  # or the store did not answer: try again later
                    raise
        if tracker.run_id is None:
            tags = pending.tags or rebuilt_tags(plan, run_dir)
            tracker.start(pending.run_name, tags, pending.parent_run_id)
            (run_dir / run_files.RUN_ID).write_text(tracker.run_id)
            print(f"tntrun sync: created {tracker.label} run {tracker.run_id} in {pending.store}")
            delivery.relay.offset, delivery.outputs_logged = 0, False
            pending.params_logged = False
        pending.run_id = tracker.run_id
    if not pending.params_logged:
        recorded = OmegaConf.to_container(OmegaConf.load(run_dir / run_files.CONFIG))
        tracker.log_params(run_params(recorded, plan))
        pending.params_logged = True


def delivered(delivery: Delivery, pending: Pending) -> int:
    """All of the run reached the store: no record left pending; the exit code."""
    from tntrun.tracking import LostRunCleanup

    tracker = delivery.tracker
    Pending.clear(delivery.run_dir)
    if isinstance(tracker, LostRunCleanup):
        tracker.end_lost_runs()  # as every tntrun command on a store
    print(
        f"tntrun sync: {tracker.label} run {tracker.run_id} in {pending.store}: "
        f"{delivery.relay.lines_sent} metric lines, the outputs and status {pending.status} "
        "delivered"
    )
    return 0


def rebuilt_tags(plan: Plan, run_dir: Path) -> dict[str, str]:
    """Start tags for a run created by sync without the driver's record of them."""
    from omegaconf import OmegaConf

    from tntrun.contract.driver_alive import driver_tags
    from tntrun.environments import detect
    from tntrun.tracking.run_record import start_tags

    overrides_file = run_dir / run_files.HYDRA / "overrides.yaml"
    overrides = list(OmegaConf.load(overrides_file)) if overrides_file.is_file() else []
    here = {**driver_tags(), **detect(os.environ).tags()}  # the run's own were not kept
    return start_tags(plan, run_dir, overrides, {}, plan.config_hash, here)
