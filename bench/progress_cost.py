"""What the in-epoch progress line costs: the default run's step time with it off, at its
default interval and printing every second, interleaved.

    .venv/bin/python bench/progress_cost.py [--repeats 3] [--epochs 20]

Each variant is the default experiment (MLP on digits, 2 ranks) run quiet (no system
metrics, checkpoints or step metrics, as bench/runs.py's QUIET) with
``train.progress_interval_s`` set; per run ``steady_step_time_ms`` (wall per step, epochs
after the first). The order of the variants rotates each repeat; medians, and their ratio to
the variant without progress lines.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from runs import run_metrics

VARIANTS = {"off (0)": "0", "default (30 s)": "30", "every 1 s": "1"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    names = list(VARIANTS)
    steps: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                metrics = run_metrics(
                    Path(tmp),
                    f"train.epochs={args.epochs}",
                    f"train.progress_interval_s={VARIANTS[name]}",
                )
                steps[name].append(metrics["steady_step_time_ms"])
    base = statistics.median(steps[names[0]])
    print("| train.progress_interval_s | median step ms | / off | n |")
    print("|---|---|---|---|")
    for name in names:
        median = statistics.median(steps[name])
        print(f"| {name} | {median:.3f} | {median / base:.3f} | {len(steps[name])} |")


if __name__ == "__main__":
    main()
