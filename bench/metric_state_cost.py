"""What summing the ranks' metric state costs against averaging their results (issue 41).

    .venv/bin/python bench/metric_state_cost.py [--repeats 4] [--epochs 8] [--base COMMIT]

Two variants of the same run, interleaved (the order alternates each repeat): tntrun as
checked out ("state": the ranks' metric state summed at each epoch's end and after each
validation, non-trainable weights averaged) and tntrun at ``--base`` ("results": each
rank's metric results averaged, weighted by its samples), the commit before
tntrun/engine/metric_state.py was added unless given: its ``tntrun`` package (with
``models/``, ``datasets/``, ``conf/`` mapped in as the installed package maps them) is
exported to a temporary folder put first on PYTHONPATH, for the driver and the ranks. So
the two differ by this change alone. Models: the default experiment (``tntrun``, MLP on
digits) and ``model=cnn``, 2 ranks, no system metrics, no checkpoints.

Then bench/metric_state_rank.py on 2 ranks times the reductions themselves (the
training metrics' epoch-end reduction now and before, the state sum alone), in
alternation, many times: precise where whole runs on a shared machine are noisy.

Per run, from rank 0's metrics stream (epochs after the first): the step time p50
(``step_time_p50_ms``), the whole epoch (the interval between two epochs' records: the
steps and all the epoch's end, validation included) and the epoch's end alone (that
interval minus ``epoch_time_s``, which leaves out the epoch-end callbacks). Printed:
medians per variant and the ratio state / results of the medians (target: step time 1.00).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
from io import BytesIO
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
RANK_SCRIPT = ROOT / "bench" / "metric_state_rank.py"
MODELS = {"default (MLP, digits)": (), "model=cnn": ("model=cnn",)}
COMMON = ("tracking.system_metrics=false", "checkpoint.every_epochs=0")
MAPPED = {  # source folder -> where the installed package has it
    "tntrun": "tntrun",
    "models": "tntrun/models",
    "datasets": "tntrun/datasets",
    "conf": "tntrun/conf",
}


def base_commit() -> str:
    """The commit before tntrun/engine/metric_state.py was added."""
    added = subprocess.run(
        ["git", "log", "--diff-filter=A", "--format=%H", "--", "tntrun/engine/metric_state.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return f"{added[-1]}^"


def export(commit: str, into: Path) -> Path:
    """``commit``'s package laid out as installed (conf/, models/, datasets/ inside)."""
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit, *MAPPED], cwd=ROOT, capture_output=True
    ).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        for member in tar.getmembers():
            top, _, rest = member.name.partition("/")
            member.name = f"{MAPPED[top]}/{rest}" if rest else MAPPED[top]
            tar.extract(member, into, filter="data")
    return into


def sums_state(env: dict[str, str], cwd: Path) -> bool:
    """Whether the tntrun that ``env`` imports sums metric state (the variant's check)."""
    spec = "importlib.util.find_spec('tntrun.engine.metric_state')"
    code = f"import importlib.util; print({spec} is not None)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True
    )
    return done.stdout.strip() == "True"


def run(work: Path, args: tuple[str, ...], env: dict[str, str]) -> dict[str, float]:
    """One tntrun run's medians (ms) over the epochs after the first."""
    command = [str(BIN / "tntrun"), *args, *COMMON, f"output_root={work / 'outputs'}"]
    done = subprocess.run(command, cwd=work, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}:\n{done.stdout[-3000:]}{done.stderr[-2000:]}")
    line = next(x for x in done.stdout.splitlines() if x.startswith("tntrun: run directory: "))
    records = [json.loads(x) for x in (Path(line.split(": ", 2)[2]) / "metrics.jsonl").open()]
    epochs = [r for r in records if "epoch_time_s" in r["metrics"]]
    whole = [(b["t"] - a["t"]) for a, b in zip(epochs, epochs[1:], strict=False)]
    inside = [1000 * e["metrics"]["epoch_time_s"] for e in epochs[1:]]
    return {
        "step_p50_ms": statistics.median(e["metrics"]["step_time_p50_ms"] for e in epochs[1:]),
        "epoch_ms": statistics.median(whole),
        "epoch_end_ms": statistics.median(w - i for w, i in zip(whole, inside, strict=True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--base", default=None, help="the commit of the 'results' variant")
    args = parser.parse_args()
    base = args.base or base_commit()
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"}
    env = {k: v for k, v in env.items() if not k.startswith(("MLFLOW_", "HOROVOD_"))}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        old = export(base, work / "base")
        envs = {"state": env, "results": {**env, "PYTHONPATH": str(old)}}
        assert sums_state(envs["state"], work) and not sums_state(envs["results"], work)
        seen: dict[tuple[str, str], list[dict[str, float]]] = {}
        for repeat in range(args.repeats):
            for model, extra in MODELS.items():
                order = list(envs) if repeat % 2 == 0 else list(envs)[::-1]
                for variant in order:
                    got = run(work, (*extra, f"train.epochs={args.epochs}"), envs[variant])
                    seen.setdefault((model, variant), []).append(got)
                    print(f"repeat {repeat} {model} {variant}: {got}", flush=True)
        report(seen, base)
        print("\nthe reductions alone (bench/metric_state_rank.py, 2 ranks):", flush=True)
        rank_part = [sys.executable, "-m", "tntrun.launch.horovodrun_command", "--gloo"]
        rank_part += ["-np", "2", "-H", "localhost:2", sys.executable, str(RANK_SCRIPT)]
        done = subprocess.run(rank_part, cwd=work, env=env, capture_output=True, text=True)
        print("\n".join(x for x in done.stdout.splitlines() if "median_ms" in x))


def report(seen: dict[tuple[str, str], list[dict[str, float]]], base: str) -> None:
    print(f"\nbase (results) = {base}; medians over runs of each run's medians")
    print("| model | measure | state | results | state / results |")
    print("|---|---|---|---|---|")
    for model in MODELS:
        for measure in ("step_p50_ms", "epoch_ms", "epoch_end_ms"):
            state, results = (
                statistics.median(r[measure] for r in seen[(model, v)])
                for v in ("state", "results")
            )
            print(f"| {model} | {measure} | {state:.2f} | {results:.2f} | {state / results:.3f} |")


if __name__ == "__main__":
    main()
