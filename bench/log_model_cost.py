"""What logging the model costs the default run: `tntrun` with tracking.log_model=true/false.

    .venv/bin/python bench/log_model_cost.py [--repeats 3]

The two variants run `repeats` times each, interleaved, the order alternating between
pairs (the machine's load drifts), each in a scratch directory with its own store. Per
run: the wall time of the whole `tntrun` process, and the time from rank 0's last
metrics line (written just before it saves the model) to the run's end in MLflow,
which holds the whole cost (rank 0's MLflow folder, the driver's logged model) without
the noise of start-up and training.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def timed_run(work: Path, override: str) -> tuple[float, float]:
    """(wall s, after-training s) of the default run with ``override``, in ``work``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HOROVOD_"))}
    start = time.perf_counter()
    subprocess.run(
        [str(BIN / "tntrun"), override, f"output_root={work}"],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - start, after_training(work)


def after_training(work: Path) -> float:
    """Seconds from rank 0's last metrics line to the run's end time in MLflow."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    metrics = Path(run.data.tags["run_dir"]) / "metrics.jsonl"
    last_line = json.loads(metrics.read_text().splitlines()[-1])
    return (run.info.end_time - last_line["t"]) / 1000


def one_run(work: Path, log_model: bool) -> tuple[float, float]:
    """(wall s, after-training s) of the default run."""
    return timed_run(work, f"tracking.log_model={str(log_model).lower()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    measured: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for pair in range(args.repeats):
        for log_model in (True, False) if pair % 2 == 0 else (False, True):
            with tempfile.TemporaryDirectory() as work:
                measured[log_model].append(one_run(Path(work), log_model))
    print("| tracking.log_model | wall s (runs) | median | after training s (runs) | median |")
    print("|---|---|---|---|---|")
    for log_model, runs in measured.items():
        walls, ends = [w for w, _ in runs], [e for _, e in runs]
        print(
            f"| {str(log_model).lower()} | {', '.join(f'{w:.1f}' for w in walls)} | "
            f"{statistics.median(walls):.1f} | {', '.join(f'{e:.2f}' for e in ends)} | "
            f"{statistics.median(ends):.2f} |"
        )


if __name__ == "__main__":
    main()
