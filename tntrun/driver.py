"""The life of one run on the driver: plan, track, launch, record, end.

Shared by the CLI and the Python API. The driver never imports TensorFlow:
it plans, writes ``config.yaml`` and ``plan.json`` into the run directory,
starts the ranks through the configured launcher, opens the tracked run while
they import TensorFlow, relays rank 0's metrics and always ends the run.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, replace
from pathlib import Path

from tntrun.config.settings import Settings
from tntrun.config.zoo import SizedDataset
from tntrun.contract import run_files
from tntrun.contract.checkpoints import adopt
from tntrun.contract.disk import disk_error_of
from tntrun.contract.driver_alive import driver_tags
from tntrun.contract.exit_codes import EXIT_INTERRUPTED, EXIT_TRACKING_PENDING
from tntrun.contract.node_metrics import carry_over
from tntrun.contract.run_lock import RunDirBusy, RunDirLock, taken_early
from tntrun.contract.run_status import RunStatus
from tntrun.environments import ClusterEnvironment
from tntrun.errors import PlanError
from tntrun.experiment import Experiment, RunResult, config_error
from tntrun.launch.discovery import discovery_problems
from tntrun.launch.launcher import keras_override_note
from tntrun.launch.preemption import record_first
from tntrun.launch.supervisor import Outcome, Supervisor
from tntrun.planning.machine import device_problems, tensorboard_problems
from tntrun.planning.plan import Plan
from tntrun.planning.resume import AUTO, ResumedRun, first_resumable, load_resumed_run
from tntrun.planning.schedule_chart import write_schedule_chart
from tntrun.planning.view import render_plan
from tntrun.preparation import (
    DriverFacts,
    PlanInputs,
    TypedExperiment,
    gather_facts,
    prepare,
    typed_experiment,
)
from tntrun.tracking import Tracker, tracker_for
from tntrun.tracking.mlflow_store import sqlite_path
from tntrun.tracking.opening import RunOrigin
from tntrun.tracking.recorder import Recorder

log = logging.getLogger(__name__)


def dry_run(typed: TypedExperiment, plan: Plan, run_dir: Path, assumed: str | None) -> None:
    """Show the config, the plan and the launch command; start nothing."""
    log.info("== Config ==")
    log.info(typed.recorded_yaml)
    log.info(render_plan(plan))
    if assumed:
        log.info(f"\nnote: {assumed}")
    log.info(f"\nLR schedule chart: {write_schedule_chart(plan, run_dir / run_files.LR_PLOT)}")
    log.info("dry run: nothing was launched and no run was tracked")


def run(exp: Experiment) -> RunResult:
    """Plan, track and launch one run (or continue one); never leaves it RUNNING. The run
    directory is locked (one run a directory) from before anything is written into it."""
    run_dir = exp.run_dir or Path(exp.config.output_root).resolve() / "runs" / "api"
    early = taken_early(run_dir)  # the CLI's, taken before Hydra wrote into the directory
    try:
        facts = gather_facts()  # a cluster environment's allocation may be unusable
        planned = plan_run(exp, facts, run_dir)
    except ValueError as err:  # PlanError; a cluster's LayoutError, a checkpoint's metadata
        if early is not None:
            early.release()
        return config_error(problems_of(err), run_dir)
    try:
        lock = early or RunDirLock(run_dir).acquire()
    except RunDirBusy as busy:  # nothing of the running one touched
        return config_error([str(busy)], run_dir)
    except OSError as err:  # a full or read-only disk where the run is to be written
        return config_error([f"run directory {run_dir}: {disk_error_of(err, run_dir) or err}"])
    with lock:
        if lock.stale is not None:
            log.warning(
                f"tntrun: note: took over {lock.path} from a tntrun that ended without "
                f"releasing it ({lock.stale})"
            )
        return start(exp, facts, planned, run_dir)


@dataclass(frozen=True)
class Planned:
    """A run planned, before anything is written: its config, plan and what it continues."""

    typed: TypedExperiment
    plan: Plan
    sized: SizedDataset
    inputs: PlanInputs
    resumed: ResumedRun | None
    tracker: Tracker


def plan_run(exp: Experiment, facts: DriverFacts, run_dir: Path) -> Planned:
    """Type the config, find the run to continue (if any) and derive the plan; raises
    PlanError. Writes nothing into the run directory."""
    allocated = facts.machine.allocation
    typed = typed_experiment(exp.config, exp.overrides, allocated)
    settings = typed.settings
    tracker = tracker_for(settings.tracker_settings(), Path(settings.output_root))
    reference, how = resume_reference(typed, tracker, facts)
    resumed = resume_of(exp, settings, tracker, reference, how) if reference else None
    if resumed:  # the stored config, with the layout filled as for a new run
        typed = typed_experiment(resumed.config, exp.overrides, allocated)
    point = resumed.point if resumed else None
    plan, sized, inputs = prepare(typed, exp.choices, facts.machine, run_dir, point)
    return Planned(typed, plan, sized, inputs, resumed, tracker)


def start(exp: Experiment, facts: DriverFacts, planned: Planned, run_dir: Path) -> RunResult:
    """Write the run's inputs into its (locked) directory and launch it (or dry-run it)."""
    typed, plan, resumed, tracker = planned.typed, planned.plan, planned.resumed, planned.tracker
    if resumed:
        for damaged in resumed.damaged:
            log.warning(f"tntrun: {damaged}")
        log.info(f"tntrun: {resumed.how}: continuing run {resumed.run_id}")
    keras_note = keras_override_note(os.environ)
    for note in [*plan.notes(), *([keras_note] if keras_note else [])]:
        log.warning(f"tntrun: note: {note}")
    if plan.settings.dry_run:
        dry_run(typed, plan, run_dir, planned.sized.assumed)
        return RunResult(RunStatus.PLANNED, 0, run_dir, plan=plan)
    problems = device_problems(plan.hosts, plan.gpus_per_node, facts.machine)
    problems += tensorboard_problems(plan.settings.train.tensorboard)
    if plan.elastic_nodes is not None:
        problems += discovery_problems(plan.settings.elastic.discovery, plan.ranks_per_node)
    problems = problems or tracker.problems()
    if problems:
        return config_error(problems, run_dir)
    try:
        write_inputs(planned, run_dir)
    except OSError as err:  # a full disk: refused before launch, in one line
        disk = disk_error_of(err, run_dir)
        if disk is None:
            raise
        return config_error([f"run directory {run_dir}: {disk}"], run_dir)
    log.info(
        f"tntrun: {plan.world_size} ranks on {', '.join(f'{h}:{s}' for h, s in plan.hosts)}; "
        f"global batch {plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size}; "
        f"{plan.steps_per_epoch} steps/epoch x {plan.epochs} epochs; lr {plan.scaled_lr:g}"
    )
    launch_tags = {**driver_tags(), **facts.cluster.tags()}
    origin = RunOrigin(exp.overrides, exp.choices, exp.parent_run_id, exp.job, launch_tags)
    recorder = Recorder(
        tracker, plan, typed.recorded, run_dir, origin, resumed, planned.inputs.info
    )
    return supervise_and_record(recorder, planned.inputs, plan, facts.cluster)


