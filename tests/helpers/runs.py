"""What a finished run leaves: its run directory, its MLflow store, its final weights."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import numpy as np

# Training whose final weights do not depend on where its 2 ranks run (multi-host, Slurm).
DETERMINISTIC = (
    "deterministic=true",
    "train.epochs=2",
    "tracking.system_metrics=false",
    "model.dropout=0.0",
)


def store_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"


def run_dir_of(result: subprocess.CompletedProcess) -> Path:
    """The run directory a finished ``tntrun`` printed."""
    for line in result.stdout.splitlines():
        if line.startswith("tntrun: run directory: "):
            return Path(line.removeprefix("tntrun: run directory: "))
    raise AssertionError(f"no run directory in output:\n{result.stdout[-2000:]}")


def final_weights(result: subprocess.CompletedProcess) -> list[np.ndarray]:
    return weights_in(run_dir_of(result))


def weights_in(run_dir: Path) -> list[np.ndarray]:
    with np.load(run_dir / "final_weights.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def assert_same_weights(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


def wait_for_file(path: Path, process: subprocess.Popen, timeout_s: float, log: Path) -> None:
    """Wait until ``path`` exists, failing early, with the end of ``log``, if ``process`` ends."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            why = "the process ended" if process.returncode is not None else f"{timeout_s:g} s"
            raise AssertionError(f"no {path} ({why}):\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
