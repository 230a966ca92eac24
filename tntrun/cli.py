"""The ``tntrun`` command: a Hydra app that plans, tracks and launches a run.

This process is the driver. It never imports TensorFlow: it composes the
config, derives the plan, creates the MLflow run, starts the ranks with
``horovodrun`` and ends the run from their exit status.
"""

from __future__ import annotations

import os
import shlex
import signal
import socket
import sys
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from tntrun import preflight
from tntrun.clock import process_start_time
from tntrun.launch import RankJob, StallWatch
from tntrun.metrics_stream import METRICS_FILE, MetricsRelay
from tntrun.plan import Plan, PlanError, ResumePoint, build_plan
from tntrun.plan_view import plot_schedule, render_plan
from tntrun.provenance import versions
from tntrun.rank_logs import RankLogWriter
from tntrun.remote_hosts import preflight_hosts
from tntrun.resume import RUN_ID_FILE, ResumedRun, load_resumed_run
from tntrun.run_record import LOG_DIR, record_outputs, start_tags
from tntrun.schema import register
from tntrun.slurm import allocation_layout
from tntrun.sweep import sweep_parent
from tntrun.tracking import RunTracker, flatten, store_problems, tracking_uri
from tntrun.tracking_session import TrackingSession
from tntrun.ui import server_command
from tntrun.watchdog import HEARTBEATS
from tntrun.zoo import build_dataset, distributes_automatically

DRIVER_START = process_start_time()  # ranks report their first step relative to it
EXIT_CONFIG_ERROR = 2
NAN = float("nan")
register()


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _config_error(problems: list[str]) -> int:
    for problem in problems:
        print(f"tntrun: config error: {problem}", file=sys.stderr)
    return EXIT_CONFIG_ERROR


def plain_config(cfg: DictConfig, overrides: list[str]) -> dict[str, Any]:
    """The resolved config as plain data, with the user's batch intent applied.

    ``micro_batch_size`` or ``batch_tokens`` derive the global batch, so the
    config's default ``global_batch_size`` is dropped unless it was overridden too.
    Inside a Slurm allocation its nodes, tasks and GPUs per node fill the layout
    keys not given on the command line.
    """
    plain = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)
    given = {o.split("=", 1)[0].lstrip("+~") for o in overrides}
    derives_global = plain.get("micro_batch_size") is not None or plain.get("batch_tokens")
    if derives_global and "global_batch_size" not in given:
        plain["global_batch_size"] = None
    if not plain.get("hosts") and not plain.get("hostfile"):
        plain.update(allocation_layout(os.environ, given))
    return plain


def make_plan(
    cfg: DictConfig, overrides: list[str], run_dir: Path, resume: ResumePoint | None = None
) -> Plan:
    """Check the zoo targets, size the dataset and derive the plan (no TensorFlow)."""
    preflight.check_target("model", cfg.model._target_)
    preflight.check_target("dataset", cfg.dataset._target_)
    try:
        dataset = build_dataset(cfg.dataset)
    except Exception as err:  # a dataset's own argument check
        raise PlanError(f"dataset: {err.__cause__ or err}") from None
    if not distributes_automatically(cfg.dataset) and not hasattr(dataset, "load_for_rank"):
        raise PlanError(
            f"dataset.distribute=false needs a dataset with load_for_rank(); "
            f"{type(dataset).__name__} has none: set dataset.distribute=true"
        )
    return build_plan(
        plain_config(cfg, overrides),
        preflight.dataset_info(dataset),
        preflight.machine_facts(),
        run_dir,
        resume,
    )


def launcher_env(cfg: DictConfig, plan: Plan) -> AbstractContextManager[dict[str, str]]:
    """Extra variables the launcher needs: srun ranks meet at our rendezvous server."""
    if cfg.launcher == "srun":
        from tntrun.srun_rendezvous import rendezvous

        return rendezvous(plan, cfg.horovod.network_interface)
    return nullcontext({})


def check_remote_hosts(cfg: DictConfig, plan: Plan) -> None:
    """ssh into every remote host and compare versions before anything starts (horovodrun)."""
    if cfg.launcher != "horovodrun":
        return
    found = versions()
    hvd = cfg.horovod
    preflight_hosts(
        [host for host, _ in plan.hosts],
        sys.executable,  # the ranks' interpreter, at the same path on every host
        {name: found.get(f"version.{name}") for name in ("tntrun", "tensorflow", "horovod")},
        hvd.ssh_port, hvd.ssh_identity_file, int(hvd.start_timeout),
    )  # fmt: skip


