"""Start-up and step time under each launcher: horovodrun against mpirun (Open MPI, MPICH).

    .venv/bin/python bench/launchers.py [--repeats 3] [--epochs 10]

Each variant is the default experiment (MLP on digits, 2 ranks on this host) run quiet (as
bench/runs.py's QUIET) with ``launcher=`` set; an MPI is chosen by putting a directory
first on PATH whose ``mpirun`` links to ``mpirun.openmpi`` or ``mpirun.mpich``, as the
tests do. Per run: ``startup_s`` (the driver's start to the first step, which includes the
launcher's start and every rank's TensorFlow import) and ``steady_step_time_ms``. The order
of the variants rotates each repeat; medians, and their ratio to horovodrun.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from runs import run_metrics

VARIANTS = {"horovodrun": None, "mpirun (Open MPI)": "openmpi", "mpirun (MPICH)": "mpich"}
METRICS = ("startup_s", "steady_step_time_ms")


def with_mpi(mpi: str | None, scratch: Path, base: dict[str, str]) -> dict[str, str]:
    """``base`` for a run whose ``mpirun`` is ``mpi``'s (None: horovodrun's run)."""
    if mpi is None:
        return dict(base)
    chosen = scratch / f"{mpi}-bin"
    chosen.mkdir(exist_ok=True)
    link = chosen / "mpirun"
    if not link.exists():
        link.symlink_to(f"/usr/bin/mpirun.{mpi}")
    return {**base, "PATH": f"{chosen}{os.pathsep}{base['PATH']}"}


def measure(names: list[str], repeats: int, epochs: int) -> dict[str, dict[str, list[float]]]:
    found: dict[str, dict[str, list[float]]] = {name: {m: [] for m in METRICS} for name in names}
    base = dict(os.environ)
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        for repeat in range(repeats):
            for name in names[repeat % len(names) :] + names[: repeat % len(names)]:
                mpi = VARIANTS[name]
                launcher = "horovodrun" if mpi is None else "mpirun"
                os.environ.clear()
                os.environ.update(with_mpi(mpi, scratch, base))
                metrics = run_metrics(scratch, f"launcher={launcher}", f"train.epochs={epochs}")
                for metric in METRICS:
                    found[name][metric].append(metrics[metric])
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=10)
    args = parser.parse_args()
    names, saved = list(VARIANTS), dict(os.environ)
    try:
        found = measure(names, args.repeats, args.epochs)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    base = {m: statistics.median(found[names[0]][m]) for m in METRICS}
    print("| launcher | median start-up s | / horovodrun | median step ms | / horovodrun | n |")
    print("|---|---|---|---|---|---|")
    for name in names:
        start, step = (statistics.median(found[name][m]) for m in METRICS)
        print(
            f"| {name} | {start:.2f} | {start / base['startup_s']:.3f} | {step:.3f} | "
            f"{step / base['steady_step_time_ms']:.3f} | {len(found[name]['startup_s'])} |"
        )


if __name__ == "__main__":
    main()