def write_inputs(planned: Planned, run_dir: Path) -> None:
    """The ranks' inputs (config.yaml, plan.json) and a resumed run's checkpoint."""
    resumed = planned.resumed
    if resumed:  # the run's newest directory holds its newest checkpoint (resume=auto)
        adopt(Path(resumed.point.checkpoint), run_dir)
        carry_over(resumed.run_dir, run_dir)  # each host's system metrics go on from there
    (run_dir / run_files.CONFIG).write_text(planned.typed.recorded_yaml)
    planned.plan.save(run_dir / run_files.PLAN)


def problems_of(err: ValueError) -> list[str]:
    """A planning error's lines: a PlanError's, else the error's message on one line."""
    if isinstance(err, PlanError):
        return err.problems
    return [" ".join(str(err).split()) or type(err).__name__]


def resume_reference(
    typed: TypedExperiment, tracker: Tracker, facts: DriverFacts
) -> tuple[str | None, str]:
    """The run to continue and how it was chosen: ``resume=`` as given; for ``resume=auto``
    the newest unfinished run of this config with a checkpoint, and for a requeued Slurm
    job the newest of that job (None: start a new run)."""
    resume, job, cluster = typed.settings.resume, facts.requeued_job, facts.cluster
    if resume not in (None, AUTO):
        return resume, f"resume={resume}"
    if job is not None:
        how = f"requeued {cluster.title} job {job} (restart {cluster.restart_count()})"
        wanted = cluster.tags()
    elif resume == AUTO:
        how, wanted = "resume=auto", {"config_hash": typed.config_hash}
    else:
        return None, ""
    found = first_resumable(tracker.unfinished_runs(wanted))
    if found is None:
        log.info(
            f"tntrun: {how}: no unfinished run of this {'job' if job else 'config'} with a "
            f"checkpoint in {tracker.store}; starting a new run"
        )
    return found, how


def resume_of(
    exp: Experiment, settings: Settings, tracker: Tracker, reference: str, how: str
) -> ResumedRun:
    """The run ``reference`` names, with its config and checkpoint."""

    def recorded_run_dir(run_id: str) -> str | None:
        store_file = sqlite_path(tracker.store)
        if store_file is not None and not store_file.exists():
            raise LookupError(run_id)  # no store yet, so no such run: and none is created
        found = tracker_for(settings.tracker_settings(), Path(settings.output_root))
        found.attach(run_id)
        return found.summary().tags.get("run_dir")

    return load_resumed_run(
        reference,
        recorded_run_dir,
        tracker.store,
        exp.overrides,
        list(exp.choices),
        settings.resume_allow_layout_change,
        how,
    )


def supervise_and_record(
    recorder: Recorder, inputs: PlanInputs, plan: Plan, cluster: ClusterEnvironment
) -> RunResult:
    """Start the ranks (the supervisor) and record the run beside them (the recorder)."""
    run_dir, tracker = inputs.run_dir, recorder.tracker
    supervisor = Supervisor(plan, run_dir, inputs.plan)  # a restart: a new resume point
    outcome = Outcome(RunStatus.FAILED, plan)
    try:
        outcome = supervisor.run(recorder)
    finally:
        with record_first():  # a signal now waits: the record is written (or left pending)
            recorder.end(outcome.status, outcome.stalled, outcome.disk)  # never leaves it RUNNING
    if outcome.preempted:
        cluster.requeue(outcome.stop_signal)
    if outcome.refused:
        refused = config_error(list(outcome.refused), run_dir)
        return replace(refused, run_id=tracker.run_id, plan=outcome.plan)
    recorded = recorder.report(outcome.status)
    if not recorded.tracked:
        killed = RunStatus.KILLED
        return RunResult(killed, EXIT_INTERRUPTED, run_dir, recorded.run_id, plan=outcome.plan)
    code = outcome.exit_code
    if recorded.pending and code == 0:  # trained, but the record waits for `tntrun sync`
        code = EXIT_TRACKING_PENDING
    return RunResult(
        outcome.status, code, run_dir, recorded.run_id, recorded.metrics, plan=outcome.plan
    )
