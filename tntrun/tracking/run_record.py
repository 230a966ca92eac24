"""What the driver records on a run's MLflow entry besides params: tags and artifacts."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.checkpoints import best_checkpoint, latest_checkpoint
from tntrun.contract.rank_logs import find_failure
from tntrun.contract.run_status import RunStatus
from tntrun.planning.machine import versions
from tntrun.planning.plan import Plan
from tntrun.tracking import Tracker
from tntrun.tracking.provenance import git_tags, horovod_build, source_tags
from tntrun.tracking.run_advice import advice_tags

PREEMPTED_TAG = "preempted"


def start_tags(
    plan: Plan,
    run_dir: Path,
    overrides: list[str],
    choices: Mapping[str, str],
    problem: str,
    launch_tags: Mapping[str, str],
) -> dict[str, str]:
    """Tags known before launch: code, versions, layout, how it was started, and the hash
    of the training problem (``problem``: ``resume=auto`` finds unfinished runs by it).
    ``launch_tags``: the driver's (a later command tells if it is gone) and the cluster
    job's (a requeued job finds its run by them)."""
    return {
        **git_tags(Path.cwd()),
        **source_tags(),  # mlflow.source.name/type, mlflow.user, command
        **versions(),
        **horovod_build(),  # also with launcher=srun, whose command is not horovodrun
        **start_layout_tags(plan),
        **launch_tags,
        "run_dir": str(run_dir),
        "config_hash": problem,
        "hydra.overrides": " ".join(overrides),
        **{f"choice.{group}": str(option) for group, option in choices.items()},
    }


def start_layout_tags(plan: Plan) -> dict[str, str]:
    """Where the ranks run: set on a new run, and anew when a resumption changes the layout."""
    return {
        "world_size": str(plan.world_size),
        "hosts": ",".join(f"{host}:{slots}" for host, slots in plan.hosts),
        "launch_command": " ".join(plan.launch_command),
    }


def record_outputs(
    tracker: Tracker,
    run_dir: Path,
    status: RunStatus,
    prefix: str | None,
    stalled: str | None = None,
    disk: str | None = None,
) -> None:
    """Attach the run's outputs, a finished run's batch advice and, for a failed run, why it
    failed (traceback, stall or a full disk)."""
    log_output_files(tracker, run_dir, prefix)
    log_checkpoints(tracker, run_dir, prefix)
    tags = {
        **nonfinite_tags(run_dir),
        **preemption_tags(run_dir),
        **stopped_early_tags(run_dir),
        **model_load_tags(run_dir),
        **advice_tags(run_dir, status),
    }
    for key, value in tags.items():
        tracker.set_tag(key, value)
    record_failure(tracker, run_dir, status, prefix, stalled, disk)


def artifact_path(prefix: str | None, name: str) -> str:
    """Where ``name`` goes among the run's artifacts (a resumed run's under its prefix)."""
    return f"{prefix}/{name}" if prefix else name


def log_output_files(tracker: Tracker, run_dir: Path, prefix: str | None) -> None:
    """The run directory's output files and folders that exist."""
    for name in run_files.OUTPUT_FILES:
        if (run_dir / name).exists():
            tracker.log_artifact(run_dir / name, prefix)
    for folder, name in run_files.OUTPUT_FOLDERS:
        if (run_dir / folder).is_dir():
            tracker.log_artifact(run_dir / folder, artifact_path(prefix, name))


