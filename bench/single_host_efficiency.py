"""Data parallelism on one host: 2 ranks x 1 thread versus 1 rank x 2 threads.

    .venv/bin/python bench/single_host_efficiency.py [--repeats 3] [--epochs 3]
        [--models cnn resnet18] [--knobs]

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

LAYOUTS = {
    "1 rank x 2 threads": ("ranks_per_node=1", "threads_per_rank=2"),
    "2 ranks x 1 thread": ("ranks_per_node=2", "threads_per_rank=1"),
}
# --knobs: the alternatives to the defaults, each against 1 rank x 2 threads.
KNOBS = {
    "2 ranks x 1 thread, horovod.cycle_time_ms=5": (
        *LAYOUTS["2 ranks x 1 thread"],
        "horovod.cycle_time_ms=5",
    ),
    "2 ranks x 1 thread, horovod.compression=fp16": (
        *LAYOUTS["2 ranks x 1 thread"],
        "horovod.compression=fp16",
    ),
    "2 ranks x 2 threads": ("ranks_per_node=2", "threads_per_rank=2"),
}
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
    parser.add_argument("--knobs", action="store_true", help="also run the KNOBS variants")
    args = parser.parse_args()
    variants = {**LAYOUTS, **(KNOBS if args.knobs else {})}
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models:
            found: dict[str, list[float]] = {name: [] for name in variants}
            for i in range(args.repeats):
                for v, (name, layout) in enumerate(variants.items()):
                    work = Path(tmp) / f"{model}-{i}-{v}"
                    work.mkdir()
                    found[name].append(
                        throughput(work, (*MODELS[model], *layout, f"train.epochs={args.epochs}"))
                    )
            rows.append((model, {name: statistics.median(v) for name, v in found.items()}))
    print("| model | 1 rank x 2 threads samples/s | 2 ranks x 1 thread samples/s | ratio | n |")
    print("|---|---|---|---|---|")
    for model, medians in rows:
        one, two = medians["1 rank x 2 threads"], medians["2 ranks x 1 thread"]
        print(f"| {model} | {one:.0f} | {two:.0f} | {two / one:.3f} | {args.repeats} |")
    if args.knobs:
        print("\n| model | variant | samples/s | ratio to 1 rank x 2 threads |")
        print("|---|---|---|---|")
        for model, medians in rows:
            for name in variants:
                ratio = medians[name] / medians["1 rank x 2 threads"]
                print(f"| {model} | {name} | {medians[name]:.0f} | {ratio:.3f} |")


if __name__ == "__main__":
    main()
