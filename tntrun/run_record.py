"""What the driver records on a run's MLflow entry besides params: tags and artifacts."""

from __future__ import annotations

import socket
from collections.abc import Mapping
from pathlib import Path

from tntrun.checkpoints import latest_checkpoint
from tntrun.plan import Plan
from tntrun.provenance import git_tags, horovod_build, versions
from tntrun.rank_logs import find_failure
from tntrun.tracking import RunTracker

LOG_DIR = "logs"
OUTPUT_ARTIFACTS = ("model.keras", "horovod_timeline.json", "horovod_autotune.csv",
                    "lr_schedule.png")  # fmt: skip


def start_tags(
    plan: Plan, run_dir: Path, overrides: list[str], choices: Mapping[str, str]
) -> dict[str, str]:
    """Tags known before launch: code, versions, layout, how it was started."""
    return {
        **git_tags(Path.cwd()),
        **versions(),
        **horovod_build(),  # also with launcher=srun, whose command is not horovodrun
        "world_size": str(plan.world_size),
        "hosts": ",".join(f"{host}:{slots}" for host, slots in plan.hosts),
        "driver_host": socket.gethostname(),
        "launch_command": " ".join(plan.launch_command),
        "run_dir": str(run_dir),
        "hydra.overrides": " ".join(overrides),
        **{f"choice.{group}": str(option) for group, option in choices.items()},
    }


def record_outputs(
    tracker: RunTracker, run_dir: Path, status: str, prefix: str | None, stalled: str | None = None
) -> None:
    """Attach the run's outputs and, for a failed run, why it failed (traceback or stall)."""

    def path(name: str) -> str | None:
        return f"{prefix}/{name}" if prefix else name

    for name in ("config.yaml", "plan.json", *OUTPUT_ARTIFACTS):
        if (run_dir / name).exists():
            tracker.log_artifact(run_dir / name, prefix)
    folders = ((".hydra", "hydra"), (LOG_DIR, LOG_DIR), ("translations",) * 2,
               ("scaling_prediction",) * 2)  # fmt: skip
    for folder, name in folders:
        if (run_dir / folder).is_dir():
            tracker.log_artifact(run_dir / folder, path(name))
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is not None:
        tracker.log_artifact(checkpoint, path(f"checkpoint/{checkpoint.name}"))
    if stalled:
        tracker.set_tag("failure.stalled", stalled)
    elif status == "FAILED":
        failure = find_failure(run_dir / LOG_DIR)
        if failure is not None:
            report = run_dir / f"traceback_rank_{failure.rank}.txt"
            report.write_text(failure.traceback)
            tracker.log_artifact(report, prefix)
            tracker.set_tag("failure.rank", str(failure.rank))
            tracker.set_tag("failure.last_lines", failure.last_lines[:5000])
