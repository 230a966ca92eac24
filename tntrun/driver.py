"""The life of one run on the driver: plan, track, launch, record, end.

Shared by the CLI and the Python API. The driver never imports TensorFlow:
it plans, writes ``config.yaml`` and ``plan.json`` into the run directory,
starts the ranks through the configured launcher, opens the tracked run while
they import TensorFlow, relays rank 0's metrics and always ends the run.
"""

from __future__ import annotations

import os
import shlex
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tntrun import run_files
from tntrun.config.compose import plain_config, with_allocation_layout
from tntrun.config.user_code import add_user_path
from tntrun.config.zoo import SizedDataset, check_targets, distributes_automatically, size_dataset
from tntrun.datasets.base import DatasetInfo
from tntrun.errors import PlanError
from tntrun.launch import keras_override_note, launcher_for
from tntrun.launch.clock import process_start_time
from tntrun.launch.driver_alive import DriverHeartbeat, driver_tags
from tntrun.launch.preemption import StopOnSignals, job_restart, requeue_after, slurm_tags
from tntrun.launch.rank_job import LaunchResult, RankJob, StallWatch
from tntrun.launch.rank_logs import RankLogWriter
from tntrun.launch.restarts import archive_attempt
from tntrun.planning.checkpoints import adopt, config_hash, latest_checkpoint, read_meta
from tntrun.planning.machine import device_problems, machine_facts
from tntrun.planning.plan import Plan, build_plan
from tntrun.planning.resume import (
    AUTO,
    ResumedRun,
    ResumePoint,
    first_resumable,
    load_resumed_run,
)
from tntrun.planning.schedule_chart import write_schedule_chart
from tntrun.planning.view import render_plan
from tntrun.tracking import Tracker, flatten, tracker_for
from tntrun.tracking.lost_runs import DRIVER_LOST_TAG
from tntrun.tracking.metrics_stream import MetricsRelay, last_values
from tntrun.tracking.outage import (
    EXIT_TRACKING_PENDING,
    Delivery,
    Pending,
    describe,
    is_outage,
    sync_line,
)
from tntrun.tracking.run_record import PREEMPTED_TAG, start_tags
from tntrun.tracking.runs_table import dataset_record, default_run_name
from tntrun.tracking.session import TrackingSession

DRIVER_START = process_start_time()  # ranks report their first step relative to it
EXIT_CONFIG_ERROR = 2
EXIT_INTERRUPTED = 130
SHOWN_METRICS = ("val_accuracy", "val_loss", "bleu", "bleu_uncased")


@dataclass(frozen=True)
class Experiment:
    """A composed config and what it was composed from."""

    config: DictConfig
    overrides: tuple[str, ...] = ()
    choices: Mapping[str, str] = field(default_factory=dict)  # group -> option
    run_dir: Path | None = None
    parent_run_id: str | None = None  # the sweep's parent run
    job: int | None = None  # the job's number in a sweep


@dataclass(frozen=True)
class RunResult:
    """What became of a run."""

    status: str  # FINISHED, FAILED, KILLED; INVALID (config error) or PLANNED (dry run)
    exit_code: int
    run_dir: Path | None
    run_id: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # the config errors of an INVALID run, one line each
    plan: Plan | None = None

    def objective(self, key: str) -> float:
        """The final value of metric ``key`` (NaN unless the run FINISHED with it)."""
        return float(self.metrics.get(key, "nan")) if self.status == "FINISHED" else float("nan")


def config_error(problems: list[str], run_dir: Path | None = None) -> RunResult:
    return RunResult("INVALID", EXIT_CONFIG_ERROR, run_dir, problems=tuple(problems))


