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
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tntrun.config.compose import plain_config, with_allocation_layout
from tntrun.config.user_code import add_user_path
from tntrun.config.zoo import SizedDataset, check_targets, distributes_automatically, size_dataset
from tntrun.contract import run_files
from tntrun.contract.checkpoints import adopt
from tntrun.contract.driver_alive import driver_tags
from tntrun.contract.exit_codes import EXIT_INTERRUPTED, EXIT_TRACKING_PENDING
from tntrun.contract.node_metrics import carry_over
from tntrun.datasets.base import DatasetInfo
from tntrun.environments import ClusterEnvironment, detect
from tntrun.errors import PlanError
from tntrun.experiment import Experiment, RunResult, config_error
from tntrun.launch import keras_override_note, with_launch_command
from tntrun.launch.supervisor import Outcome, Supervisor
from tntrun.planning.machine import (
    MachineFacts,
    device_problems,
    machine_facts,
    tensorboard_problems,
)
from tntrun.planning.plan import Plan, build_plan
from tntrun.planning.resume import AUTO, ResumedRun, first_resumable, load_resumed_run
from tntrun.planning.schedule_chart import write_schedule_chart
from tntrun.planning.view import render_plan
from tntrun.tracking import Tracker, tracker_for
from tntrun.tracking.opening import RunOrigin, problem_hash
from tntrun.tracking.recorder import Recorder

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Facts:
    """Where the driver runs, learnt once per run: the cluster environment (its allocation,
    job tags, requeue) and this machine (cores, GPUs, interpreter)."""

    cluster: ClusterEnvironment
    machine: MachineFacts


