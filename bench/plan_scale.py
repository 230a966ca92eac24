"""The dry run at 8, 512 and 8,192 ranks (1, 64 and 1,024 hosts of 8 GPUs): wall and CPU
time of the `tntrun` command, its console lines, and where the time goes in-process.

    .venv/bin/python bench/plan_scale.py [--repeats 5] [--against DIR]

Per repeat, the sizes interleaved: `tntrun experiment=resnet50_imagenet nodes=N gpus=8
hosts=[...] global_batch_size=8xranks dry_run=true` in a scratch directory, and at 8,192
ranks once more with `hostfile=` instead of the list (wall time, the children's CPU time
from rusage, stdout's lines). Then in this process, once warm: the
stages of the same plan (Hydra's composition, typing and planning, the dry-run view and
its files), medians of `repeats`. The command composes twice (Hydra's mode check, then the
run), the in-process API once. ``--against DIR`` also times the command with another
checkout's tntrun first on PYTHONPATH (`git archive main | tar -x -C DIR`), interleaved.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from runs import children_cpu

# case: (hosts of 8 GPUs, given in a hostfile rather than hosts=[...])
CASES = {"8": (1, False), "512": (64, False), "8192": (1024, False), "8192 hostfile": (1024, True)}


def overrides(case: str, work: str) -> list[str]:
    nodes, by_file = CASES[case]
    names = [f"node{i:04d}" for i in range(1, nodes + 1)]
    hosts = f"hosts=[{','.join(names)}]"
    if by_file:
        hostfile = Path(work) / f"hosts-{nodes}.txt"
        hostfile.write_text("".join(f"{name} slots=8\n" for name in names))
        hosts = f"hostfile={hostfile}"
    return [
        "experiment=resnet50_imagenet",
        f"nodes={nodes}",
        "gpus=8",
        hosts,
        f"global_batch_size={nodes * 64}",
        "dry_run=true",
        f"output_root={work}",
    ]


def command_run(case: str, work: str, code: str | None = None) -> tuple[float, float, int]:
    """Wall s, CPU s and stdout lines of one `tntrun ... dry_run=true` (``code``: the
    checkout whose tntrun runs, else this environment's)."""
    env = {**os.environ, **({"PYTHONPATH": code} if code else {})}
    cpu, start = children_cpu(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tntrun.cli", *overrides(case, work)],
        cwd=work,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    return wall, children_cpu() - cpu, len(done.stdout.splitlines())


def stages(case: str, work: str) -> dict[str, Callable[[], object]]:
    """The in-process stages, each a call that depends on the one before."""
    from tntrun import api
    from tntrun.planning.view import plan_files, render_plan

    state: dict[str, object] = {}

    def compose() -> None:
        state["exp"] = api.compose(overrides(case, work))

    def plan() -> None:
        state["plan"] = api.plan(state["exp"])

    def view() -> None:
        render_plan(state["plan"], Path(work))
        plan_files(state["plan"])

    return {"compose (Hydra)": compose, "type + plan": plan, "view + files": view}


def median_stages(case: str, work: str, repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {}
    for _ in range(repeats):
        for name, call in stages(case, work).items():
            start = time.perf_counter()
            call()
            times.setdefault(name, []).append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def print_table(runs: dict, in_process: dict[str, dict[str, float]]) -> None:
    names = list(in_process["8"])
    print(f"| code | ranks | hosts | console lines | wall s | CPU s | {' | '.join(names)} |")
    print("|---|---|---|---|---|---|" + "---|" * len(names))
    for (code, case), values in runs.items():
        wall = statistics.median(v[0] for v in values)
        cpu = statistics.median(v[1] for v in values)
        parts = " | ".join(
            f"{in_process[case][name]:.3f}" if code == "this" else "" for name in names
        )
        line = f"{values[0][2]} | {wall:.2f} | {cpu:.2f} | {parts}"
        print(f"| {code} | {case} | {CASES[case][0]} | {line} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--against", default=None, help="another checkout's directory")
    args = parser.parse_args()
    codes = {"this": None, **({args.against: args.against} if args.against else {})}
    runs: dict[tuple[str, str], list[tuple[float, float, int]]] = {
        (name, case): [] for name in codes for case in CASES
    }
    with tempfile.TemporaryDirectory() as work:
        os.chdir(work)
        for _ in range(args.repeats):
            for name, code in codes.items():
                for case in CASES:
                    runs[name, case].append(command_run(case, work, code))
        in_process = {case: median_stages(case, work, args.repeats) for case in CASES}
    print(f"load average at the end: {os.getloadavg()[0]:.2f}; n={args.repeats}")
    print_table(runs, in_process)


if __name__ == "__main__":
    main()
