"""Cost of one system-metrics sample of a host (tntrun.engine.node_sampler), in microseconds.

    .venv/bin/python bench/node_sampler_cost.py [--samples 2000]

Times each psutil call a sample makes and a whole sample (the readings, their
line and its append to ``system/<host>.jsonl``), and prints the medians and 95th
percentiles. At the default interval (10 s) a rank with local rank 0 pays one
sample per interval on its sampler thread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from tntrun.engine.node_sampler import NodeSampler


def timed_us(call: Callable[[], object], repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        sampler = NodeSampler(Path(run_dir), "bench", 10.0)
        calls: dict[str, Callable[[], object]] = {
            "psutil.cpu_percent()": psutil.cpu_percent,
            "psutil.virtual_memory()": psutil.virtual_memory,
            "psutil.disk_usage('/')": lambda: psutil.disk_usage(os.sep),
            "psutil.net_io_counters()": psutil.net_io_counters,
            "a whole sample, written": sampler.sample,
        }
        print(f"| call | median us | p95 us |  ({args.samples} each, GPUs: {sampler.has_gpus})")
        print("|---|---|---|")
        for name, call in calls.items():
            times = sorted(timed_us(call, args.samples))
            p95 = times[int(0.95 * len(times))]
            print(f"| {name} | {statistics.median(times):.0f} | {p95:.0f} |")
        sampler.stop()


if __name__ == "__main__":
    main()