def make_plan(exp: Experiment, run_dir: Path, resume: Any = None) -> tuple[Plan, SizedDataset]:
    """Vet the targets, size the dataset and derive the plan (no TensorFlow).

    Returns the plan and the dataset's sizes (with, for a dry run without the data,
    why they are assumed).
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
    plain = plain_config(cfg, exp.overrides, os.environ)
    return build_plan(plain, sized.info, machine_facts(), run_dir, resume), sized


def dry_run(cfg: DictConfig, plan: Plan, run_dir: Path, assumed: str | None) -> None:
    """Show the config, the plan and the launch command; start nothing."""
    print("== Config ==")
    print(OmegaConf.to_yaml(cfg, resolve=True))
    print(render_plan(plan))
    if assumed:
        print(f"\nnote: {assumed}")
    print(f"\nLR schedule chart: {write_schedule_chart(plan, run_dir / run_files.LR_PLOT)}")
    print("dry run: nothing was launched and no run was tracked")


def run(exp: Experiment) -> RunResult:
    """Plan, track and launch one run (or continue one); never leaves it RUNNING."""
    cfg = exp.config
    run_dir = exp.run_dir or Path(cfg.output_root).resolve() / "runs" / "api"
    add_user_path()  # user modules (model._target_=mymodels.build) from the working directory
    try:
        tracker = tracker_for(cfg.tracking, Path(cfg.output_root))
        filled = replace(exp, config=with_allocation_layout(cfg, exp.overrides, os.environ))
        reference, how = resume_reference(filled, tracker)
        resumed = resume_of(exp, tracker, reference, how) if reference else None
        if resumed is None:
            exp = filled
        else:  # the stored config, with the layout filled as for a new run
            config = with_allocation_layout(resumed.config, exp.overrides, os.environ)
            exp = replace(exp, config=config)
        cfg = exp.config
        plan, sized = make_plan(exp, run_dir, resumed.point if resumed else None)
    except PlanError as err:
        return config_error(err.problems, run_dir)
    keras_note = keras_override_note(os.environ)
    for note in [*plan.notes(), *([keras_note] if keras_note else [])]:
        print(f"tntrun: note: {note}", file=sys.stderr)
    if cfg.dry_run:
        run_dir.mkdir(parents=True, exist_ok=True)
        dry_run(cfg, plan, run_dir, sized.assumed)
        return RunResult("PLANNED", 0, run_dir, plan=plan)
    problems = device_problems(plan.hosts, plan.gpus_per_node, machine_facts())
    problems = problems or tracker.problems()
    if problems:
        return config_error(problems, run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if resumed:  # the run's newest directory holds its newest checkpoint (resume=auto)
        adopt(Path(resumed.point.checkpoint), run_dir)
    (run_dir / run_files.CONFIG).write_text(OmegaConf.to_yaml(cfg, resolve=True))
    plan.save(run_dir / run_files.PLAN)
    print(
        f"tntrun: {plan.world_size} ranks on {', '.join(f'{h}:{s}' for h, s in plan.hosts)}; "
        f"global batch {plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size}; "
        f"{plan.steps_per_epoch} steps/epoch x {plan.epochs} epochs; lr {plan.scaled_lr:g}",
        flush=True,
    )
    return LaunchedRun(exp, plan, run_dir, tracker, resumed, sized.info).execute()


def problem_hash(cfg: DictConfig) -> str:
    """The hash of the training problem a config defines (checkpoints and runs carry it)."""
    return config_hash(OmegaConf.to_container(cfg, resolve=True))


def resume_reference(exp: Experiment, tracker: Tracker) -> tuple[str | None, str]:
    """The run to continue and how it was chosen: ``resume=`` as given; for ``resume=auto``
    the newest unfinished run of this config with a checkpoint, and for a requeued Slurm
    job the newest of that job (None: start a new run)."""
    cfg, job = exp.config, job_restart(os.environ)
    if cfg.resume not in (None, AUTO):
        return str(cfg.resume), f"resume={cfg.resume}"
    if job is not None:
        how = f"requeued Slurm job {job} (restart {os.environ['SLURM_RESTART_COUNT']})"
        wanted = {"slurm_job_id": job}
    elif cfg.resume == AUTO:
        how, wanted = "resume=auto", {"config_hash": problem_hash(cfg)}
    else:
        return None, ""
    found = first_resumable(tracker.unfinished_runs(wanted))
    if found is None:
        print(
            f"tntrun: {how}: no unfinished run of this {'job' if job else 'config'} with a "
            f"checkpoint in {tracker.store}; starting a new run",
            flush=True,
        )
    else:
        print(f"tntrun: {how}: continuing run {found}", flush=True)
    return found, how


def resume_of(exp: Experiment, tracker: Tracker, reference: str, how: str) -> ResumedRun:
    """The run ``reference`` names, with its config and checkpoint."""
    cfg = exp.config

    def recorded_run_dir(run_id: str) -> str | None:
        found = tracker_for(cfg.tracking, Path(cfg.output_root))
        found.attach(run_id)
        return found.tags().get("run_dir")

    return load_resumed_run(
        reference,
        recorded_run_dir,
        tracker.store,
        exp.overrides,
        list(exp.choices),
        bool(cfg.resume_allow_layout_change),
        how,
    )


class LaunchedRun:
    """One launch of a planned run: the ranks, the tracked run and their ending."""

    def __init__(
        self,
        exp: Experiment,
        plan: Plan,
        run_dir: Path,
        tracker: Tracker,
        resumed: ResumedRun | None,
        dataset: DatasetInfo | None = None,
    ) -> None:
        self.exp, self.cfg, self.plan, self.run_dir = exp, exp.config, plan, run_dir
        self.tracker, self.resumed = tracker, resumed
        self.dataset = dataset  # the sizes planned with, recorded with the run
        self.launcher = launcher_for(plan.launcher)
        self.prefix: str | None = None  # artifact prefix of a resumed run's new outputs
        self.session: TrackingSession | None = None
        self.relay: MetricsRelay | None = None  # rank 0's metrics into the run
        self.deferred = False  # the store was unreachable when the run was to be opened
        self.pending: Pending | None = None  # what the store has not received at the end
        self.restarts = 0  # of the ranks after a failure in this launch (train.max_restarts)
        self.recorded_restarts = 0  # the run's restarts so far (failures, preemptions)
        self.job: RankJob | None = None
        train = self.cfg.train
        self.stopping = StopOnSignals(
            run_dir,
            list(train.preempt_signals),
            float(train.preempt_grace_s),
            ranks_running=lambda: self.job is not None,
            stop_ranks=lambda: self.job.terminate(),
        )

    def execute(self) -> RunResult:
        status, stalled, refused = "FAILED", None, None
        try:
            with self.stopping.installed(), self.launcher.running(self.plan, self.cfg) as extra:
                try:
                    self.launcher.preflight(self.plan, self.cfg, self.run_dir)  # before any rank
                except PlanError as err:  # recorded on a FAILED run, reported as a config error
                    refused = err.problems
                    self.open_run()
                    self.tracker.set_tag("failure.preflight", "\n".join(refused)[:5000])
                else:
                    outcome = self.follow(extra)
                    status, stalled = outcome.status, outcome.stalled
                    if self.preempted() or (self.stopping.received and status != "FINISHED"):
                        status = "KILLED"  # asked to stop: checkpointed (preempted) or not
        except KeyboardInterrupt:
            status = "KILLED"
        finally:
            self.end(status, stalled)
        if self.preempted():
            requeue_after(self.stopping.received, os.environ)
        if refused:
            result = config_error(refused, self.run_dir)
            return RunResult(
                result.status,
                result.exit_code,
                self.run_dir,
                self.tracker.run_id,
                problems=result.problems,
                plan=self.plan,
            )
        return self.report(status)

    def preempted(self) -> bool:
        """Whether the ranks stopped together on a stop request and checkpointed there."""
        return (self.run_dir / run_files.PREEMPTED).is_file()

    def follow(self, extra_env: Mapping[str, str]) -> LaunchResult:
        """Start the ranks, open the tracked run meanwhile, relay until the ranks end."""
        env = {
            **dict(self.plan.launch_env),
            **extra_env,
            run_files.ENV_DRIVER_START: repr(DRIVER_START),
            run_files.ENV_USER_PATH: os.getcwd(),
        }
        self.heartbeat = DriverHeartbeat(self.run_dir)  # the ranks end within seconds of ours
        self.heartbeat.start()
        self.job = self.start_ranks(env)
        # The ranks import TensorFlow now; the store opens meanwhile in a lower-priority thread.
        self.session = TrackingSession(
            self.open_tracked, self.relaying, lambda: self.job.terminate()
        )
        try:
            outcome = self.job.follow()
            while self.restart_after(outcome):
                self.job = self.start_ranks(env)
                outcome = self.job.follow()
            return outcome
        finally:
            self.heartbeat.stop()
            self.session.close()  # re-raises a failure to open the run

    def start_ranks(self, env: Mapping[str, str]) -> RankJob:
        return RankJob(
            self.plan.launch_command,
            env,
            self.run_dir / run_files.RANKS_LOG,
            RankLogWriter(self.run_dir / run_files.LOGS),
            StallWatch(
                self.run_dir / run_files.HEARTBEATS,
                self.plan.world_size,
                float(self.cfg.train.stall_timeout_s),
            ),
        )

    def restart_after(self, outcome: LaunchResult) -> bool:
        """After a failed attempt, re-plan from the newest checkpoint (train.max_restarts)."""
        limit = int(self.cfg.train.max_restarts)
        if outcome.status != "FAILED" or self.restarts >= limit or self.stopping.received:
            return False
        checkpoint = latest_checkpoint(self.run_dir)
        try:
            if checkpoint is None:
                raise PlanError("the run wrote no checkpoint to restart from")
            resume = ResumePoint(str(checkpoint), read_meta(checkpoint))
            plan, _ = make_plan(self.exp, self.run_dir, resume)
        except PlanError as err:
            print(
                f"tntrun: not restarting the ranks: {'; '.join(err.problems)}",
                file=sys.stderr,
                flush=True,
            )
            return False
        self.restarts += 1
        self.recorded_restarts += 1
        why = archive_attempt(self.run_dir, self.recorded_restarts, outcome.stalled)
        self.plan = plan
        plan.save(self.run_dir / run_files.PLAN)
        print(
            f"tntrun: {why}; restart {self.restarts} of {limit} (train.max_restarts) from "
            f"{checkpoint.name}, in the same run",
            flush=True,
        )
        if self.tracker.run_id:
            self.tracker.set_tag("restarts", str(self.recorded_restarts))
            self.tracker.set_tag(
                f"restart.{self.recorded_restarts}", f"{why}; from {checkpoint.name}"
            )
        return True

    def open_run(self) -> tuple[Tracker, str | None]:
        """Create the tracked run (or reopen the resumed one) and log its params."""
        tracker, plan, run_dir = self.tracker, self.plan, self.run_dir
        if tracker.run_id:  # created before the store went away: the rest again
            run_id = tracker.run_id
        elif self.resumed:
            run_id = tracker.reopen(self.resumed.mlflow_run_id, self.resume_tags)
            self.prefix = f"resumed-{run_dir.name}"
        else:
            tags = start_tags(
                plan,
                run_dir,
                list(self.exp.overrides),
                dict(self.exp.choices),
                problem_hash(self.cfg),
            )
            run_id = tracker.start(
                self.cfg.tracking.run_name or self.default_run_name(), tags, self.exp.parent_run_id
            )
        (run_dir / run_files.RUN_ID).write_text(run_id)
        if not self.resumed:
            params = dict(flatten(OmegaConf.to_container(self.cfg, resolve=True, enum_to_str=True)))
            params.update(plan.summary_params())
            tracker.log_params(params)
            if self.dataset is not None:
                dataset_cfg = OmegaConf.to_container(
                    self.cfg.dataset, resolve=True, enum_to_str=True
                )
                tracker.log_dataset(dataset_record(self.exp.choices, dataset_cfg, self.dataset))
        print(f"tntrun: {tracker.label} run {run_id} in {tracker.store}", flush=True)
        return tracker, self.prefix

    def default_run_name(self) -> str:
        """``<model>-<dataset>-<ranks>x<micro-batch>`` (``mlp-digits-2x32``), for the runs table."""
        cfg, plan = self.cfg, self.plan
        return default_run_name(
            self.exp.choices,
            cfg.model.get("_target_"),
            cfg.dataset.get("_target_"),
            plan.world_size,
            plan.micro_batch_size,
            self.exp.job,
        )

    def open_tracked(self) -> tuple[Tracker, str | None]:
        """:meth:`open_run`; if the store went away since the pre-flight check, training goes
        on and the run is opened once the store answers (by the relay or at the end)."""
        try:
            return self.open_run()
        except Exception as err:
            if not is_outage(err, self.tracker.store):
                raise
            self.deferred = True
            print(
                f"tntrun: the tracking store {self.tracker.store} does not answer "
                f"({describe(err)}); training goes on and the run is recorded once it does",
                file=sys.stderr,
                flush=True,
            )
            return self.tracker, self.prefix

    def open_deferred(self) -> None:
        """Open the run now if the store was unreachable when it was to be opened."""
        if self.deferred:
            self.open_run()
            self.deferred = False

    def send_metrics(self, points: list[Any]) -> None:
        self.open_deferred()
        self.tracker.log_metrics(points)

    def metrics_relay(self) -> MetricsRelay:
        """The relay of rank 0's metrics; while the store is down they wait in the file."""
        store, path = self.tracker.store, self.run_dir / run_files.METRICS

        def down(err: BaseException) -> None:
            if self.deferred:  # open_tracked said so already
                return
            print(
                f"tntrun: the tracking store {store} does not answer ({describe(err)}); "
                f"training goes on and rank 0's metrics wait in {path}",
                file=sys.stderr,
                flush=True,
            )

        def back(lines: int) -> None:
            print(
                f"tntrun: the tracking store {store} answers again; {lines} metric lines caught up",
                file=sys.stderr,
                flush=True,
            )

        self.relay = MetricsRelay(path, self.send_metrics, on_failure=down, on_recovery=back)
        return self.relay

    @contextmanager
    def relaying(self, tracker: Tracker) -> Iterator[None]:
        """While the ranks run: rank 0's metrics and this node's system metrics into the run."""
        tracking = self.cfg.tracking
        node = socket.gethostname() if self.plan.nodes > 1 else None
        with (
            tracker.system_metrics(
                bool(tracking.system_metrics) and bool(tracker.run_id),
                float(tracking.system_metrics_interval_s),
                node,
            ),
            self.metrics_relay(),
        ):
            yield

    def resume_tags(self, recorded: Mapping[str, str]) -> dict[str, str]:
        """Tags for a resumed run: one more restart (how, from where, and how the run had
        ended), and a layout change when there is one."""
        plan, before = self.plan, self.resumed.point.meta
        self.recorded_restarts = int(recorded.get("restarts", 0)) + 1
        ended = recorded.get(PREEMPTED_TAG) or recorded.get(DRIVER_LOST_TAG)
        restart = f"{self.resumed.how}: from {Path(self.resumed.point.checkpoint).name}"
        tags = {
            "resumed_in": str(self.run_dir),
            "run_dir": str(self.run_dir),
            **driver_tags(),
            **slurm_tags(),
            "restarts": str(self.recorded_restarts),
            f"restart.{self.recorded_restarts}": f"{restart}; {ended}" if ended else restart,
        }
        if (before.world_size, before.global_batch_size) != (
            plan.world_size,
            plan.global_batch_size,
        ):
            tags["resume.layout_change"] = (
                f"{before.world_size} ranks, global batch {before.global_batch_size} -> "
                f"{plan.world_size} ranks, global batch {plan.global_batch_size}; "
                f"LR {plan.scaled_lr:g}, restarting at step {plan.initial_step}"
            )
            print(f"tntrun: resuming with a new layout: {tags['resume.layout_change']}")
        return tags

    def end(self, status: str, stalled: str | None) -> None:
        """Stop what still runs, attach the outputs and end the tracked run (never RUNNING
        while the store answers: :meth:`settle`)."""
        job = getattr(self, "job", None)
        abandoned = self.session is not None and self.session.abandoned  # its thread ends it
        tracked = bool(self.tracker.run_id or self.deferred) and not abandoned
        try:
            if job is not None:
                job.stop()
            if tracked:
                write_schedule_chart(self.plan, self.run_dir / run_files.LR_PLOT)  # after the run
        finally:
            if tracked:
                self.settle(status, stalled)

    def settle(self, status: str, stalled: str | None) -> None:
        """Deliver the rest (metrics, outputs) and set the final status, retrying through an
        outage of the store for ``tracking.outage_grace_s``; then leave what is still pending
        in the run directory for ``tntrun sync``."""
        tracker, run_dir = self.tracker, self.run_dir
        relay = self.relay or MetricsRelay(run_dir / run_files.METRICS, self.send_metrics)
        prefix = self.prefix or (f"resumed-{run_dir.name}" if self.resumed else None)
        delivery = Delivery(tracker, run_dir, relay, status, stalled, prefix, self.open_deferred)
        grace = float(self.cfg.tracking.get("outage_grace_s", 60.0))
        waiting = relay.failure is not None or self.deferred
        if waiting:
            print(
                f"tntrun: waiting up to {grace:g} s (tracking.outage_grace_s) for "
                f"{tracker.store} to take the rest of the run",
                file=sys.stderr,
                flush=True,
            )
        error = delivery.within(grace)
        if error is None:
            if waiting:
                print(
                    f"tntrun: the tracking store {tracker.store} answers again; metrics, "
                    f"outputs and status {status} delivered",
                    file=sys.stderr,
                    flush=True,
                )
            return
        never_opened = not tracker.run_id
        self.pending = Pending(
            tracker.store,
            status,
            tracker.run_id,
            relay.offset,
            params_logged=not self.deferred,
            outputs_logged=delivery.outputs_logged,
            stalled=stalled,
            prefix=prefix,
            run_name=self.cfg.tracking.run_name or self.default_run_name(),
            parent_run_id=self.exp.parent_run_id,
            reason=describe(error),
            tags=start_tags(
                self.plan,
                run_dir,
                list(self.exp.overrides),
                dict(self.exp.choices),
                problem_hash(self.cfg),
            )
            if never_opened
            else None,
        )
        self.pending.save(run_dir)

    def report(self, status: str) -> RunResult:
        """Print the run's outcome and return it with its final metrics."""
        tracker = self.tracker
        abandoned = self.session is not None and self.session.abandoned
        if abandoned or (not tracker.run_id and self.pending is None):
            return RunResult(
                "KILLED", EXIT_INTERRUPTED, self.run_dir, tracker.run_id, plan=self.plan
            )
        pending = self.pending  # the store was unreachable: the final metrics from the file
        metrics = last_values(self.run_dir / run_files.METRICS) if pending else tracker.metrics()
        print()
        print(f"tntrun: run {status}")
        for key in SHOWN_METRICS:
            if key in metrics:
                print(f"tntrun: final {key}: {metrics[key]:.4f}")
        if tracker.run_id:
            print(f"tntrun: {tracker.label} run id: {tracker.run_id}")
        print(f"tntrun: run directory: {self.run_dir}")
        if pending:  # the training's outcome stands; its record waits for `tntrun sync`
            print(sync_line(tracker.store, self.run_dir), flush=True)
            code = EXIT_TRACKING_PENDING if status == "FINISHED" else 1
            return RunResult(status, code, self.run_dir, tracker.run_id, metrics, plan=self.plan)
        print(f"tntrun: open the {tracker.label} UI with: {shlex.join(tracker.ui_command())}")
        print(f"tntrun: the run in it: {tracker.ui_url()}")
        code = 0 if status == "FINISHED" else 1
        return RunResult(status, code, self.run_dir, tracker.run_id, metrics, plan=self.plan)
