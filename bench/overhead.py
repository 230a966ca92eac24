"""tntrun versus the hand-written Horovod script: steady-state step time and start-up.

    .venv/bin/python bench/overhead.py [--repeats 5] [--epochs 20]

Both run the same model, data and global batch on 2 ranks (horovodrun, Gloo,
localhost), interleaved A/B `repeats` times. Step time, epochs after the
first: wall time per step (tntrun's `steady_step_time_ms`) and the median
step from batch begin to batch end (tntrun's per-epoch `step_time_p50_ms`,
median over epochs), which leaves out per-epoch work and is less noisy.
Time to first step: tntrun's `startup_s` (from the driver process's start to
rank 0's first step); the script's from the moment horovodrun is started.
Ratios of medians are reported (target: step time ratio <= 1.02).
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

from runs import run_tntrun

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
            "step_p50_ms": found["step_p50_ms"],
            "time_to_first_step_s": found["first_step_at"] - launched}  # fmt: skip


def with_tntrun(epochs: int, work: Path) -> dict[str, float]:
    client, run_id = run_tntrun(work, f"train.epochs={epochs}")
    metrics = client.get_run(run_id).data.metrics
    # Per-epoch median step (batch begin to end), epochs after the first.
    p50 = [m.value for m in client.get_metric_history(run_id, "step_time_p50_ms") if m.step >= 1]
    # startup_s: from the driver's process start to rank 0's first training step.
    return {"steady_step_time_ms": metrics["steady_step_time_ms"],
            "step_p50_ms": statistics.median(p50),
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
    print("| variant | median step ms (wall per step) | median p50 step ms "
          "| median time to first step s | n |")  # fmt: skip
    print("|---|---|---|---|---|")
    medians = {}
    keys = ("steady_step_time_ms", "step_p50_ms", "time_to_first_step_s")
    for name, rows in results.items():
        found = [statistics.median(r[key] for r in rows) for key in keys]
        medians[name] = found
        print(f"| {name} | {found[0]:.3f} | {found[1]:.3f} | {found[2]:.2f} | {len(rows)} |")
    (hs, hp, hf), (ts, tp, tf) = medians["handwritten"], medians["tntrun"]
    print(f"\nstep time ratio tntrun/handwritten: wall {ts / hs:.3f}, p50 {tp / hp:.3f} "
          "(target <= 1.02)")  # fmt: skip
    print(f"start-up difference: {tf - hf:+.2f} s (target <= +1 s)")


if __name__ == "__main__":
    main()
