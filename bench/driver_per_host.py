"""The driver's cost per host: 2 to 32 network-namespace hosts x 1 rank, the default model.

For each host count (scripts/netns_hosts.sh, TNT_HOSTS=N), on one machine:

- pre-flight: ``preflight_hosts`` (ssh to every host, its versions, the shared run
  directory) called alone, wall time (median of 3);
- a finished run (digits MLP, 1 epoch, system metrics every 1 s): from the driver's start
  to the ranks' launch (every host's ``tntrun.engine.worker`` process exists: plan,
  pre-flight, horovodrun's own ssh checks, rendezvous, the ssh per rank), and from the last
  step (``metrics.jsonl``'s last step line) to the driver's exit (teardown, records);
  the ``system/`` rows the store holds per host per minute of the run;
- a killed run: rank N-1 SIGKILLed at step 30 (the fault-injection callback), from its
  "injecting fault" line (above 16 ranks, which the console does not relay: horovodrun's
  line on the rank's exit) to the driver's exit, the run FAILED.

Driver CPU: the driver process (its threads), and the driver's tree (with horovodrun and
the ssh clients, live or reaped) sampled every 0.1 s; the ranks run on the hosts and are not
counted. Per-host slope: least squares over the host counts.

Run as root, from the checkout, alone (the hosts' names are fixed):
``.venv/bin/python bench/driver_per_host.py [--hosts 2 4 8 16 32]``. A run that does not end
as planned keeps its outputs (the ranks' logs) in outputs/bench/driver_per_host/, and the
bench goes on with the next host count.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.allreduce_wire import NETNS, hosts_up  # noqa: E402

TNTRUN = str(Path(sys.executable).with_name("tntrun"))
WORKER = "tntrun.engine.worker"
KILL_STEP = 30


class DriverClock(threading.Thread):
    """Samples (wall time, driver CPU, driver tree CPU, rank workers alive) every 0.1 s."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.driver = psutil.Process(pid)
        self.samples: list[tuple[float, float, float, int]] = []
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.1):
            try:
                self.samples.append((time.time(), *self._cpu(), _workers()))
            except psutil.NoSuchProcess:
                return

    def _cpu(self) -> tuple[float, float]:
        own = self.driver.cpu_times()
        tree = own.user + own.system + own.children_user + own.children_system
        for child in self.driver.children(recursive=True):
            try:
                times = child.cpu_times()
                tree += times.user + times.system
            except psutil.NoSuchProcess:
                continue
        return own.user + own.system, tree

    def at(self, when: float) -> tuple[float, float]:
        """(driver CPU, tree CPU) at the last sample not after ``when``."""
        before = [s for s in self.samples if s[0] <= when] or self.samples[:1]
        return before[-1][1], before[-1][2]

    def first(self, condition) -> float:
        return next(s[0] for s in self.samples if condition(s))


def _workers() -> int:
    """Rank processes started (``python -m tntrun.engine.worker``; not horovodrun's or the
    ssh clients' command lines, which name it too)."""
    return sum(
        1
        for p in psutil.process_iter(["cmdline"])
        if (p.info["cmdline"] or [])[1:3] == ["-m", WORKER]
    )


def run_args(work: Path, hosts: list[str], port: str, key: str) -> list[str]:
    return [
        TNTRUN,
        f"nodes={len(hosts)}",
        f"hosts=[{','.join(hosts)}]",
        "ranks_per_node=1",
        f"horovod.ssh_port={port}",
        f"horovod.ssh_identity_file={key}",
        "horovod.network_interface=tnt0",
        # 32 ranks importing TensorFlow on 2 cores outlast Gloo's 30 s rendezvous wait
        "horovod.gloo_timeout_s=600",
        f"output_root={work / 'outputs'}",
        f"tracking.uri=sqlite:///{work.parent / 'mlflow.db'}",
    ]