def log_checkpoints(tracker: Tracker, run_dir: Path, prefix: str | None) -> None:
    """The newest checkpoint, and the best one with its epoch and monitored value."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None:
        tracker.log_artifact(checkpoint, artifact_path(prefix, f"checkpoint/{checkpoint.name}"))
    best = best_checkpoint(run_dir)
    if best is not None:
        folder, found = best
        tracker.log_artifact(folder, artifact_path(prefix, "best"))
        tracker.set_tag("best.epoch", str(found["epoch"]))
        tracker.set_tag(f"best.{found['monitor']}", f"{found['value']:.6g}")


def record_failure(
    tracker: Tracker,
    run_dir: Path,
    status: RunStatus,
    prefix: str | None,
    stalled: str | None,
    disk: str | None,
) -> None:
    """Why the run failed, as tags (and the failing rank's traceback as an artifact): the
    stall, a full disk, the loss set-up, else the first rank's exception."""
    loss_setup = run_dir / run_files.LOSS_SETUP
    if stalled:
        tracker.set_tag("failure.stalled", stalled)
    elif disk:  # nothing more is written there: the ranks' logs are as far as they got
        tracker.set_tag("failure.disk", disk[:5000])
    elif status == RunStatus.FAILED and loss_setup.is_file():
        tracker.set_tag("failure.loss_setup", loss_setup.read_text().strip()[:5000])
    elif status == RunStatus.FAILED:
        failure = find_failure(run_dir / run_files.LOGS)
        if failure is not None:
            report = run_dir / run_files.traceback_file(failure.rank)
            with contextlib.suppress(OSError):  # a full disk: the tags below say it all the same
                report.write_text(failure.traceback)
                tracker.log_artifact(report, prefix)
            tracker.set_tag("failure.rank", str(failure.rank))
            tracker.set_tag("failure.last_lines", failure.last_lines[:5000])


def failure_reason(run_dir: Path, stalled: str | None) -> str | None:
    """A failed run's reason in one line: the stall, the non-finite loss or data, or the
    exception of the rank that failed first."""
    if stalled:
        return f"stalled: {stalled}"
    reason = nonfinite_tags(run_dir).get("failure.nonfinite")
    if reason:
        return reason
    loss_setup = run_dir / run_files.LOSS_SETUP
    if loss_setup.is_file():
        return loss_setup.read_text().strip()
    failure = find_failure(run_dir / run_files.LOGS)
    return failure.reason if failure is not None else None


def nonfinite_tags(run_dir: Path) -> dict[str, str]:
    """Tags from rank 0's non-finite loss events: each rollback, and the failure if any."""
    events_file = run_dir / run_files.NONFINITE
    if not events_file.is_file():
        return {}
    tags = {}
    events = [json.loads(line) for line in events_file.read_text().splitlines() if line]
    for event in events:
        where = event.get("reason") or (  # recorded by an older tntrun: no reason
            f"loss became {event['loss']} at epoch {event['epoch']}, step {event['step']}"
        )
        if event["action"] == "rollback":
            tags[f"rollback.{event['rollback']}"] = (
                f"{where}: restored {event['restored']}, LR x{event['lr_scale']:g}"
            )
        else:
            tags["failure.nonfinite"] = where
    rollbacks = sum(event["action"] == "rollback" for event in events)
    tags["rollbacks"] = str(rollbacks)
    return tags


def model_load_tags(run_dir: Path) -> dict[str, str]:
    """``model_loads`` (true/false) and ``model_load_error`` from rank 0's load-back check
    of the logged final model (tracking.check_model_loads)."""
    path = run_dir / run_files.MODEL_LOADS
    if not path.is_file():
        return {}
    record = json.loads(path.read_text())
    tags = {"model_loads": str(bool(record["loads"])).lower()}
    if record.get("error"):
        tags["model_load_error"] = str(record["error"])[:5000]
    return tags


def stopped_early_tags(run_dir: Path) -> dict[str, str]:
    """The ``stopped_early`` tag from rank 0's record: a callback stopped training after an
    epoch (EarlyStopping, ...) or inside one (``, step S``), every rank with it."""
    path = run_dir / run_files.STOPPED_EARLY
    if not path.is_file():
        return {}
    record = json.loads(path.read_text())
    step = f", step {record['step']}" if "step" in record else ""
    return {"stopped_early": f"epoch {record['epoch']} of {record['epochs']}{step}"}


def preemption_tags(run_dir: Path) -> dict[str, str]:
    """The ``preempted`` tag from rank 0's record: why and where the ranks stopped."""
    path = run_dir / run_files.PREEMPTED
    if not path.is_file():
        return {}
    record = json.loads(path.read_text())
    return {
        PREEMPTED_TAG: (
            f"{record['why']}: stopped after step {record['step']} (epoch {record['epoch'] + 1}, "
            f"batch {record['batch']}); checkpoint {record['checkpoint']}"
        )
    }