def dry_run(cfg: DictConfig, plan: Plan, run_dir: Path) -> int:
    """Show the config, the plan and the launch command; start nothing."""
    print("== Config ==")
    print(OmegaConf.to_yaml(cfg, resolve=True))
    print(render_plan(plan))
    plot = plot_schedule(plan, run_dir / "lr_schedule.png")
    print(f"\nLR schedule plot: {plot}")
    print("dry run: nothing was launched and no MLflow run was created")
    return 0


def train(cfg: DictConfig) -> tuple[int, float]:
    """Plan, track and launch one run (or continue one).

    Returns the exit code and the value of ``tracking.objective`` (NaN when the
    run failed or did not log it), which sweepers such as Optuna optimise.
    """
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir).resolve()
    overrides = list(hydra_cfg.overrides.task)
    groups = [g for g in hydra_cfg.runtime.choices if not g.startswith("hydra/")]
    resumed = None
    try:
        if cfg.resume:
            uri = tracking_uri(cfg.tracking.uri, Path(cfg.output_root))
            resumed = load_resumed_run(
                cfg.resume, uri, overrides, groups, bool(cfg.resume_allow_layout_change)
            )
            cfg = resumed.config
        plan = make_plan(cfg, overrides, run_dir, resumed.point if resumed else None)
    except PlanError as err:
        return _config_error(err.problems), NAN
    if plan.stops_early:
        print(
            f"tntrun: note: train.epochs={plan.epochs} trains the first {plan.epochs} of the "
            f"schedule's {plan.schedule_epochs} epochs (schedule.epochs); the LR follows the "
            "full schedule and the run stops early",
            file=sys.stderr,
        )
    if cfg.dry_run:
        return dry_run(cfg, plan, run_dir), NAN

    output_root = Path(cfg.output_root)
    uri = tracking_uri(cfg.tracking.uri, output_root)
    problems = store_problems(uri)
    if problems:
        return _config_error(problems), NAN
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    plan.save(run_dir / "plan.json")
    print(
        f"tntrun: {plan.world_size} ranks on {', '.join(f'{h}:{s}' for h, s in plan.hosts)}; "
        f"global batch {plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size}; "
        f"{plan.steps_per_epoch} steps/epoch x {plan.epochs} epochs; lr {plan.scaled_lr:g}",
        flush=True,
    )
    status, stalled, unreachable = "FAILED", None, None
    job: RankJob | None = None
    session: TrackingSession | None = None
    tracker: RunTracker | None = None
    prefix: str | None = None

    def start_run() -> tuple[RunTracker, str | None]:
        found = RunTracker.for_experiment(  # imports MLflow: seconds
            uri, cfg.tracking.experiment_name, output_root / "mlartifacts"
        )
        return found, open_run(found, cfg, plan, run_dir, resumed, hydra_cfg, overrides, groups)

    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        with launcher_env(cfg, plan) as extra:
            try:
                check_remote_hosts(cfg, plan)  # before any rank starts
            except PlanError as err:
                unreachable = err.problems
                tracker, prefix = start_run()
                tracker.set_tag("failure.preflight", "\n".join(unreachable)[:5000])
            else:
                # The ranks start now and import TensorFlow; the driver sets up MLflow
                # meanwhile, in a lower-priority thread that leaves them the CPU.
                env = {**dict(plan.launch_env), **extra,
                       "TNTRUN_DRIVER_START": repr(DRIVER_START)}  # fmt: skip
                job = RankJob(plan.launch_command, env, run_dir / "ranks.log",
                              RankLogWriter(run_dir / LOG_DIR),
                              StallWatch(run_dir / HEARTBEATS, plan.world_size,
                                         cfg.train.stall_timeout_s))  # fmt: skip
                session = TrackingSession(
                    start_run, lambda found: relaying(found, cfg, plan, run_dir), job.terminate
                )
                try:
                    result = job.follow()
                finally:
                    session.close()  # re-raises a failure to create the run
                status, stalled = result.status, result.stalled
    except KeyboardInterrupt:
        status = "KILLED"
    finally:
        if session is not None and not session.abandoned:
            tracker, prefix = session.tracker, session.prefix
        try:
            if job is not None:
                job.stop()
            if tracker is not None and tracker.run_id:
                plot_schedule(plan, run_dir / "lr_schedule.png")  # after the run
                record_outputs(tracker, run_dir, status, prefix, stalled)
        finally:
            if tracker is not None and tracker.run_id:  # never left RUNNING
                tracker.finish(status)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)

    if unreachable:
        return _config_error(unreachable), NAN
    if tracker is None or not tracker.run_id:  # stopped before the MLflow run existed
        return 130, NAN
    metrics = _report(tracker, status, uri, run_dir)
    if status != "FINISHED":
        return 1, NAN
    return 0, float(metrics.get(cfg.tracking.objective, NAN))


