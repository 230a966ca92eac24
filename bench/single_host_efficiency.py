"""Data parallelism on one host: 2 ranks x 1 thread versus 1 rank x 2 threads.

    .venv/bin/python bench/single_host_efficiency.py [--repeats 3] [--epochs 3]
        [--models cnn resnet18]

Same global batch (64), same synthetic 32x32x3 images, models `cnn` and
`resnet18` (small stem); the plan's thread split. Steady-state throughput
(epochs after the first) from each run's MLflow metrics, variants interleaved;
ratio = median(2 x 1) / median(1 x 2). Target: >= 0.95.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from runs import run_metrics

LAYOUTS = {"1 rank x 2 threads": ("ranks_per_node=1", "threads_per_rank=2"),
           "2 ranks x 1 thread": ("ranks_per_node=2", "threads_per_rank=1")}  # fmt: skip
MODELS = {
    "cnn": ("model=cnn",),
    # 1024 training images: its steps take seconds on this machine.
    "resnet18": ("model=resnet18", "model.stem=small", "dataset.num_train=1024"),
}


def throughput(work: Path, args: tuple[str, ...]) -> float:
    metrics = run_metrics(work, "dataset=synthetic_images", "optimizer=sgd", *args)
    return metrics["steady_samples_per_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--models", nargs="+", choices=list(MODELS), default=list(MODELS))
    args = parser.parse_args()
    print("| model | 1 rank x 2 threads samples/s | 2 ranks x 1 thread samples/s | ratio | n |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            model_args = MODELS[model]
            found: dict[str, list[float]] = {name: [] for name in LAYOUTS}
            for i in range(args.repeats):
                for name, layout in LAYOUTS.items():
                    work = Path(tmp) / f"{model}-{i}-{name[0]}"
                    work.mkdir()
                    found[name].append(throughput(
                        work, (*model_args, *layout, f"train.epochs={args.epochs}")
                    ))  # fmt: skip
            one, two = (statistics.median(v) for v in found.values())
            print(f"| {model} | {one:.0f} | {two:.0f} | {two / one:.3f} | {args.repeats} |")


if __name__ == "__main__":
    main()
