"""What loading the logged model back costs the default run: `tntrun` with
tracking.check_model_loads=true/false.

    .venv/bin/python bench/load_check_cost.py [--repeats 5]

The two variants run `repeats` times each, interleaved, the order alternating between
pairs (the machine's load drifts), each in a scratch directory with its own store. Per
run: the wall time of the whole `tntrun` process; the time from rank 0's last metrics line
(written just before it saves the model) to the run's end in MLflow, which holds the
check's whole cost (exit included) without the noise of start-up and training; and, with
the check, its own time as rank 0 measured it (`model_loads.json`: load through the
model's loader, predict, compare), as a share of the run's wall time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from log_model_cost import timed_run


def one_run(work: Path, check: bool) -> tuple[float, float, float | None]:
    """(wall s, after-training s, the check's s or None) of the default run."""
    wall, after = timed_run(work, f"tracking.check_model_loads={str(check).lower()}")
    (record,) = list(work.glob("runs/*/*/model_loads.json")) or [None]
    if record is None:
        return wall, after, None
    found = json.loads(record.read_text())
    assert found["loads"], found
    return wall, after, float(found["seconds"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    measured: dict[bool, list[tuple[float, float, float | None]]] = {True: [], False: []}
    for pair in range(args.repeats):
        for check in (True, False) if pair % 2 == 0 else (False, True):
            with tempfile.TemporaryDirectory() as work:
                measured[check].append(one_run(Path(work), check))
    report(measured)


def listed(values: list[float], digits: int) -> str:
    return ", ".join(f"{v:.{digits}f}" for v in values) or "-"


def report(measured: dict[bool, list[tuple[float, float, float | None]]]) -> None:
    """The table: per variant, each run's times and their medians; the check's share."""
    print("| check | wall s (runs) | median | after training s | median | check s | median |")
    print("|---|---|---|---|---|---|---|")
    for check, runs in measured.items():
        walls, afters = [run[0] for run in runs], [run[1] for run in runs]
        checks = [run[2] for run in runs if run[2] is not None]
        median = f"{statistics.median(checks):.3f}" if checks else "-"
        print(
            f"| {str(check).lower()} | {listed(walls, 1)} | {statistics.median(walls):.1f} | "
            f"{listed(afters, 2)} | {statistics.median(afters):.2f} | {listed(checks, 3)} | "
            f"{median} |"
        )
    ratios = [run[2] / run[0] for run in measured[True] if run[2] is not None]
    print(f"check / wall (median of the runs with it): {statistics.median(ratios):.2%}")
    for name, index in (("wall", 0), ("after training", 1)):
        true, false = (statistics.median(run[index] for run in measured[c]) for c in (True, False))
        print(f"median {name} difference (true - false): {true - false:+.2f} s")


if __name__ == "__main__":
    main()
