"""tntrun versus the hand-written Horovod scripts: steady-state step time and start-up.

    .venv/bin/python bench/overhead.py [--repeats 5] [--epochs 20] [--model mlp|cnn]

Three variants run the same model, data and global batch on 2 ranks (horovodrun,
Gloo, localhost), interleaved `repeats` times (the order rotates each repeat):
tntrun (`--model mlp`: the default experiment; `cnn`: `tntrun model=cnn`, the
same digits and global batch 64), the tf_keras script with Horovod's
DistributedOptimizer (bench/handwritten_horovod.py, TF_USE_LEGACY_KERAS=1) and
the Keras 3 script averaging with horovod.tensorflow collectives
(bench/handwritten_keras3.py, KERAS_BACKEND=tensorflow, TF_USE_LEGACY_KERAS
unset). Step time, epochs after the first: wall time per step (tntrun's
`steady_step_time_ms`) and the median step from batch begin to batch end
(tntrun's per-epoch `step_time_p50_ms`, median over epochs), which leaves out
per-epoch work and is less noisy. Time to first step: tntrun's `startup_s` (from
the driver process's start to rank 0's first step); a script's from the moment
horovodrun is started. Ratios of medians are reported, tntrun against each
script and against the faster of the two (targets: step time ratio <= 1.02,
time to first step <= +1 s).
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

from runs import run_tntrun

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
ENV_FLAGS = {"TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
# Each hand-written script and the Keras it runs under (TF_USE_LEGACY_KERAS is unset first).
SCRIPTS = {
    "handwritten tf_keras": ("handwritten_horovod.py", {"TF_USE_LEGACY_KERAS": "1"}),
    "handwritten Keras 3": ("handwritten_keras3.py", {"KERAS_BACKEND": "tensorflow"}),
}
KEYS = ("steady_step_time_ms", "step_p50_ms", "time_to_first_step_s")
HOROVODRUN = [str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2"]


def script_env(extra: dict[str, str]) -> dict[str, str]:
    """The benchmark's environment without TF_USE_LEGACY_KERAS, then the flags and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    return {**env, **ENV_FLAGS, **extra}


def handwritten(name: str, epochs: int, model: str) -> dict[str, float]:
    script, keras_env = SCRIPTS[name]
    options = ["--epochs", str(epochs), "--model", model]
    command = [*HOROVODRUN, sys.executable, str(ROOT / "bench" / script), *options]
    launched = time.time()
    done = subprocess.run(command, capture_output=True, text=True, env=script_env(keras_env))
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    line = next(ln for ln in done.stdout.splitlines() if "steady_step_time_ms" in ln)
    found = json.loads(line[line.index("{") :])
    return {
        "steady_step_time_ms": found["steady_step_time_ms"],
        "step_p50_ms": found["step_p50_ms"],
        "time_to_first_step_s": found["first_step_at"] - launched,
    }


def with_tntrun(epochs: int, model: str, work: Path) -> dict[str, float]:
    overrides = [f"train.epochs={epochs}", *([f"model={model}"] if model != "mlp" else [])]
    try:
        client, run_id = run_tntrun(work, *overrides)
    except subprocess.CalledProcessError as err:
        raise RuntimeError(f"tntrun failed:\n{err.stdout[-3000:]}{err.stderr[-3000:]}") from err
    metrics = client.get_run(run_id).data.metrics
    # Per-epoch median step (batch begin to end), epochs after the first.
    p50 = [m.value for m in client.get_metric_history(run_id, "step_time_p50_ms") if m.step >= 1]
    # startup_s: from the driver's process start to rank 0's first training step.
    return {
        "steady_step_time_ms": metrics["steady_step_time_ms"],
        "step_p50_ms": statistics.median(p50),
        "time_to_first_step_s": metrics["startup_s"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    args = parser.parse_args()
    names = ["tntrun", *SCRIPTS]
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)  # one store for all runs, as in everyday use
        for repeat in range(args.repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                if name == "tntrun":
                    results[name].append(with_tntrun(args.epochs, args.model, work))
                else:
                    results[name].append(handwritten(name, args.epochs, args.model))
    print(f"model: {args.model}, {args.epochs} epochs, 2 ranks\n")
    print(
        "| variant | median step ms (wall per step) | median p50 step ms "
        "| median time to first step s | n |"
    )
    print("|---|---|---|---|---|")
    medians = {}
    for name, rows in results.items():
        found = [statistics.median(r[key] for r in rows) for key in KEYS]
        medians[name] = dict(zip(KEYS, found, strict=True))
        print(f"| {name} | {found[0]:.3f} | {found[1]:.3f} | {found[2]:.2f} | {len(rows)} |")
    print()
    for key, label in (("steady_step_time_ms", "wall"), ("step_p50_ms", "p50")):
        ratios = {name: medians["tntrun"][key] / medians[name][key] for name in SCRIPTS}
        faster = min(SCRIPTS, key=lambda name: medians[name][key])
        each = ", ".join(f"/ {name} {ratio:.3f}" for name, ratio in ratios.items())
        print(
            f"step time ({label}) tntrun {each}; / the faster ({faster}) "
            f"{ratios[faster]:.3f} (target <= 1.02)"
        )
    key = "time_to_first_step_s"
    gaps = {name: medians["tntrun"][key] - medians[name][key] for name in SCRIPTS}
    faster = min(SCRIPTS, key=lambda name: medians[name][key])
    each = ", ".join(f"- {name} {gap:+.2f} s" for name, gap in gaps.items())
    print(
        f"time to first step tntrun {each}; - the faster ({faster}) {gaps[faster]:+.2f} s "
        "(target <= +1 s)"
    )


if __name__ == "__main__":
    main()
