"""Running ``tntrun`` from a benchmark: one quiet run, its MLflow run read back."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

BIN = Path(sys.executable).parent
# Per-epoch and background costs a benchmark of steady throughput leaves out.
QUIET = ("tracking.system_metrics=false", "checkpoint.every_epochs=0", "tracking.log_every_steps=0")


def tntrun_command(work: Path, *overrides: str) -> list[str]:
    """The ``tntrun`` command line of a quiet run with its outputs and store in ``work``."""
    return [str(BIN / "tntrun"), *overrides, *QUIET, f"output_root={work}"]


def finished_run(work: Path, stdout: str):
    """(store client, run id) of the run whose ``tntrun`` output is ``stdout``."""
    from mlflow.tracking import MlflowClient

    run_id = next(ln.rsplit(" ", 1)[1] for ln in stdout.splitlines() if "MLflow run id:" in ln)
    return MlflowClient(f"sqlite:///{work / 'mlflow.db'}"), run_id


def run_tntrun(work: Path, *overrides: str, prefix: Sequence[str] = ()):
    """Run ``tntrun`` (after ``prefix``, e.g. ``taskset -c 0``) with its outputs and MLflow
    store in ``work``; (store client, run id)."""
    out = subprocess.run(
        [*prefix, *tntrun_command(work, *overrides)],
        cwd=work,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return finished_run(work, out)


def run_metrics(work: Path, *overrides: str) -> dict[str, float]:
    """The final metrics of one ``tntrun`` run."""
    client, run_id = run_tntrun(work, *overrides)
    return client.get_run(run_id).data.metrics


def children_cpu() -> float:
    """CPU seconds of this process's ended children (a run's driver and ranks, once waited)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed_tntrun(tntrun: Path, work: Path, *overrides: str) -> tuple[float, float, str]:
    """Wall and CPU seconds of one run of the ``tntrun`` command ``tntrun`` (outputs and
    store in ``work``), and its stdout; a failed run raises with the end of its output."""
    command = [str(tntrun), *overrides, f"output_root={work}"]
    cpu, start = children_cpu(), time.monotonic()
    done = subprocess.run(command, cwd=work, capture_output=True, text=True)
    wall, cpu = time.monotonic() - start, children_cpu() - cpu
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    return wall, cpu, done.stdout
