"""Wall time of driver-only commands: `tntrun --help`, `--cfg job` and `dry_run=true`.

    .venv/bin/python bench/driver_latency.py [--repeats 7]

Each command runs `repeats` times, interleaved, in a scratch directory; the
table shows the median and the spread. None of them may import TensorFlow.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
COMMANDS = {
    "tntrun --help": ["--help"],
    "tntrun --cfg job": ["--cfg", "job"],
    "tntrun dry_run=true": ["dry_run=true"],
    "tntrun dry_run=true (Goyal schedule, 90 epochs)": [
        "dry_run=true",
        "schedule=warmup_piecewise",
        "train.epochs=90",
        "optimizer=sgd",
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    times: dict[str, list[float]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory() as work:
        for _ in range(args.repeats):
            for name, argv in COMMANDS.items():
                start = time.perf_counter()
                subprocess.run(
                    [str(BIN / "tntrun"), f"output_root={work}", *argv],
                    cwd=work,
                    check=True,
                    capture_output=True,
                )
                times[name].append(time.perf_counter() - start)
    print(f"| command | median s | min s | max s | (n={args.repeats}) |")
    print("|---|---|---|---|---|")
    for name, values in times.items():
        print(
            f"| `{name}` | {statistics.median(values):.2f} | {min(values):.2f} | "
            f"{max(values):.2f} | |"
        )


if __name__ == "__main__":
    main()