def driven(args: list[str], work: Path) -> tuple[DriverClock, list[tuple[float, str]], int]:
    """tntrun to its end, sampled; its output lines with their wall time; its exit code."""
    work.mkdir(parents=True)
    process = subprocess.Popen(
        args, cwd=work, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    clock = DriverClock(process.pid)
    clock.samples.append((time.time(), 0.0, 0.0, 0))
    clock.start()
    lines = [(time.time(), line) for line in process.stdout]
    code = process.wait()
    ended = time.time()
    clock.done.set()
    clock.join()
    clock.samples.append((ended, *clock.samples[-1][1:3], 0))
    return clock, lines, code


KEPT = ROOT / "outputs" / "bench" / "driver_per_host"  # the outputs of runs that went wrong


class RunFailed(RuntimeError):
    """A run that did not end as the bench needs; its outputs (the ranks' logs) are kept."""

    def __init__(self, work: Path, why: str) -> None:
        kept = KEPT / f"{time.strftime('%Y%m%d-%H%M%S')}-{work.name}"
        shutil.copytree(work / "outputs", kept, ignore=shutil.ignore_patterns("checkpoints"))
        super().__init__(f"{why}\n(its outputs, the ranks' logs among them: {kept})")


def interval(clock: DriverClock, start: float, end: float) -> dict[str, float]:
    (cpu0, tree0), (cpu1, tree1) = clock.at(start), clock.at(end)
    return {"wall_s": end - start, "driver_cpu_s": cpu1 - cpu0, "tree_cpu_s": tree1 - tree0}


def finished_run(work: Path, hosts: list[str], port: str, key: str) -> dict:
    args = [*run_args(work, hosts, port, key), "train.epochs=1"]
    args += ["tracking.system_metrics_interval_s=1", "tracking.log_every_steps=1"]
    clock, lines, code = driven(args, work)
    if code != 0:
        raise RunFailed(work, "".join(line for _, line in lines)[-3000:])
    start, end = clock.samples[0][0], clock.samples[-1][0]
    launched = clock.first(lambda s: s[3] >= len(hosts))
    metrics = next((work / "outputs").rglob("metrics.jsonl")).read_text().splitlines()
    steps = [json.loads(x) for x in metrics if '"step_loss"' in x]
    last_step = steps[-1]["t"] / 1000
    return {
        "launch": interval(clock, start, launched),
        "end": interval(clock, last_step, end),
        "rows_per_host_min": system_rows(work, len(hosts)),
    }


def system_rows(work: Path, hosts: int) -> float:
    """The run's ``system/`` rows in the store, per host per minute of the run."""
    run_id = next((work / "outputs").rglob("run_id")).read_text().strip()
    with sqlite3.connect(work.parent / "mlflow.db") as db:
        (rows,) = db.execute(
            "SELECT COUNT(*) FROM metrics WHERE run_uuid=? AND key LIKE 'system/%'", (run_id,)
        ).fetchone()
        start, end = db.execute(
            "SELECT start_time, end_time FROM runs WHERE run_uuid=?", (run_id,)
        ).fetchone()
    return rows / hosts / ((end - start) / 60_000)


def killed_run(work: Path, hosts: list[str], port: str, key: str) -> dict:
    fault = [
        "+callbacks.fault._target_=tntrun.engine.faults.InjectFault",
        "+callbacks.fault.ranks=all_ranks",
        f"+callbacks.fault.rank={len(hosts) - 1}",
        f"+callbacks.fault.at_step={KILL_STEP}",
        "+callbacks.fault.kind=kill",
    ]
    args = [*run_args(work, hosts, port, key), "train.epochs=50", *fault]
    clock, lines, code = driven([*args, "tracking.system_metrics=false"], work)
    # The rank's "injecting fault" line; above 16 ranks the console shows rank 0's lines
    # alone, and the clock starts at horovodrun's line on the rank's exit (a little later).
    marks = ("injecting fault", f"Process {len(hosts) - 1} exit")
    killed = next((t for t, line in lines if any(m in line for m in marks)), None)
    if killed is None or code == 0 or "FAILED" not in run_status(work):
        raise RunFailed(work, "the killed run did not fail as planned")
    return interval(clock, killed, clock.samples[-1][0])


def run_status(work: Path) -> str:
    run_id = next((work / "outputs").rglob("run_id")).read_text().strip()
    with sqlite3.connect(work.parent / "mlflow.db") as db:
        return db.execute("SELECT status FROM runs WHERE run_uuid=?", (run_id,)).fetchone()[0]


def preflight_wall(hosts: list[str], port: str, key: str, scratch: Path) -> float:
    from tntrun.launch.remote_hosts import preflight_hosts
    from tntrun.planning.machine import versions

    found = versions()
    expected = {n: found.get(f"version.{n}") for n in ("tntrun", "tensorflow", "horovod")}
    walls = []
    for _ in range(3):
        started = time.monotonic()
        preflight_hosts(hosts, sys.executable, expected, int(port), key, 30, scratch)
        walls.append(time.monotonic() - started)
    return statistics.median(walls)


def one_count(count: int, scratch: Path) -> dict:
    state = scratch / f"netns-{count}"
    started = time.monotonic()
    port, key = hosts_up(state, count=count)
    up_s = time.monotonic() - started
    hosts = [f"10.77.0.{i}" for i in range(1, count + 1)]
    try:
        result = {"hosts": count, "up_s": up_s}
        result["preflight_s"] = preflight_wall(hosts, port, key, scratch)
        result["finished"] = finished_run(scratch / f"finished-{count}", hosts, port, key)
        result["killed"] = killed_run(scratch / f"killed-{count}", hosts, port, key)
        return result
    finally:
        subprocess.run(["bash", str(NETNS), "down", str(state)], check=False)


def make_store(path: Path) -> None:
    """MLflow's schema made before the first run, as in a store a site already uses."""
    code = "import mlflow, sys; mlflow.MlflowClient(sys.argv[1]).search_experiments()"
    subprocess.run([sys.executable, "-c", code, f"sqlite:///{path}"], check=True)


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares change per host (NaN from one host count: no slope)."""
    if len(points) < 2:
        return float("nan")
    return statistics.linear_regression([h for h, _ in points], [v for _, v in points]).slope


COLUMNS = {  # column: how to read it off one count's result
    "pre-flight wall s": lambda r: r["preflight_s"],
    "start -> launch wall s": lambda r: r["finished"]["launch"]["wall_s"],
    "start -> launch driver CPU s": lambda r: r["finished"]["launch"]["driver_cpu_s"],
    "start -> launch tree CPU s": lambda r: r["finished"]["launch"]["tree_cpu_s"],
    "kill -> FAILED wall s": lambda r: r["killed"]["wall_s"],
    "kill -> FAILED driver CPU s": lambda r: r["killed"]["driver_cpu_s"],
    "last step -> end wall s": lambda r: r["finished"]["end"]["wall_s"],
    "last step -> end driver CPU s": lambda r: r["finished"]["end"]["driver_cpu_s"],
    "system rows / host / min": lambda r: r["finished"]["rows_per_host_min"],
}


def table(results: list[dict]) -> str:
    rows = [["hosts", *(str(r["hosts"]) for r in results), "per host"]]
    rows.append(["---"] * (len(results) + 2))
    for name, read in COLUMNS.items():
        values = [read(r) for r in results]
        fit = slope(list(zip([r["hosts"] for r in results], values, strict=True)))
        rows.append([name, *(f"{v:.2f}" for v in values), f"{fit:+.3f}"])
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, nargs="+", default=[2, 4, 8, 16, 32])
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        make_store(Path(scratch) / "mlflow.db")
        for count in args.hosts:
            try:
                results.append(one_count(count, Path(scratch)))
            except RunFailed as failed:  # the counts measured so far still make a table
                print(f"{count} hosts: {failed}", flush=True)
                continue
            print(json.dumps(results[-1]), flush=True)
    print(table(results))


if __name__ == "__main__":
    main()
