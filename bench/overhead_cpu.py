"""Whole-process CPU time of tntrun's default experiment against a hand-written script.

    .venv/bin/python bench/overhead_cpu.py [--repeats 5] [--variants]

Both train the default experiment's problem: MLP 128-64 on digits, global
batch 64 on 2 ranks (horovodrun, Gloo, localhost), Adam, 20 epochs, validation
after each epoch, the trained model saved. tntrun runs as a user runs it
(`tntrun`, nothing turned off: MLflow store, system metrics, checkpoints, LR
chart, final weights); the script is bench/handwritten_horovod.py --validate
--save. CPU time is user + system of everything started (driver, horovodrun,
ranks: the children's rusage, which sums every waited-for descendant).
``--variants`` adds tntrun with one part turned off (what each part costs) and
the script ending its ranks as tntrun's do (--exit-now: no interpreter teardown).
Interleaved, medians and ratios of medians.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
ENV_FLAGS = {"TF_CPP_MIN_LOG_LEVEL": "3", "TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1"}
VARIANTS = {
    "tntrun (default experiment)": (),
    "  without system metrics": ("tracking.system_metrics=false",),
    "  without checkpoints": ("checkpoint.every_epochs=0",),
    "  without the weight-sync check": ("train.check_sync_every_epochs=0",),
}


def measured(command: list[str], cwd: Path) -> tuple[float, float]:
    """(CPU seconds of the command and its descendants, wall seconds)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **ENV_FLAGS})  # fmt: skip
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--variants", action="store_true", help="also the tntrun variants")
    args = parser.parse_args()
    chosen = VARIANTS if args.variants else dict(list(VARIANTS.items())[:1])
    results: dict[str, list[tuple[float, float]]] = {"handwritten": []}
    results.update({name: [] for name in chosen})
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)  # one store for all runs, as in everyday use
        script = [str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                  sys.executable, str(ROOT / "bench" / "handwritten_horovod.py"),
                  "--epochs", str(args.epochs), "--validate", "--save", tmp]  # fmt: skip
        for _ in range(args.repeats):
            results["handwritten"].append(measured(script, work))
            if args.variants:
                results.setdefault("handwritten, ending as tntrun's ranks do", []).append(
                    measured([*script, "--exit-now"], work)
                )
            for name, overrides in chosen.items():
                command = [str(BIN / "tntrun"), f"train.epochs={args.epochs}", *overrides]
                results[name].append(measured(command, work))
    base_cpu = statistics.median(cpu for cpu, _ in results["handwritten"])
    base_wall = statistics.median(wall for _, wall in results["handwritten"])
    print("| variant | CPU s (median) | wall s (median) | CPU / handwritten | wall / handwritten "
          "| n |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for name, rows in results.items():
        cpu = statistics.median(c for c, _ in rows)
        wall = statistics.median(w for _, w in rows)
        print(f"| {name} | {cpu:.2f} | {wall:.2f} | {cpu / base_cpu:.3f} | "
              f"{wall / base_wall:.3f} | {len(rows)} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
