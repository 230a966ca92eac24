"""Whole-process CPU time of tntrun's default experiment against two hand-written scripts.

    .venv/bin/python bench/overhead_cpu.py [--repeats 5] [--variants]

All train the default experiment's problem: MLP 128-64 on digits, global
batch 64 on 2 ranks (horovodrun, Gloo, localhost), Adam, 20 epochs, validation
after each epoch, the trained model saved. tntrun runs as a user runs it
(`tntrun`, nothing turned off: MLflow store, system metrics, checkpoints, LR
chart, final weights); the scripts are bench/handwritten_horovod.py (tf_keras
and Horovod's DistributedOptimizer, TF_USE_LEGACY_KERAS=1) and
bench/handwritten_keras3.py (Keras 3 and horovod.tensorflow collectives,
KERAS_BACKEND=tensorflow, TF_USE_LEGACY_KERAS unset), both with --validate
--save. CPU time is user + system of everything started (driver, horovodrun,
ranks: the children's rusage, which sums every waited-for descendant).
``--variants`` adds tntrun with one part turned off (what each part costs) and
each script ending its ranks as tntrun's do (--exit-now: no interpreter teardown).
Interleaved (the order rotates each repeat), medians and ratios of medians:
against each script and against the one with less CPU (target: <= 1.05).
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
ENV_FLAGS = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
# Each hand-written script and the Keras it runs under (TF_USE_LEGACY_KERAS is unset first;
# tntrun's driver sets the ranks' Keras itself).
SCRIPTS = {
    "handwritten tf_keras": ("handwritten_horovod.py", {"TF_USE_LEGACY_KERAS": "1"}),
    "handwritten Keras 3": ("handwritten_keras3.py", {"KERAS_BACKEND": "tensorflow"}),
}
HOROVODRUN = [str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2"]
VARIANTS = {
    "tntrun (default experiment)": (),
    "  without system metrics": ("tracking.system_metrics=false",),
    "  without checkpoints": ("checkpoint.every_epochs=0",),
    "  without the weight-sync check": ("faults.check_sync_every_epochs=0",),
}


def measured(command: list[str], cwd: Path, extra_env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds of the command and its descendants, wall seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, env={**env, **ENV_FLAGS, **extra_env}
    )
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
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)  # one store for all runs, as in everyday use
        runs: dict[str, tuple[list[str], dict[str, str]]] = {}  # name -> (command, env)
        for name, (script, keras_env) in SCRIPTS.items():
            options = ["--epochs", str(args.epochs), "--validate", "--save", tmp]
            command = [*HOROVODRUN, sys.executable, str(ROOT / "bench" / script), *options]
            runs[name] = (command, keras_env)
            if args.variants:
                runs[f"{name}, ending as tntrun's ranks do"] = ([*command, "--exit-now"], keras_env)
        for name, overrides in chosen.items():
            runs[name] = ([str(BIN / "tntrun"), f"train.epochs={args.epochs}", *overrides], {})
        names = list(runs)
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in names}
        for repeat in range(args.repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                command, keras_env = runs[name]
                results[name].append(measured(command, work, keras_env))
    cpu = {name: statistics.median(c for c, _ in rows) for name, rows in results.items()}
    wall = {name: statistics.median(w for _, w in rows) for name, rows in results.items()}
    best = min(SCRIPTS, key=cpu.get)
    print(f"the hand-written script with less CPU: {best}\n")
    print(
        "| variant | CPU s (median) | wall s (median) | CPU / tf_keras script "
        "| CPU / Keras 3 script | CPU / less-CPU script | wall / less-CPU script | n |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name, rows in results.items():
        against = " | ".join(f"{cpu[name] / cpu[script]:.3f}" for script in (*SCRIPTS, best))
        print(
            f"| {name} | {cpu[name]:.2f} | {wall[name]:.2f} | {against} "
            f"| {wall[name] / wall[best]:.3f} | {len(rows)} |",
            flush=True,
        )
    tntrun = next(iter(chosen))
    print(f"\nCPU tntrun / {best}: {cpu[tntrun] / cpu[best]:.3f} (target <= 1.05)")


if __name__ == "__main__":
    main()
