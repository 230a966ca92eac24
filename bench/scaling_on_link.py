"""The scaling predictor on the network it predicts for: profiled across two shaped hosts.

    .venv/bin/python bench/scaling_on_link.py [--rates 1gbit,5gbit] [--repeats 5]
           [--workloads cnn,resnet_synthetic] [--cores-per-rank 0.5]

Needs root (scripts/netns_hosts.sh). Weak scaling, as the predictor predicts:
every run keeps 32 samples per rank (`micro_batch_size=32`) and uses 1
TensorFlow thread per rank (`threads_per_rank=1`), so the 2-rank profile uses
the machine's 2 cores as two 1-core hosts would. For each workload (cnn on
synthetic 32x32 images; experiment=resnet_synthetic: ResNet-18, small stem)
and link rate, one `predict_scaling=true` run on 2 hosts x 1 rank profiles
compute and allreduce across the shaped link and predicts the step time on
1..1024 ranks; its error at 2 ranks compares with its own measured steady
step. Held out, each measured in its own run: 1 rank (one host, no
communication) pinned to one core (`taskset -c 0`: a 1-core host, as each
profiled host is) and, as a user would run it here, unpinned (its input
pipeline and Keras' threads then use the idle second core); 2 hosts x 2 ranks
on the same link (4 single-threaded ranks on 2 cores: 2x oversubscribed, which
no prediction for 4 separate cores can know). Runs interleave workloads and
rates `repeats` times; medians, and the range. In the first repeat a real
sweep, `tntrun -m hosts=[h1],[h1,h2]`, per workload and rate gives the
scaling-efficiency report to set beside the predicted efficiency
step(1) / step(2).

With `--cores-per-rank C` every rank computes on C cores, as on hosts with a
core share per rank: each host's processes get a core of their own and a CPU
quota of C x its ranks (`netns_hosts.sh cpu`), so 2 hosts x 2 ranks at C = 0.5
use the machine's 2 cores without oversubscription, as the profile's 2 x 1
ranks at 0.5 do, and no host computes on the other's core. The
1 rank held out then runs on one host with C cores, and a fourth held-out run
has 4 hosts x 1 rank (hosts 3 and 4 share the cores of hosts 1 and 2, each host
within its quota): the layout the prediction for 4 ranks describes, every
ring hop on the shaped link. The unpinned local run and the sweep are left out.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from runs import run_tntrun, tntrun_command  # noqa: E402

from bench.allreduce_wire import NETNS, hosts_up, set_hosts, shape  # noqa: E402
from bench.wire import relative_errors, weak_scaling_efficiency  # noqa: E402

WORKLOADS = {
    "cnn": ("model=cnn", "dataset=synthetic_images", "optimizer=sgd", "train.epochs=3"),
    "resnet_synthetic": ("experiment=resnet_synthetic", "dataset.num_train=1024"),
}
WEAK = ("micro_batch_size=32", "threads_per_rank=1")
PREDICTED_AT = (1, 2, 4, 8, 64)
HOST_1, HOST_2 = "10.77.0.1", "10.77.0.2"
FOUR_HOSTS = "[10.77.0.1,10.77.0.2,10.77.0.3,10.77.0.4]"
ONE_CORE = ("taskset", "-c", "0")


def set_cpu(state: Path, cores: float) -> float:
    """Give each host ``cores`` cores (a core of its own, a CFS quota); the share measured
    on host 1."""
    return set_hosts(state, "cpu", f"{cores:g}")["cores"]


def on_hosts(port: str, key: str, hosts: str) -> tuple[str, ...]:
    """Overrides placing the run on ``hosts`` (a Hydra list or a sweep of lists)."""
    return (
        f"hosts={hosts}",
        f"horovod.ssh_port={port}",
        f"horovod.ssh_identity_file={key}",
        "horovod.network_interface=tnt0",
    )


def steady_ms(work: Path, *overrides: str, prefix=()) -> tuple[float, dict[int, float]]:
    """(measured steady step ms, predicted step ms by world size when predicted)."""
    client, run_id = run_tntrun(work, *overrides, *WEAK, prefix=prefix)
    metrics = client.get_run(run_id).data.metrics
    history = client.get_metric_history(run_id, "predicted_step_time_ms")
    return metrics["steady_step_time_ms"], {m.step: m.value for m in history}


def swept(work: Path, name: str, *overrides: str) -> dict[int, dict[str, str]]:
    """The scaling report of a real ``-m`` sweep: its rows by world size."""
    sweep_dir = work / f"sweep-{name}"
    command = tntrun_command(work, "-m", *overrides, *WEAK, f"hydra.sweep.dir={sweep_dir}")
    subprocess.run(command, cwd=work, capture_output=True, text=True, check=True)
    with (sweep_dir / "report" / "report.csv").open() as rows:
        return {int(row["world_size"]): row for row in csv.DictReader(rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument(
        "--cores-per-rank",
        type=float,
        default=None,
        help="every rank's CPU share, a quota on each host (e.g. 0.5)",
    )
    args = parser.parse_args()
    cores = args.cores_per_rank
    rates = args.rates.split(",")
    workloads = {name: WORKLOADS[name] for name in args.workloads.split(",")}
    # (workload, rate) -> list of (measured 2, predicted {N: ms}, measured 2x2); workload -> 1
    profiled: dict[tuple[str, str], list[tuple[float, dict[int, float], float]]] = {}
    single: dict[str, list[float]] = {}  # 1 rank on the 2-core machine
    one_core: dict[str, list[float]] = {}  # 1 rank pinned to one core
    sweeps: dict[tuple[str, str], dict[int, dict[str, str]]] = {}
    four_hosts: dict[tuple[str, str], list[float]] = {}  # 4 hosts x 1 rank (--cores-per-rank)
    tcp: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="tntrun-scaling-") as tmp:
        state, work = Path(tmp) / "hosts", Path(tmp) / "work"
        work.mkdir()
        port, key = hosts_up(state, 2 if cores is None else 4)
        both = f"[{HOST_1},{HOST_2}]"
        try:
            for repeat in range(args.repeats):
                for name, overrides in workloads.items():
                    if cores is None:
                        single.setdefault(name, []).append(
                            steady_ms(work, *overrides, "ranks_per_node=1")[0]
                        )
                        one_core.setdefault(name, []).append(
                            steady_ms(work, *overrides, "ranks_per_node=1", prefix=ONE_CORE)[0]
                        )
                    else:  # no communication: the link's rate does not matter
                        print(f"host CPU: {set_cpu(state, cores):.2f} cores", flush=True)
                        one_core.setdefault(name, []).append(
                            steady_ms(
                                work,
                                *overrides,
                                "ranks_per_node=1",
                                *on_hosts(port, key, f"[{HOST_1}]"),
                            )[0]
                        )
                    for rate in rates:
                        tcp[rate] = shape(state, rate)  # hosts at `cores` (if given) from here
                        measured, predicted = steady_ms(
                            work,
                            *overrides,
                            "ranks_per_node=1",
                            *on_hosts(port, key, both),
                            "predict_scaling=true",
                        )
                        if cores is not None:
                            print(f"host CPU: {set_cpu(state, 2 * cores):.2f} cores", flush=True)
                        four, _ = steady_ms(
                            work, *overrides, "ranks_per_node=2", *on_hosts(port, key, both)
                        )
                        profiled.setdefault((name, rate), []).append((measured, predicted, four))
                        if cores is not None:
                            set_cpu(state, cores)  # back to `cores` for the next runs
                            four_hosts.setdefault((name, rate), []).append(
                                steady_ms(
                                    work,
                                    *overrides,
                                    "ranks_per_node=1",
                                    *on_hosts(port, key, FOUR_HOSTS),
                                )[0]
                            )
                            print(f"4x1 {four_hosts[name, rate][-1]:.1f}", flush=True)
                        print(
                            f"repeat {repeat + 1} {name} {rate}: 1 rank {one_core[name][-1]:.1f}"
                            f" ms held out (predicted {predicted[1]:.1f}), 2 ranks"
                            f" {measured:.1f} ({predicted[2]:.1f}), 2x2 {four:.1f}"
                            f" ({predicted[4]:.1f})",
                            flush=True,
                        )
                        if repeat == 0 and cores is None:
                            sweeps[name, rate] = swept(
                                work,
                                f"{name}-{rate}",
                                *overrides,
                                "ranks_per_node=1",
                                *on_hosts(port, key, f"[{HOST_1}],{both}"),
                            )
        finally:
            subprocess.run(["bash", str(NETNS), "down", str(state)], check=False)
    report(profiled, single, one_core, tcp, cores, four_hosts)
    if sweeps:
        report_sweeps(profiled, single, sweeps)


def spread(values: list[float]) -> str:
    return f"{min(values):+.1%}..{max(values):+.1%}"


def report(profiled, single, one_core, tcp, cores: float | None, four_hosts) -> None:
    med = statistics.median
    held_out = "1 core" if cores is None else f"1 host of {cores:g} core"
    print(
        f"{len(one_core[next(iter(one_core))])} repeats; medians, error = predicted / measured"
        f" - 1{'' if cores is None else f'; every rank on {cores:g} core'}\n"
    )
    print("| workload | link (TCP Gbit/s) | 2 ranks measured ms | predicted | error | range |")
    print("|---|---|---|---|---|---|")
    for (name, rate), rows in profiled.items():
        errors = relative_errors([p[2] for _, p, _ in rows], [m for m, _, _ in rows])
        cells = [
            name,
            f"{rate} ({tcp[rate] / 1e9:.2f})",
            f"{med(m for m, _, _ in rows):.1f}",
            f"{med(p[2] for _, p, _ in rows):.1f}",
            f"{med(errors):+.1%}",
            spread(errors),
        ]
        print("| " + " | ".join(cells) + " |")
    print("\nheld out (world sizes the profile was not taken at), medians and error ranges:\n")
    header = ["workload", "link", "1 rank predicted ms", f"{held_out} measured", "error", "range"]
    if single:
        header += ["2 cores measured", "error", "range"]
    header += ["2x2 measured", "predicted", "error", "range"]
    if four_hosts:
        header += ["4x1 measured", "error", "range"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (name, rate), rows in profiled.items():
        predicted1 = [p[1] for _, p, _ in rows]
        errors1 = relative_errors(predicted1, one_core[name])
        errors4 = relative_errors([p[4] for _, p, _ in rows], [f for _, _, f in rows])
        cells = [
            name,
            rate,
            f"{med(predicted1):.1f}",
            f"{med(one_core[name]):.1f}",
            f"{med(errors1):+.1%}",
            spread(errors1),
        ]
        if single:
            errors1_both = relative_errors(predicted1, single[name])
            cells += [f"{med(single[name]):.1f}", f"{med(errors1_both):+.1%}", spread(errors1_both)]
        cells += [
            f"{med(f for _, _, f in rows):.1f}",
            f"{med(p[4] for _, p, _ in rows):.1f}",
            f"{med(errors4):+.1%}",
            spread(errors4),
        ]
        if four_hosts:
            errors4x1 = relative_errors([p[4] for _, p, _ in rows], four_hosts[name, rate])
            cells += [
                f"{med(four_hosts[name, rate]):.1f}",
                f"{med(errors4x1):+.1%}",
                spread(errors4x1),
            ]
        print("| " + " | ".join(cells) + " |")
    print("\npredicted step ms (efficiency step(1) / step(N)) by world size, medians:\n")
    print("| workload | link | " + " | ".join(f"{n} ranks" for n in PREDICTED_AT) + " |")
    print("|---|---|" + "---|" * len(PREDICTED_AT))
    for (name, rate), rows in profiled.items():
        steps = {n: med(p[n] for _, p, _ in rows) for n in PREDICTED_AT}
        efficiency = weak_scaling_efficiency(steps)
        cells = [f"{steps[n]:.1f} ({efficiency[n]:.2f})" for n in PREDICTED_AT]
        print(f"| {name} | {rate} | " + " | ".join(cells) + " |")


def report_sweeps(profiled, single, sweeps) -> None:
    print(
        "\na real sweep, tntrun -m hosts=[h1],[h1,h2] (first repeat), beside the prediction "
        "and the separate runs' medians:\n"
    )
    print(
        "| workload | link | sweep 1 host step ms | sweep 2 hosts step ms | sweep efficiency "
        "| predicted (that repeat) | predicted (median) | runs (median) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for (name, rate), rows in sweeps.items():
        runs = profiled[name, rate]
        predicted = [weak_scaling_efficiency(p)[2] for _, p, _ in runs]
        measured = statistics.median(single[name]) / statistics.median(m for m, _, _ in runs)
        cells = [
            name,
            rate,
            f"{float(rows[1]['steady_step_time_ms']):.1f}",
            f"{float(rows[2]['steady_step_time_ms']):.1f}",
            f"{float(rows[2]['scaling_efficiency']):.2f}",
            f"{predicted[0]:.2f}",
            f"{statistics.median(predicted):.2f}",
            f"{measured:.2f}",
        ]
        print("| " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