def open_run(
    tracker: RunTracker, cfg: DictConfig, plan: Plan, run_dir: Path,
    resumed: ResumedRun | None, hydra_cfg: Any, overrides: list[str], groups: list[str],
) -> str | None:  # fmt: skip
    """Create the MLflow run (or reopen the resumed one) and log its params.

    Returns the artifact prefix (resumed runs keep their first outputs and add
    the new ones under ``resumed-<run dir name>``).
    """
    if resumed:
        run_id = tracker.reopen(resumed.mlflow_run_id, resume_tags(resumed, plan, run_dir))
        prefix = f"resumed-{run_dir.name}"
    else:
        choices = {g: str(hydra_cfg.runtime.choices[g]) for g in groups}
        tags = start_tags(plan, run_dir, overrides, choices)
        run_id = tracker.start(cfg.tracking.run_name, tags, parent_run_id=sweep_parent())
        prefix = None
    (run_dir / RUN_ID_FILE).write_text(run_id)
    if not resumed:
        params = dict(flatten(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)))
        params.update(plan.summary_params())
        tracker.log_params(params)
    print(f"tntrun: MLflow run {run_id} in {tracker.uri}", flush=True)
    return prefix


@contextmanager
def relaying(tracker: RunTracker, cfg: DictConfig, plan: Plan, run_dir: Path) -> Iterator[None]:
    """While the ranks run: rank 0's metrics and this node's system metrics into the run."""
    node = socket.gethostname() if plan.nodes > 1 else None
    with (
        tracker.system_metrics(cfg.tracking.system_metrics,
                               float(cfg.tracking.system_metrics_interval_s), node),
        MetricsRelay(run_dir / METRICS_FILE, tracker.log_metrics),
    ):  # fmt: skip
        yield


def resume_tags(resumed: ResumedRun, plan: Plan, run_dir: Path) -> dict[str, str]:
    """Tags for a resumed run, recording a layout change when there is one."""
    tags = {"resumed_in": str(run_dir)}
    before = resumed.point.meta
    if (before.world_size, before.global_batch_size) != (plan.world_size, plan.global_batch_size):
        tags["resume.layout_change"] = (
            f"{before.world_size} ranks, global batch {before.global_batch_size} -> "
            f"{plan.world_size} ranks, global batch {plan.global_batch_size}; "
            f"LR {plan.scaled_lr:g}, restarting at step {plan.initial_step}"
        )
        print(f"tntrun: resuming with a new layout: {tags['resume.layout_change']}")
    return tags


def _report(tracker: RunTracker, status: str, uri: str, run_dir: Path) -> dict[str, float]:
    """Print the run's outcome; return its final metrics."""
    metrics = tracker.metrics()
    print()
    print(f"tntrun: run {status}")
    for key in ("val_accuracy", "val_loss", "bleu", "bleu_uncased"):
        if key in metrics:
            print(f"tntrun: final {key}: {metrics[key]:.4f}")
    print(f"tntrun: MLflow run id: {tracker.run_id}")
    print(f"tntrun: run directory: {run_dir}")
    print(f"tntrun: open the MLflow UI with: {shlex.join(server_command(uri))}")
    return metrics


_failed_jobs: list[int] = []


@hydra.main(version_base="1.3", config_path="pkg://tntrun.conf", config_name="config")
def _hydra_entry(cfg: DictConfig) -> float:
    code, objective = train(cfg)
    if code and HydraConfig.get().mode == RunMode.RUN:
        sys.exit(code)
    if code:
        _failed_jobs.append(code)  # a sweep goes on with its other jobs
    return objective


def _subcommand(argv: list[str]) -> int | None:
    """Run ``tntrun report ...`` or ``tntrun ui ...``; None for a training command line."""
    if argv and argv[0] == "report":
        from tntrun.report import main as report

        return report(argv[1:])
    if argv and argv[0] == "ui":
        from tntrun.ui import main as ui

        return ui(argv[1:])
    return None


def main() -> None:
    """Console-script entry point; a sweep exits non-zero if any of its jobs failed."""
    code = _subcommand(sys.argv[1:])
    if code is not None:
        sys.exit(code)
    problems = preflight.unknown_group_choices(sys.argv[1:])
    if problems:
        sys.exit(_config_error(problems))
    _hydra_entry()
    if _failed_jobs:
        print(f"tntrun: {len(_failed_jobs)} sweep job(s) failed", file=sys.stderr)
        sys.exit(max(_failed_jobs))


if __name__ == "__main__":
    main()
