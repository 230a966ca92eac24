"""Allreduce on a shaped link between two hosts under each launcher: horovodrun against
mpirun (Open MPI, MPICH).

    .venv/bin/python bench/allreduce_launchers.py [--rates 1gbit,5gbit] [--rounds 3]

Needs root (scripts/netns_hosts.sh): the two network-namespace hosts, their link shaped to
each rate in turn (as bench/allreduce_wire.py does). Each launch starts one rank per host
with the command tntrun renders for the launcher (``tntrun.launch``: horovodrun over ssh;
mpirun through its ssh agent, the ranks placed from the MPI's variables by tntrun's code
and meeting at tntrun's Gloo rendezvous server), and each rank runs
bench/allreduce_rank.py's allreduces of the ResNet-18 and ResNet-50 gradient sets
(uncompressed, Horovod's 128 MB fusion threshold, the median of ``--repeats`` after a
warm-up). The launchers are interleaved, their order rotating each round; the table gives
the median over the rounds, its spread, the allreduce rate (float32 gradient bytes x 8 /
time: on 2 ranks the ring bound is those bytes at the link's rate), its ratio to
horovodrun's and the time over the ring bound.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.allreduce_wire import NETNS, hosts_up, shape  # noqa: E402
from bench.wire import median_and_spread, parse_rate, ring_bound_s  # noqa: E402
from tntrun.config.schema import HorovodConfig  # noqa: E402
from tntrun.contract import run_files  # noqa: E402
from tntrun.launch import Launcher, LaunchSpec  # noqa: E402
from tntrun.launch.horovodrun import HorovodrunLauncher  # noqa: E402
from tntrun.launch.mpirun import MpirunLauncher  # noqa: E402
from tntrun.launch.rendezvous import serving_rendezvous  # noqa: E402
from tntrun.planning.knobs import horovod_knobs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RANK = Path(__file__).with_name("allreduce_rank_placed.py")
VARIANTS = {"horovodrun": None, "mpirun (Open MPI)": "openmpi", "mpirun (MPICH)": "mpich"}
HOSTS = (("10.77.0.1", 1), ("10.77.0.2", 1))
MODELS = ("resnet18", "resnet50")
FUSION_BYTES = 128 << 20  # Horovod's default, which tntrun keeps
LAUNCH_LIMIT_S = 900  # a launch hung (the hosts' link gone) fails the benchmark
# What the driver adds at launch (Open MPI exports these names with -x): set, as it does.
LAUNCH_TIME = {
    run_files.ENV_DRIVER_START: "0",
    run_files.ENV_USER_PATH: str(ROOT),
    run_files.ENV_LIVE_PROGRESS: "0",
    "PYTHONUNBUFFERED": "1",
}


def mpi_path(mpi: str | None, scratch: Path) -> str:
    """PATH with ``mpi``'s mpirun first (a directory whose mpirun links to it), as the
    tests choose an MPI; None: PATH as it is."""
    if mpi is None:
        return os.environ["PATH"]
    chosen = scratch / f"{mpi}-bin"
    chosen.mkdir(exist_ok=True)
    if not (chosen / "mpirun").exists():
        (chosen / "mpirun").symlink_to(f"/usr/bin/mpirun.{mpi}")
    return f"{chosen}{os.pathsep}{os.environ['PATH']}"


def rendered(mpi: str | None, port: str, key: str, settings: Path, path: str):
    """The launcher, and the command and rank variables it renders for one rank per host."""
    horovod = HorovodConfig(ssh_port=int(port), ssh_identity_file=key, network_interface="tnt0")
    spec = LaunchSpec(
        hosts=HOSTS,
        world_size=len(HOSTS),
        knobs=horovod_knobs(horovod, settings.parent),
        worker=(sys.executable, str(RANK), str(settings)),
        python=sys.executable,
        env={"PATH": path},
    )
    launcher: Launcher = HorovodrunLauncher() if mpi is None else MpirunLauncher()
    return (launcher, *launcher.command(spec))


def one_launch(mpi: str | None, port: str, key: str, settings: Path) -> list[dict]:
    """Run the ranks once under ``mpi``'s mpirun (None: horovodrun); rank 0's results."""
    path = mpi_path(mpi, settings.parent)
    launcher, command, env = rendered(mpi, port, key, settings, path)
    horovod = SimpleNamespace(network_interface="tnt0")
    plan = SimpleNamespace(hosts=HOSTS, settings=SimpleNamespace(horovod=horovod))
    serving = nullcontext({}) if mpi is None else serving_rendezvous(plan)
    with serving as extra:
        full = {**os.environ, "PATH": path, **env, **extra, **LAUNCH_TIME}
        out = subprocess.run(
            command, env=full, capture_output=True, text=True, cwd=ROOT, timeout=LAUNCH_LIMIT_S
        )
    if out.returncode != 0:
        raise RuntimeError(f"{launcher.name} failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    # The JSON object only: an MPI's label before it, and (seen under MPICH) other output
    # after it on the same line, are not part of it.
    lines = [ln[ln.index("{") :] for ln in out.stdout.splitlines() if '"median_s"' in ln]
    return [json.JSONDecoder().raw_decode(line)[0] for line in lines]


def measure(port: str, key: str, rounds: int, repeats: int, scratch: Path):
    """{(launcher, model): [median s per launch]} and the models' float counts."""
    settings = scratch / "settings.json"
    env = {
        "MODELS": ",".join(MODELS),
        "COMPRESSIONS": "none",
        "REPEATS": str(repeats),
        "HOROVOD_FUSION_THRESHOLD": str(FUSION_BYTES),
    }
    settings.write_text(json.dumps({"env": env, "hosts": HOSTS}))
    names = list(VARIANTS)
    times: dict[tuple[str, str], list[float]] = {}
    floats: dict[str, int] = {}
    for round_ in range(rounds):
        for name in names[round_ % len(names) :] + names[: round_ % len(names)]:
            for result in one_launch(VARIANTS[name], port, key, settings):
                print(f"round {round_ + 1}, {name}: {json.dumps(result)}", file=sys.stderr)
                floats[result["model"]] = result["floats"]
                times.setdefault((name, result["model"]), []).append(result["median_s"])
    return times, floats


def report(rate: str, tcp: float, times, floats) -> None:
    asked = parse_rate(rate)
    print(f"\n### Link {rate}: TCP measured {tcp / 1e9:.3f} Gbit/s ({tcp / asked:.2f} of it)\n")
    print("| model | launcher | median ms | spread | Gbit/s | rate / horovodrun | x bound | n |")
    print("|---|---|---|---|---|---|---|---|")
    for model in MODELS:
        nbytes = floats[model] * 4
        base = statistics.median(times[("horovodrun", model)])
        for name in VARIANTS:
            median, spread = median_and_spread(times[(name, model)])
            print(
                f"| {model} | {name} | {median * 1e3:.0f} | {spread:.0%} | "
                f"{nbytes * 8 / median / 1e9:.3f} | {base / median:.3f} | "
                f"{median / ring_bound_s(nbytes, 2, asked):.3f} | {len(times[(name, model)])} |",
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", default="1gbit,5gbit")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tntrun-launchers-") as tmp:
        state, scratch = Path(tmp) / "hosts", Path(tmp) / "scratch"
        state.mkdir()
        scratch.mkdir()
        port, key = hosts_up(state)
        try:
            for rate in args.rates.split(","):
                tcp = shape(state, rate)
                report(rate, tcp, *measure(port, key, args.rounds, args.repeats, scratch))
        finally:
            subprocess.run(["bash", str(NETNS), "down", str(state)], check=False)


if __name__ == "__main__":
    main()
