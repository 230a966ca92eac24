"""Horovod's fused allreduce between two hosts on a shaped link, against the wire's bound.

    .venv/bin/python bench/allreduce_wire.py [--rates 1gbit,5gbit] [--rounds 3]

Needs root (scripts/netns_hosts.sh): two network-namespace hosts with sshd; the
link between them is shaped to each rate in turn (tc tbf on each host's egress)
and its effective TCP rate measured. One rank per host (horovodrun over ssh,
Gloo over the shaped link) allreduces the gradient sets of ResNet-18 (11.7 M
floats) and ResNet-50 (25.6 M), as DistributedOptimizer does (one allreduce per
tensor, fused by Horovod), uncompressed and with fp16 compression. Fusion
thresholds 0 / 8 / 64 / 128 MB are separate launches, interleaved `rounds`
times; each launch times `--repeats` allreduces and reports their median.

The bound: a ring allreduce of B bytes on N ranks needs 2 (N-1)/N x B / rate
(N = 2: B / rate), with B the float32 gradient bytes. "x bound" divides by the
bound at the rate asked (the physical one), "x TCP" by the bound at the TCP
rate measured on that link (what any TCP transport can reach). fp16 sends half
the bytes, so its ratios can fall below 1; "x own" divides by its own bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.wire import median_and_spread, parse_rate, ring_bound_s  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
RANK_SCRIPT = Path(__file__).with_name("allreduce_rank.py")
NETNS = ROOT / "scripts" / "netns_hosts.sh"
THRESHOLDS = {"0 (off)": 0, "8 MB": 8 << 20, "64 MB": 64 << 20, "128 MB": 128 << 20}
MODELS, COMPRESSIONS = ("resnet18", "resnet50"), ("none", "fp16")


def hosts_up(state: Path, count: int = 2) -> tuple[str, str]:
    """Start ``count`` hosts; (ssh port, key)."""
    env = {**os.environ, "TNT_HOSTS": str(count)}
    up = subprocess.run(
        ["bash", str(NETNS), "up", str(state)], capture_output=True, text=True, check=True, env=env
    ).stdout.split()
    return up[1], up[2]


def set_hosts(state: Path, action: str, value: str) -> dict:
    """``netns_hosts.sh ACTION STATE VALUE`` (shape, cpu); what it then measured."""
    out = subprocess.run(
        ["bash", str(NETNS), action, str(state), value], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def shape(state: Path, rate: str) -> float:
    """Shape the link to ``rate``; the TCP rate measured on it, bit/s."""
    return set_hosts(state, "shape", rate)["bits_per_s"]


def one_launch(port: str, key: str, threshold: int, repeats: int) -> list[dict]:
    env = {
        **os.environ,
        "HOROVOD_FUSION_THRESHOLD": str(threshold),
        "TF_CPP_MIN_LOG_LEVEL": "3",
        "CUDA_VISIBLE_DEVICES": "-1",
        "KERAS_BACKEND": "tensorflow",
        "REPEATS": str(repeats),
        "MODELS": ",".join(MODELS),
        "COMPRESSIONS": ",".join(COMPRESSIONS),
        "PYTHONPATH": str(ROOT),
    }
    command = [
        str(BIN / "horovodrun"),
        "--gloo",
        "-np",
        "2",
        "-H",
        "tnt-h1:1,tnt-h2:1",
        "-p",
        port,
        "-i",
        key,
        "--network-interface",
        "tnt0",
        sys.executable,
        str(RANK_SCRIPT),
    ]
    out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    lines = [ln[ln.index("{") :] for ln in out.stdout.splitlines() if '"median_s"' in ln]
    return [json.loads(line) for line in lines]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tntrun-wire-") as tmp:
        state = Path(tmp)
        port, key = hosts_up(state)
        try:
            for rate in args.rates.split(","):
                report(rate, shape(state, rate), port, key, args.rounds, args.repeats)
        finally:
            subprocess.run(["bash", str(NETNS), "down", str(state)], check=False)


def report(rate: str, tcp: float, port: str, key: str, rounds: int, repeats: int) -> None:
    asked = parse_rate(rate)
    times: dict[tuple[str, str, str], list[float]] = {}
    floats: dict[str, int] = {}
    for _ in range(rounds):
        for name, threshold in THRESHOLDS.items():
            for result in one_launch(port, key, threshold, repeats):
                floats[result["model"]] = result["floats"]
                key_ = (result["model"], name, result["compression"])
                times.setdefault(key_, []).append(result["median_s"])
    print(
        f"\n### Link {rate}: TCP measured {tcp / 1e9:.3f} Gbit/s ({tcp / asked:.2f} of the rate)\n"
    )
    print(
        "| model | fusion | compression | median ms | spread | bound ms | x bound | x TCP | x own |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for (model, name, compression), values in times.items():
        nbytes = floats[model] * 4
        bound, at_tcp = ring_bound_s(nbytes, 2, asked), ring_bound_s(nbytes, 2, tcp)
        own = bound / 2 if compression == "fp16" else bound
        median, spread = median_and_spread(values)
        print(
            f"| {model} | {name} | {compression} | {median * 1e3:.0f} | {spread:.0%} | "
            f"{bound * 1e3:.0f} | {median / bound:.3f} | {median / at_tcp:.3f} | "
            f"{median / own:.3f} |",
            flush=True,
        )
    for model in MODELS:
        for compression in COMPRESSIONS:
            mine = {k: v for k, v in times.items() if k[0] == model and k[2] == compression}
            (_, name, _), values = min(mine.items(), key=lambda kv: statistics.median(kv[1]))
            bound = ring_bound_s(floats[model] * 4, 2, asked)
            print(
                f"best for {model}, compression {compression}: fusion {name}, "
                f"{statistics.median(values) / bound:.3f} x bound"
            )


if __name__ == "__main__":
    main()