def gather_facts() -> Facts:
    cluster = detect(os.environ)
    return Facts(cluster, machine_facts(cluster))


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is derived from, once vetted and sized: a restart re-plans from them
    with only a new resume point (no re-composing, no target checks, no dataset sizing)."""

    plain: dict[str, Any]
    info: DatasetInfo
    machine: MachineFacts
    run_dir: Path

    def plan(self, resume: Any = None) -> Plan:
        planned = build_plan(self.plain, self.info, self.machine, self.run_dir, resume)
        return with_launch_command(planned, self.plain, self.machine)


def make_plan(
    exp: Experiment, run_dir: Path, resume: Any = None, facts: Facts | None = None
) -> tuple[Plan, SizedDataset, PlanInputs]:
    """Vet the targets, size the dataset and derive the plan (no TensorFlow).

    Returns the plan, the dataset's sizes (with, for a dry run without the data, why they
    are assumed) and what a restart re-plans from.
    """
    cfg = exp.config
    check_targets(cfg, dict(exp.choices))
    sized = size_dataset(cfg.dataset, allow_published=bool(cfg.dry_run))
    if not distributes_automatically(cfg.dataset):
        from hydra.utils import get_class

        if not hasattr(get_class(cfg.dataset._target_), "load_for_rank"):
            raise PlanError(
                f"dataset.distribute=false needs a dataset with load_for_rank(); "
                f"{cfg.dataset._target_} has none: set dataset.distribute=true"
            )
    machine = (facts or gather_facts()).machine
    inputs = PlanInputs(plain_config(cfg, exp.overrides, os.environ), sized.info, machine, run_dir)
    return inputs.plan(resume), sized, inputs


def dry_run(cfg: DictConfig, plan: Plan, run_dir: Path, assumed: str | None) -> None:
    """Show the config, the plan and the launch command; start nothing."""
    log.info("== Config ==")
    log.info(OmegaConf.to_yaml(cfg, resolve=True))
    log.info(render_plan(plan))
    if assumed:
        log.info(f"\nnote: {assumed}")
    log.info(f"\nLR schedule chart: {write_schedule_chart(plan, run_dir / run_files.LR_PLOT)}")
    log.info("dry run: nothing was launched and no run was tracked")


def run(exp: Experiment) -> RunResult:
    """Plan, track and launch one run (or continue one); never leaves it RUNNING."""
    cfg = exp.config
    run_dir = exp.run_dir or Path(cfg.output_root).resolve() / "runs" / "api"
    add_user_path()  # user modules (model._target_=mymodels.build) from the working directory
    facts = gather_facts()
    try:
        tracker = tracker_for(cfg.tracking, Path(cfg.output_root))
        filled = replace(exp, config=with_allocation_layout(cfg, exp.overrides, os.environ))
        reference, how = resume_reference(filled, tracker, facts.cluster)
        resumed = resume_of(exp, tracker, reference, how) if reference else None
        if resumed is None:
            exp = filled
        else:  # the stored config, with the layout filled as for a new run
            config = with_allocation_layout(resumed.config, exp.overrides, os.environ)
            exp = replace(exp, config=config)
        cfg = exp.config
        plan, sized, inputs = make_plan(exp, run_dir, resumed.point if resumed else None, facts)
    except PlanError as err:  # e.g. a layout change not allowed: before any rank or record
        return config_error(err.problems, run_dir)
    if resumed:
        log.info(f"tntrun: {resumed.how}: continuing run {resumed.run_id}")
    keras_note = keras_override_note(os.environ)
    for note in [*plan.notes(), *([keras_note] if keras_note else [])]:
        log.warning(f"tntrun: note: {note}")
    if cfg.dry_run:
        run_dir.mkdir(parents=True, exist_ok=True)
        dry_run(cfg, plan, run_dir, sized.assumed)
        return RunResult("PLANNED", 0, run_dir, plan=plan)
    problems = device_problems(plan.hosts, plan.gpus_per_node, facts.machine)
    problems += tensorboard_problems(cfg.train.tensorboard)
    problems = problems or tracker.problems()
    if problems:
        return config_error(problems, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if resumed:  # the run's newest directory holds its newest checkpoint (resume=auto)
        adopt(Path(resumed.point.checkpoint), run_dir)
        carry_over(resumed.run_dir, run_dir)  # each host's system metrics go on from there
    (run_dir / run_files.CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    plan.save(run_dir / run_files.PLAN)
    log.info(
        f"tntrun: {plan.world_size} ranks on {', '.join(f'{h}:{s}' for h, s in plan.hosts)}; "
        f"global batch {plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size}; "
        f"{plan.steps_per_epoch} steps/epoch x {plan.epochs} epochs; lr {plan.scaled_lr:g}"
    )
    return launch(exp, inputs, plan, tracker, resumed, facts.cluster)


def resume_reference(
    exp: Experiment, tracker: Tracker, cluster: ClusterEnvironment
) -> tuple[str | None, str]:
    """The run to continue and how it was chosen: ``resume=`` as given; for ``resume=auto``
    the newest unfinished run of this config with a checkpoint, and for a requeued Slurm
    job the newest of that job (None: start a new run)."""
    cfg = exp.config
    job = cluster.requeued_job()
    if cfg.resume not in (None, AUTO):
        return str(cfg.resume), f"resume={cfg.resume}"
    if job is not None:
        how = f"requeued {cluster.title} job {job} (restart {cluster.restart_count()})"
        wanted = cluster.tags()
    elif cfg.resume == AUTO:
        how, wanted = "resume=auto", {"config_hash": problem_hash(cfg)}
    else:
        return None, ""
    found = first_resumable(tracker.unfinished_runs(wanted))
    if found is None:
        log.info(
            f"tntrun: {how}: no unfinished run of this {'job' if job else 'config'} with a "
            f"checkpoint in {tracker.store}; starting a new run"
        )
    return found, how


def resume_of(exp: Experiment, tracker: Tracker, reference: str, how: str) -> ResumedRun:
    """The run ``reference`` names, with its config and checkpoint."""
    cfg = exp.config

    def recorded_run_dir(run_id: str) -> str | None:
        found = tracker_for(cfg.tracking, Path(cfg.output_root))
        found.attach(run_id)
        return found.summary().tags.get("run_dir")

    return load_resumed_run(
        reference,
        recorded_run_dir,
        tracker.store,
        exp.overrides,
        list(exp.choices),
        bool(cfg.resume_allow_layout_change),
        how,
    )


def launch(
    exp: Experiment,
    inputs: PlanInputs,
    plan: Plan,
    tracker: Tracker,
    resumed: ResumedRun | None,
    cluster: ClusterEnvironment,
) -> RunResult:
    """Start the ranks (the supervisor) and record the run beside them (the recorder)."""
    cfg, run_dir = exp.config, inputs.run_dir
    launch_tags = {**driver_tags(), **cluster.tags()}
    origin = RunOrigin(exp.overrides, exp.choices, exp.parent_run_id, exp.job, launch_tags)
    recorder = Recorder(tracker, cfg, plan, run_dir, origin, resumed, inputs.info)
    supervisor = Supervisor(plan, cfg, run_dir, inputs.plan)  # a restart: a new resume point
    outcome = Outcome("FAILED", plan)
    try:
        outcome = supervisor.run(recorder)
    finally:
        recorder.end(outcome.status, outcome.stalled)  # never leaves it RUNNING
    if outcome.preempted:
        cluster.requeue(outcome.stop_signal)
    if outcome.refused:
        refused = config_error(list(outcome.refused), run_dir)
        return replace(refused, run_id=tracker.run_id, plan=outcome.plan)
    recorded = recorder.report(outcome.status)
    if not recorded.tracked:
        return RunResult("KILLED", EXIT_INTERRUPTED, run_dir, recorded.run_id, plan=outcome.plan)
    code = outcome.exit_code
    if recorded.pending and code == 0:  # trained, but the record waits for `tntrun sync`
        code = EXIT_TRACKING_PENDING
    return RunResult(
        outcome.status, code, run_dir, recorded.run_id, recorded.metrics, plan=outcome.plan
    )
