"""Elastic runs: how long the run stands still when a host is lost, and how much work it loses.

Three network-namespace hosts (scripts/netns_hosts.sh, TNT_HOSTS=3) x 1 rank, digits,
global batch 48, ``elastic.min_nodes=2``, ``elastic.commit_every_steps`` of 5 and 20
(interleaved, ``--repeats`` rounds). At step ``FAULT_STEP`` the third host's rank is
SIGKILLed (the fault-injection callback) and discovery no longer lists it.

- recovery: the kill (rank 2's "injecting fault" line, read by this script) to the two
  ranks' start at the new size (their ``world_size`` metric, logged before their first
  step) and to their first step (the first step metric logged after that);
- work lost: the fault's step minus the commit the two ranks went on from.

Run as root, from the checkout: ``.venv/bin/python bench/elastic_recovery.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.allreduce_wire import NETNS, hosts_up  # noqa: E402

FAULT_STEP = 37  # between commits: 35 (every 5), 20 (every 20)
TNTRUN = str(Path(sys.executable).with_name("tntrun"))


def one_run(work: Path, port: str, key: str, every: int) -> dict[str, float]:
    """One elastic run losing its third host; its recovery times and lost steps."""
    hosts = ("10.77.0.1", "10.77.0.2", "10.77.0.3")
    listed = work / "hosts.txt"
    listed.write_text("".join(f"{h}\n" for h in hosts[:2]))
    args = [
        TNTRUN,
        "nodes=3",
        f"hosts=[{','.join(hosts)}]",
        "ranks_per_node=1",
        f"horovod.ssh_port={port}",
        f"horovod.ssh_identity_file={key}",
        "horovod.network_interface=tnt0",
        "elastic.min_nodes=2",
        f"elastic.discovery=cat {listed}",
        f"elastic.commit_every_steps={every}",
        "global_batch_size=48",
        "train.epochs=3",
        "tracking.system_metrics=false",
        "tracking.log_every_steps=1",
        "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
        "+callbacks.fault.ranks=all_ranks",
        "+callbacks.fault.rank=2",
        f"+callbacks.fault.at_step={FAULT_STEP}",
        "+callbacks.fault.kind=kill",
        f"output_root={work / 'outputs'}",
    ]
    process = subprocess.Popen(args, cwd=work, text=True, stdout=subprocess.PIPE)
    killed = 0.0
    for line in process.stdout:
        if "injecting fault" in line:
            killed = time.time()
    if process.wait() != 0:
        raise RuntimeError(f"the elastic run failed (commit every {every})")
    metrics = work / "outputs" / "runs"
    lines = [json.loads(x) for x in next(metrics.rglob("metrics.jsonl")).read_text().splitlines()]
    at = next(i for i, x in enumerate(lines) if x["metrics"].get("world_size") == 2)
    start = lines[at]  # the two ranks' first line; their first step's metrics follow it
    first = next(x for x in lines[at:] if "step_loss" in x["metrics"])
    return {
        "start_s": start["t"] / 1000 - killed,
        "first_step_s": first["t"] / 1000 - killed,
        "lost_steps": FAULT_STEP - start["step"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results: dict[int, list[dict[str, float]]] = {5: [], 20: []}
    with tempfile.TemporaryDirectory() as scratch:
        state = Path(scratch) / "netns"
        port, key = hosts_up(state, count=3)
        try:
            for round_ in range(args.repeats):
                for every in (5, 20) if round_ % 2 == 0 else (20, 5):
                    work = Path(scratch) / f"run-{every}-{round_}"
                    work.mkdir()
                    results[every].append(one_run(work, port, key, every))
                    print(every, results[every][-1], flush=True)
        finally:
            subprocess.run(["bash", str(NETNS), "down", str(state)], check=False)
    print("| commit_every_steps | kill -> 2 ranks start, s | kill -> first step, s | lost steps |")
    print("|---|---|---|---|")
    for every, runs in results.items():
        start = statistics.median(r["start_s"] for r in runs)
        first = statistics.median(r["first_step_s"] for r in runs)
        lost = sorted(int(r["lost_steps"]) for r in runs)
        print(f"| {every} | {start:.1f} | {first:.1f} | {lost} |")


if __name__ == "__main__":
    main()
