"""The life of one run on the driver: resolve, lock, start, supervise, record, end.

Shared by the CLI and the Python API. The driver never imports TensorFlow: it resolves
the experiment (:func:`tntrun.preparation.resolve`), writes ``config.yaml`` and
``plan.json`` into the run directory, starts the ranks through the configured launcher,
opens the tracked run while they import TensorFlow, relays rank 0's metrics and always
ends the run.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.checkpoints import adopt
from tntrun.contract.disk import disk_error_of
from tntrun.contract.driver_alive import driver_tags
from tntrun.contract.exit_codes import EXIT_INTERRUPTED, EXIT_TRACKING_PENDING
from tntrun.contract.node_metrics import carry_over
from tntrun.contract.run_lock import RunDirBusy, RunDirLock, taken_early
from tntrun.contract.run_status import RunStatus
from tntrun.errors import PlanError
from tntrun.experiment import Experiment, RunResult, config_error
from tntrun.launch.discovery import discovery_problems
from tntrun.launch.launcher import keras_override_note
from tntrun.launch.preemption import record_first
from tntrun.launch.supervisor import Outcome, Supervisor
from tntrun.planning.machine import device_problems, tensorboard_problems
from tntrun.planning.plan import Plan
from tntrun.planning.rank_map import hosts_text
from tntrun.planning.schedule_chart import write_schedule_chart
from tntrun.planning.view import plan_files, render_plan
from tntrun.preparation import PreparedRun, TypedExperiment, resolve
from tntrun.tracking.opening import RunOrigin
from tntrun.tracking.recorder import Recorder

log = logging.getLogger(__name__)


def dry_run(typed: TypedExperiment, plan: Plan, run_dir: Path, assumed: str | None) -> None:
    """Show the config, the plan and the launch command; start nothing. A run too large to
    read on a console (``planning.rank_map``) gets a summary, and its config, rank map,
    hosts and launch command whole in files of the run directory, named in the summary."""
    files, config = plan_files(plan), typed.recorded_yaml  # YAML of 1,024 hosts: 0.1 s
    if files:
        files[run_files.CONFIG] = config
        run_dir.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (run_dir / name).write_text(text)
    log.info("== Config ==")
    log.info(
        f"{run_dir / run_files.CONFIG} ({len(config.splitlines())} lines)" if files else config
    )
    log.info(render_plan(plan, run_dir))
    if assumed:
        log.info(f"\nnote: {assumed}")
    log.info(f"\nLR schedule chart: {write_schedule_chart(plan, run_dir / run_files.LR_PLOT)}")
    log.info("dry run: nothing was launched and no run was tracked")


def run(exp: Experiment) -> RunResult:
    """Resolve and start one run (or continue one); never leaves it RUNNING. The run
    directory is locked (one run a directory) from before anything is written into it."""
    run_dir = exp.run_dir or Path(exp.config.output_root).resolve() / "runs" / "api"
    early = taken_early(run_dir)  # the CLI's, taken before Hydra wrote into the directory
    try:
        prepared = resolve(exp, run_dir)
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
        return start(prepared)


def start(prepared: PreparedRun) -> RunResult:
    """Write the run's inputs into its (locked) directory and launch it (or dry-run it)."""
    plan, run_dir = prepared.plan, prepared.run_dir
    announce(prepared)
    if plan.settings.dry_run:
        dry_run(prepared.typed, plan, run_dir, prepared.sized.assumed)
        return RunResult(RunStatus.PLANNED, 0, run_dir, plan=plan)
    problems = launch_problems(prepared)
    if problems:
        return config_error(problems, run_dir)
    try:
        write_inputs(prepared)
    except OSError as err:  # a full disk: refused before launch, in one line
        disk = disk_error_of(err, run_dir)
        if disk is None:
            raise
        return config_error([f"run directory {run_dir}: {disk}"], run_dir)
    log.info(layout_line(plan))
    return supervise_and_record(prepared)


def announce(prepared: PreparedRun) -> None:
    """What the user should know before the run starts: the run it continues (and damaged
    checkpoints set aside), the plan's notes and an ignored Keras choice."""
    resumed = prepared.resumed
    if resumed:
        for damaged in resumed.damaged:
            log.warning(f"tntrun: {damaged}")
        log.info(f"tntrun: {resumed.how}: continuing run {resumed.run_id}")
    keras_note = keras_override_note(os.environ)
    for note in [*prepared.plan.notes(), *([keras_note] if keras_note else [])]:
        log.warning(f"tntrun: note: {note}")


