"""tntrun versus the hand-written Horovod script: steady-state step time and start-up.

    .venv/bin/python bench/overhead.py [--repeats 5] [--epochs 20]

Both run the same model, data and global batch on 2 ranks (horovodrun, Gloo,
localhost), interleaved A/B `repeats` times. tntrun's figures come from its
MLflow run (steady_step_time_ms) and from wall time until its first step
(its `startup_s` metric: driver start to rank 0's first step); the script's
is measured from the moment horovodrun is started to its first step. Ratios of
medians are reported (target: step time ratio <= 1.02).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from runs import run_metrics

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
ENV_FLAGS = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1"}


def handwritten(epochs: int) -> dict[str, float]:
    import os

    launched = time.time()
    out = subprocess.run(
        [str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2", sys.executable,
         str(ROOT / "bench" / "handwritten_horovod.py"), "--epochs", str(epochs)],
        capture_output=True, text=True, check=True, env={**os.environ, **ENV_FLAGS},
    ).stdout  # fmt: skip
    line = next(ln for ln in out.splitlines() if "steady_step_time_ms" in ln)
    found = json.loads(line[line.index("{") :])
    return {"steady_step_time_ms": found["steady_step_time_ms"],
            "time_to_first_step_s": found["first_step_at"] - launched}  # fmt: skip


def with_tntrun(epochs: int, work: Path) -> dict[str, float]:
    metrics = run_metrics(work, f"train.epochs={epochs}")
    # startup_s: from the driver's start to rank 0's first training step.
    return {"steady_step_time_ms": metrics["steady_step_time_ms"],
            "time_to_first_step_s": metrics["startup_s"]}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {"handwritten": [], "tntrun": []}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)  # one store for all runs, as in everyday use
        for _ in range(args.repeats):
            results["handwritten"].append(handwritten(args.epochs))
            results["tntrun"].append(with_tntrun(args.epochs, work))
    print("| variant | median step ms | median time to first step s | n |")
    print("|---|---|---|---|")
    medians = {}
    for name, rows in results.items():
        step = statistics.median(r["steady_step_time_ms"] for r in rows)
        first = statistics.median(r["time_to_first_step_s"] for r in rows)
        medians[name] = (step, first)
        print(f"| {name} | {step:.3f} | {first:.2f} | {len(rows)} |")
    (hs, hf), (ts, tf) = medians["handwritten"], medians["tntrun"]
    print(f"\nstep time ratio tntrun/handwritten: {ts / hs:.3f} (target <= 1.02)")
    print(f"start-up difference: {tf - hf:+.2f} s (target <= +1 s)")


if __name__ == "__main__":
    main()
