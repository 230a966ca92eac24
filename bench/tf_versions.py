"""The same tntrun on two TensorFlow versions: each environment's own tntrun, interleaved.

    .venv/bin/python bench/tf_versions.py --env tf2.21=.venv --env tf2.18=.venv-tf2.18 \\
        [--repeats 3] [--cnn-epochs 5]

Each environment is one made by scripts/setup_env.sh (``make compat-tf2.18`` makes the
TensorFlow 2.18.1 one): its TensorFlow, its Keras 3 and its own patched Horovod build. Per
repeat (the order of the environments rotates) and environment, two runs on 2 ranks
(horovodrun, Gloo, localhost):

- the default experiment as a user runs it (``tntrun``: MLP on digits, 20 epochs, nothing
  turned off): wall time of the ``tntrun`` process, CPU time of everything it started (the
  children's rusage: driver, horovodrun, ranks), the MLP's steady step time
  (``steady_step_time_ms``: wall per step, epochs after the first) and the rank start-up
  (``startup_s``: the driver process's start to rank 0's first training step);
- ``tntrun model=cnn`` quiet (no system metrics, checkpoints or step metrics), for the
  cnn's steady step time.

Medians per environment and ratios of medians against the first environment named.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from runs import QUIET, finished_run, timed_tntrun

KEYS = {
    "wall_s": "default run wall s",
    "cpu_s": "default run CPU s",
    "mlp_step_ms": "mlp step ms",
    "cnn_step_ms": "cnn step ms",
    "startup_s": "rank start-up s",
}


def measure(venv: Path, work: Path, cnn_epochs: int) -> dict[str, float]:
    tntrun = venv / "bin" / "tntrun"
    wall, cpu, out = timed_tntrun(tntrun, work)
    client, run_id = finished_run(work, out)
    metrics = client.get_run(run_id).data.metrics
    _, _, out = timed_tntrun(tntrun, work, "model=cnn", f"train.epochs={cnn_epochs}", *QUIET)
    client, run_id = finished_run(work, out)
    cnn = client.get_run(run_id).data.metrics
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "mlp_step_ms": metrics["steady_step_time_ms"],
        "cnn_step_ms": cnn["steady_step_time_ms"],
        "startup_s": metrics["startup_s"],
    }


def versions(venv: Path) -> str:
    """What ``venv`` holds: TensorFlow, Keras and Python versions."""
    probe = "import sys, keras, tensorflow as t; print(t.__version__, keras.version(), sys.version)"
    found = subprocess.run(
        [str(venv / "bin" / "python"), "-c", probe],
        capture_output=True,
        text=True,
        env={"TF_CPP_MIN_LOG_LEVEL": "3", "KERAS_BACKEND": "tensorflow"},
    ).stdout.split()
    return f"TensorFlow {found[0]}, Keras {found[1]}, Python {found[2]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", action="append", required=True, help="NAME=VENV_DIR")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cnn-epochs", type=int, default=5)
    args = parser.parse_args()
    envs = {name: Path(path).resolve() for name, _, path in (e.partition("=") for e in args.env)}
    names = list(envs)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                work = Path(tmp) / name  # a store per environment, as each user has one
                work.mkdir(exist_ok=True)
                results[name].append(measure(envs[name], work, args.cnn_epochs))
                print(name, repeat, results[name][-1], file=sys.stderr, flush=True)
    report(envs, results)


def report(envs: dict[str, Path], results: dict[str, list[dict[str, float]]]) -> None:
    for name, venv in envs.items():
        print(f"- {name}: {versions(venv)}")
    names = list(envs)
    print(f"\n| environment | {' | '.join(KEYS.values())} | n |")
    print(f"|---|{'---|' * len(KEYS)}---|")
    medians = {
        name: {key: statistics.median(row[key] for row in rows) for key in KEYS}
        for name, rows in results.items()
    }
    for name in names:
        cells = " | ".join(f"{medians[name][k]:.3f}" for k in KEYS)
        print(f"| {name} | {cells} | {len(results[name])} |")
    base = names[0]
    for name in names[1:]:
        ratios = ", ".join(f"{KEYS[k]} {medians[base][k] / medians[name][k]:.3f}" for k in KEYS)
        print(f"\n{base} / {name}: {ratios}")


if __name__ == "__main__":
    main()