def launch_problems(prepared: PreparedRun) -> list[str]:
    """Why the ranks cannot start here (devices, TensorBoard, elastic discovery), else why
    the tracking store cannot take the run; checked before anything is written."""
    plan = prepared.plan
    problems = device_problems(plan.hosts, plan.gpus_per_node, prepared.facts.machine)
    problems += tensorboard_problems(plan.settings.train.tensorboard)
    if plan.elastic_nodes is not None:
        problems += discovery_problems(plan.settings.elastic.discovery, plan.ranks_per_node)
    return problems or prepared.tracker.problems()


def write_inputs(prepared: PreparedRun) -> None:
    """The ranks' inputs (config.yaml, plan.json) and a resumed run's checkpoint."""
    resumed, run_dir = prepared.resumed, prepared.run_dir
    if resumed:  # the run's newest directory holds its newest checkpoint (resume=auto)
        adopt(Path(resumed.point.checkpoint), run_dir)
        carry_over(resumed.run_dir, run_dir)  # each host's system metrics go on from there
    (run_dir / run_files.CONFIG).write_text(prepared.typed.recorded_yaml)
    prepared.plan.save(run_dir / run_files.PLAN)


def layout_line(plan: Plan) -> str:
    """The run's layout, batch, steps and LR in one line, as the ranks start."""
    return (
        f"tntrun: {plan.world_size} ranks on {hosts_text(plan)}; "
        f"global batch {plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size}; "
        f"{plan.steps_per_epoch} steps/epoch x {plan.epochs} epochs; lr {plan.scaled_lr:g}"
    )


def recorder_for(prepared: PreparedRun, current_plan: Callable[[], Plan]) -> Recorder:
    """The recorder of the run: how it was started (overrides, choices, the sweep it is a
    job of, the driver's and the cluster job's tags), what it continues and where it reads
    the current plan (``current_plan``: the supervisor's)."""
    exp, facts = prepared.experiment, prepared.facts
    launch_tags = {**driver_tags(), **facts.cluster.tags()}
    origin = RunOrigin(exp.overrides, exp.choices, exp.parent_run_id, exp.job, launch_tags)
    return Recorder(
        prepared.tracker,
        current_plan,
        prepared.typed.recorded,
        prepared.run_dir,
        origin,
        prepared.resumed,
        prepared.inputs.info,
    )


def problems_of(err: ValueError) -> list[str]:
    """A planning error's lines: a PlanError's, else the error's message on one line."""
    if isinstance(err, PlanError):
        return err.problems
    return [" ".join(str(err).split()) or type(err).__name__]


def supervise_and_record(prepared: PreparedRun) -> RunResult:
    """Start the ranks (the supervisor, which owns the current plan) and record the run
    beside them (the recorder, which reads the plan from it)."""
    inputs, run_dir = prepared.inputs, prepared.run_dir
    supervisor = Supervisor(prepared.plan, run_dir, inputs.plan, inputs.launcher)
    recorder = recorder_for(prepared, lambda: supervisor.plan)  # a restart: a new plan
    outcome = Outcome(RunStatus.FAILED)
    try:
        outcome = supervisor.run(recorder)
    finally:
        with record_first():  # a signal now waits: the record is written (or left pending)
            recorder.end(outcome.status, outcome.stalled, outcome.disk)  # never leaves it RUNNING
    if outcome.preempted:
        prepared.facts.cluster.requeue(outcome.stop_signal)
    return run_result(outcome, recorder, supervisor.plan, run_dir)


def run_result(outcome: Outcome, recorder: Recorder, plan: Plan, run_dir: Path) -> RunResult:
    """What became of the run: the supervisor's status and exit code, the recorder's run id
    and final metrics (and exit 3 while its record waits for ``tntrun sync``)."""
    if outcome.refused:
        refused = config_error(list(outcome.refused), run_dir)
        return replace(refused, run_id=recorder.tracker.run_id, plan=plan)
    recorded = recorder.report(outcome.status)
    if not recorded.tracked:  # left to the tracking thread: a second Ctrl-C (KILLED)
        return RunResult(outcome.status, EXIT_INTERRUPTED, run_dir, recorded.run_id, plan=plan)
    code = outcome.exit_code
    if recorded.pending and code == 0:  # trained, but the record waits for `tntrun sync`
        code = EXIT_TRACKING_PENDING
    return RunResult(
        outcome.status,
        code,
        run_dir,
        recorded.run_id,
        recorded.metrics,
        plan=plan,
        batch_advice=recorded.batch_advice,
    )
