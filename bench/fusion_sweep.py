"""Allreduce time of a ResNet-50-sized gradient set versus Horovod's fusion threshold.

    .venv/bin/python bench/fusion_sweep.py [--rounds 3]

2 ranks (Gloo, localhost); ResNet-50's 161 gradient tensors (25.6 M float32).
Thresholds 0 (no fusion), 32 KB (Tarantella's default), 1, 8, 64 MB and
Horovod's default 128 MB are interleaved for `rounds` rounds, each run timing 7
allreduces and reporting the median. The bound: a ring allreduce on N ranks
moves 2 (N - 1) / N of the data through each rank; at the measured memory-copy
bandwidth B that takes at least 2 (N - 1) / N * bytes / B.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

BIN = Path(sys.executable).parent
RANK_SCRIPT = Path(__file__).with_name("allreduce_rank.py")
THRESHOLDS = {
    "0 (off)": 0,
    "32 KB": 32 << 10,
    "1 MB": 1 << 20,
    "8 MB": 8 << 20,
    "64 MB": 64 << 20,
    "128 MB (Horovod default)": 128 << 20,
}


def copy_bandwidth(size_bytes: int = 256 << 20, repeats: int = 5) -> float:
    """Bytes per second of a large NumPy memory copy (read + write counted once)."""
    src = np.ones(size_bytes // 4, np.float32)
    dst = np.empty_like(src)
    best = min(_timed(lambda: np.copyto(dst, src)) for _ in range(repeats))
    return size_bytes / best


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_run(threshold: int) -> dict:
    env = {
        **os.environ,
        "HOROVOD_FUSION_THRESHOLD": str(threshold),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "CUDA_VISIBLE_DEVICES": "-1",
        "KERAS_BACKEND": "tensorflow",
    }
    out = subprocess.run(
        [
            str(BIN / "horovodrun"),
            "--gloo",
            "-np",
            "2",
            "-H",
            "localhost:2",
            sys.executable,
            str(RANK_SCRIPT),
        ],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    line = next(ln for ln in out.splitlines() if '"median_s"' in ln)
    return json.loads(line[line.index("{") :])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    bandwidth = copy_bandwidth()
    results: dict[str, list[float]] = {name: [] for name in THRESHOLDS}
    info = {}
    for _ in range(args.rounds):
        for name, threshold in THRESHOLDS.items():
            info = one_run(threshold)
            results[name].append(info["median_s"])
    size = info["floats"] * 4
    bound = 2 * (2 - 1) / 2 * size / bandwidth
    print(
        f"{info['tensors']} tensors, {info['floats'] / 1e6:.1f} M floats ({size / 2**20:.0f} MiB);"
        f" memory copy {bandwidth / 1e9:.1f} GB/s; ring bound {bound * 1000:.1f} ms\n"
    )
    print("| fusion threshold | median allreduce ms | x bound | runs |")
    print("|---|---|---|---|")
    for name, values in results.items():
        median = statistics.median(values)
        print(f"| {name} | {median * 1000:.1f} | {median / bound:.1f} | {len(values)} |")


if __name__ == "__main__":
    main()
