"""The dry run at 8, 512 and 8,192 ranks (1, 64 and 1,024 hosts of 8 GPUs): wall and CPU
time of the `tntrun` command, its console lines, and where the time goes in-process.

    .venv/bin/python bench/plan_scale.py [--repeats 5]

Per repeat, the sizes interleaved: `tntrun experiment=resnet50_imagenet nodes=N gpus=8
hosts=[...] global_batch_size=8xranks dry_run=true` in a scratch directory (wall time,
the children's CPU time from rusage, stdout's lines). Then in this process, once warm: the
stages of the same plan (Hydra's composition, typing and planning, the dry-run view and
its files), medians of `repeats`. The command composes twice (Hydra's mode check, then the
run), the in-process API once.
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
from collections.abc import Callable
from pathlib import Path

BIN = Path(sys.executable).parent
SIZES = {8: 1, 512: 64, 8192: 1024}  # ranks: hosts of 8 GPUs


def overrides(ranks: int, work: str) -> list[str]:
    hosts = ",".join(f"node{i:04d}" for i in range(1, SIZES[ranks] + 1))
    return [
        "experiment=resnet50_imagenet",
        f"nodes={SIZES[ranks]}",
        "gpus=8",
        f"hosts=[{hosts}]",
        f"global_batch_size={ranks * 8}",
        "dry_run=true",
        f"output_root={work}",
    ]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def command_run(ranks: int, work: str) -> tuple[float, float, int]:
    """Wall s, CPU s and stdout lines of one `tntrun ... dry_run=true`."""
    cpu, start = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [str(BIN / "tntrun"), *overrides(ranks, work)],
        cwd=work,
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    return wall, children_cpu() - cpu, len(done.stdout.splitlines())


def stages(ranks: int, work: str) -> dict[str, Callable[[], object]]:
    """The in-process stages, each a call that depends on the one before."""
    from tntrun import api
    from tntrun.planning.view import plan_files, render_plan

    state: dict[str, object] = {}

    def compose() -> None:
        state["exp"] = api.compose(overrides(ranks, work))

    def plan() -> None:
        state["plan"] = api.plan(state["exp"])

    def view() -> None:
        render_plan(state["plan"], Path(work))
        plan_files(state["plan"])

    return {"compose (Hydra)": compose, "type + plan": plan, "view + files": view}


def median_stages(ranks: int, work: str, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, call in stages(ranks, work).items():
            start = time.perf_counter()
            call()
            times.setdefault(name, []).append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    runs: dict[int, list[tuple[float, float, int]]] = {n: [] for n in SIZES}
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        for _ in range(args.repeats):
            for ranks in SIZES:
                runs[ranks].append(command_run(ranks, work))
        in_process = {n: median_stages(n, work, args.repeats) for n in SIZES}
    names = list(in_process[8])
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; n={args.repeats}")
    print(f"| ranks | hosts | console lines | wall s | CPU s | {' | '.join(names)} |")
    print("|---|---|---|---|---|" + "---|" * len(names))
    for ranks, values in runs.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        parts = " | ".join(f"{in_process[ranks][name]:.3f}" for name in names)
        print(f"| {ranks} | {SIZES[ranks]} | {values[0][2]} | {wall:.2f} | {cpu:.2f} | {parts} |")


if __name__ == "__main__":
    main()
