"""The scaling predictor on the network it predicts for: profiled across two shaped hosts.

    .venv/bin/python bench/scaling_on_link.py [--rates 1gbit,5gbit] [--repeats 3]

Needs root (scripts/netns_hosts.sh). For each workload (cnn on synthetic 32x32
images; experiment=resnet_synthetic: ResNet-18, small stem) and link rate, one
`predict_scaling=true` run on 2 hosts x 1 rank profiles compute and allreduce
across the shaped link and predicts the step time on 1..1024 ranks; its error
at 2 ranks (`prediction_error`) compares with its own measured steady step.
Held-out world sizes, not profiled: 1 rank (one host, unshaped: no
communication) and 2 hosts x 2 ranks on the same link, each measured in its own
run. Every rank uses 1 thread (`threads_per_rank=1`), so the 2-rank profile
uses the machine's 2 cores as 2 hosts would; 2 x 2 ranks oversubscribe them 2x
(4 threads on 2 cores), which no prediction for 4 separate cores can know.
Runs interleave workloads and rates `repeats` times; medians, and the range.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runs import run_tntrun  # noqa: E402

from bench.allreduce_wire import NETNS, hosts_up, shape  # noqa: E402

WORKLOADS = {
    "cnn": ("model=cnn", "dataset=synthetic_images", "optimizer=sgd", "train.epochs=3"),
    "resnet_synthetic": ("experiment=resnet_synthetic", "dataset.num_train=1024"),
}
PREDICTED_AT = (1, 2, 4, 8, 64)


def two_hosts(port: str, key: str, ranks_per_node: int) -> tuple[str, ...]:
    return ("hosts=[10.77.0.1,10.77.0.2]", "nodes=2", f"ranks_per_node={ranks_per_node}",
            f"horovod.ssh_port={port}", f"horovod.ssh_identity_file={key}",
            "horovod.network_interface=tnt0")  # fmt: skip


def steady_ms(work: Path, *overrides: str) -> tuple[float, dict[int, float]]:
    """(measured steady step ms, predicted step ms by world size when predicted)."""
    client, run_id = run_tntrun(work, *overrides, "threads_per_rank=1")
    metrics = client.get_run(run_id).data.metrics
    history = client.get_metric_history(run_id, "predicted_step_time_ms")
    return metrics["steady_step_time_ms"], {m.step: m.value for m in history}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rates = args.rates.split(",")
    # (workload, rate) -> list of (measured 2, predicted {N: ms}, measured 2x2); workload -> 1
    profiled: dict[tuple[str, str], list[tuple[float, dict[int, float], float]]] = {}
    single: dict[str, list[float]] = {}
    tcp: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tntrun-scaling-") as tmp:
        state, work = Path(tmp) / "hosts", Path(tmp) / "work"
        work.mkdir()
        port, key = hosts_up(state)
        try:
            for _ in range(args.repeats):
                for name, overrides in WORKLOADS.items():
                    single.setdefault(name, []).append(
                        steady_ms(work, *overrides, "ranks_per_node=1")[0]
                    )
                    for rate in rates:
                        tcp[rate] = shape(state, rate)
                        measured, predicted = steady_ms(work, *overrides,
                                                        *two_hosts(port, key, 1),
                                                        "predict_scaling=true")  # fmt: skip
                        four, _ = steady_ms(work, *overrides, *two_hosts(port, key, 2))
                        profiled.setdefault((name, rate), []).append((measured, predicted, four))
        finally:
            subprocess.run(["bash", str(NETNS), "down", str(state)], check=False)
    report(profiled, single, tcp)


def spread(values: list[float]) -> str:
    return f"{min(values):+.0%}..{max(values):+.0%}"


def report(profiled, single, tcp) -> None:
    print("| workload | link (TCP Gbit/s) | 2 ranks measured ms | predicted | error | range "
          "| 1 rank measured | predicted | error | 2x2 measured | predicted | error |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (name, rate), rows in profiled.items():
        errors2 = [p[2] / m - 1 for m, p, _ in rows]
        errors1 = [p[1] / s - 1 for (_, p, _), s in zip(rows, single[name], strict=False)]
        errors4 = [p[4] / f - 1 for _, p, f in rows]
        med = statistics.median
        print(f"| {name} | {rate} ({tcp[rate] / 1e9:.2f}) | {med(m for m, _, _ in rows):.1f} | "
              f"{med(p[2] for _, p, _ in rows):.1f} | {med(errors2):+.1%} | {spread(errors2)} | "
              f"{med(single[name]):.1f} | {med(p[1] for _, p, _ in rows):.1f} | "
              f"{med(errors1):+.1%} | {med(f for _, _, f in rows):.1f} | "
              f"{med(p[4] for _, p, _ in rows):.1f} | {med(errors4):+.1%} |")  # fmt: skip
    print("\npredicted step ms (efficiency) by world size, medians:\n")
    print("| workload | link | " + " | ".join(f"{n} ranks" for n in PREDICTED_AT) + " |")
    print("|---|---|" + "---|" * len(PREDICTED_AT))
    for (name, rate), rows in profiled.items():
        cells = []
        for n in PREDICTED_AT:
            step = statistics.median(p[n] for _, p, _ in rows)
            one = statistics.median(p[1] for _, p, _ in rows)
            cells.append(f"{step:.1f} ({one / step:.2f})")
        print(f"| {name} | {rate} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
