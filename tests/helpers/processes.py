"""Which processes belong to a run: the one search behind every "nothing left" check.

A run's processes are found in ``/proc`` (the netns hosts and the Slurm nodes share
this machine's pid namespace), not by ``pgrep -f <run dir>``: the driver, the srun
rendezvous server, horovodrun's middlemen and slurmstepd have no run directory on
their command line. The search takes every process whose command line or
environment names the run directory, the driver (the pid in ``driver.alive``), the
slurmstepd or MPI daemon (orted, prted, hydra_pmi_proxy) above any of them (with the
slurmstepd right above that daemon: mpirun's srun in an allocation), and all
their descendants; given what it found while the run ran (pid and start time), also
those still running, so a process that lost its parent (the driver SIGKILLed, an orphaned
rank) is still found.

The positive control (:func:`processes_while_running`) runs the same search while
the ranks provably run (their heartbeats show progress, rank 0 held at a step by
:data:`HOLD`) and asserts that it finds every rank and the launcher; the negative
check (:func:`wait_until_no_process_left`) runs it after the failure or the kill.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from itertools import dropwhile, takewhile
from pathlib import Path

from tntrun.contract import run_files
from tntrun.launch.horovodrun import HOROVODRUN_COMMAND
from tntrun.launch.watchdog import progress

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MPI_LAUNCHERS = ("mpirun", "mpiexec", "orterun", "prterun")  # and their .openmpi/.hydra forms
# What starts ranks on a host for a launcher elsewhere: Slurm's step, Open MPI's and MPICH's
# daemons (on a remote host a child of sshd, so found above the ranks, not below the driver).
HOST_DAEMONS = ("slurmstepd", "orted", "prted", "hydra_pmi_proxy")
MPI_DAEMONS = HOST_DAEMONS[1:]


@dataclass(frozen=True)
class Process:
    """One running process; ``pid`` and ``started`` (ticks since boot) identify it."""

    pid: int
    ppid: int
    started: int
    comm: str
    argv: tuple[str, ...]
    environ: dict[str, str] = field(compare=False, hash=False, repr=False)
    role: str = "other"

    def describe(self) -> str:
        return f"{self.pid} [{self.role}] {' '.join(self.argv)[:300] or self.comm}"


def _read(pid: str, name: str) -> bytes:
    with open(f"/proc/{pid}/{name}", "rb") as f:
        return f.read()


def _threads_alive(pid: str) -> bool:
    """Whether a process shown as a zombie still runs threads (its main thread exited: a
    Horovod middleman does so while its thread still stops and kills the rank's shell)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
        states = [_read(f"{pid}/task/{t}", "stat").rsplit(b")", 1)[1].split()[0] for t in tasks]
    except OSError:
        return False
    return any(state not in (b"Z", b"X") for state in states)


def process_table() -> dict[int, Process]:
    """Every running process of this pid namespace (zombies are dead: left out)."""
    table: dict[int, Process] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            stat = _read(pid, "stat").decode(errors="replace")
            argv = _read(pid, "cmdline").split(b"\0")
            environ = _read(pid, "environ").split(b"\0")
        except OSError:  # gone meanwhile, or a kernel thread
            continue
        comm, fields = stat[stat.index("(") + 1 : stat.rindex(")")], stat.rsplit(")", 1)[1].split()
        if fields[0] in ("Z", "X") and not _threads_alive(pid):
            continue
        env = dict(e.decode(errors="replace").partition("=")[::2] for e in environ if b"=" in e)
        table[int(pid)] = Process(
            int(pid),
            int(fields[1]),
            int(fields[19]),
            comm,
            tuple(a.decode(errors="replace") for a in argv if a),
            env,
        )
    return table


def start_wall_time(process: Process) -> float:
    """``time.time()`` when ``process`` started."""
    since_boot = time.clock_gettime(time.CLOCK_BOOTTIME) - process.started / CLOCK_TICKS
    return time.time() - since_boot


def driver_pid(run_dir: Path, table: dict[int, Process]) -> int | None:
    """The pid ``driver.alive`` names, if that process started before the run's config was
    written (a later process with a reused pid is not the driver)."""
    try:
        pid = int((run_dir / run_files.DRIVER_ALIVE).read_text().split()[1])
        written = (run_dir / run_files.CONFIG).stat().st_mtime
    except (OSError, IndexError, ValueError):
        return None
    process = table.get(pid)
    if process is None or start_wall_time(process) > written + 0.5:  # ticks are 10 ms
        return None
    return pid


def role(process: Process, driver: int | None) -> str:
    """What ``process`` is in a run (for the positive control and the failure messages)."""
    argv, names = process.argv, [Path(a).name for a in process.argv[:2]]
    if process.pid == driver:
        return "driver"
    if argv[1:3] == ("-m", "tntrun.engine.worker") and names[0].startswith("python"):
        env = process.environ  # horovodrun sets HOROVOD_RANK; srun SLURM_PROCID; MPIs theirs
        keys = ("HOROVOD_RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK")
        return f"rank {next((env[k] for k in keys if k in env), '?')}"
    if "horovodrun" in names or HOROVODRUN_COMMAND in argv[1:3]:
        return "horovodrun"
    if names and names[0] == "srun":
        return "srun"
    if names and names[0].startswith(MPI_LAUNCHERS):
        return "mpirun"
    if process.comm in MPI_DAEMONS:
        return "mpi daemon"
    if "tntrun.launch.rendezvous_server" in argv:
        return "rendezvous server"
    if argv[1:4] == ("-m", "tntrun.contract.driver_alive", "--backstop"):
        return "backstop"
    if process.comm == "slurmstepd":
        return "slurmstepd"
    if names and names[0] == "ssh":
        return "ssh"
    return "other"


def _ancestors(pid: int, table: dict[int, Process]) -> Iterable[Process]:
    while (pid := table[pid].ppid) in table:
        yield table[pid]


def run_processes(run_dir: Path | str, known: Iterable[Process] = ()) -> list[Process]:
    """The processes of the run in ``run_dir`` now (see the module's docstring), never
    this test process or its ancestors."""
    table = process_table()
    mark = str(run_dir)
    mine = {os.getpid(), *(p.pid for p in _ancestors(os.getpid(), table))}
    driver = driver_pid(Path(run_dir), table)
    seeds = {
        pid
        for pid, p in table.items()
        if any(mark in a for a in p.argv) or any(mark in v for v in p.environ.values())
    }
    seeds |= {p.pid for p in known if p.pid in table and table[p.pid].started == p.started}
    if driver is not None:
        seeds.add(driver)
    for pid in list(seeds):  # the Slurm step (or batch step) or MPI daemon that started it,
        # and the step that started that daemon (mpirun in an allocation: srun's slurmstepd)
        above = dropwhile(lambda p: p.comm not in HOST_DAEMONS, _ancestors(pid, table))
        seeds.update(p.pid for p in takewhile(lambda p: p.comm in HOST_DAEMONS, above))
    children: dict[int, list[int]] = {}
    for p in table.values():
        children.setdefault(p.ppid, []).append(p.pid)
    found: set[int] = set()
    stack = list(seeds - mine)
    while stack:
        pid = stack.pop()
        if pid not in found and pid not in mine:
            found.add(pid)
            stack.extend(children.get(pid, []))
    return [replace(table[pid], role=role(table[pid], driver)) for pid in sorted(found)]


def describe(processes: Iterable[Process]) -> str:
    return "\n".join(p.describe() for p in processes) or "(none)"


def processes_while_running(run_dir: Path, world_size: int, *roles: str) -> list[Process]:
    """The positive control, while every rank has made progress (heartbeats at step >= 1)
    and is held there: the search finds each rank and ``roles`` (launcher, driver, ...)."""
    beats = progress(run_dir / run_files.HEARTBEATS, world_size)
    assert all(b is not None and b[0] >= 1 for b in beats.values()), f"no progress: {beats}"
    found = run_processes(run_dir)
    have = Counter(p.role for p in found)
    wanted = {*(f"rank {r}" for r in range(world_size)), *roles}
    missing = sorted(r for r in wanted if not have[r])
    assert not missing, f"the search missed {missing} of the running run:\n{describe(found)}"
    ranks = [p for p in found if p.role.startswith("rank ")]
    assert len(ranks) == world_size, f"{world_size} ranks expected:\n{describe(ranks)}"
    return found


def wait_until_no_process_left(
    run_dir: Path | str, seen: Iterable[Process], since: float, bound: float
) -> tuple[float, list[Process]]:
    """Poll the search (and ``seen``, from the positive control) until nothing of the run
    is left or ``bound`` seconds after ``since``: the seconds that took, and what is left."""
    seen = list(seen)
    while (left := run_processes(run_dir, seen)) and time.monotonic() - since < bound:
        time.sleep(0.2)
    return time.monotonic() - since, left


# A user callback module (hold.py in the working directory): on rank 0, at step ``at_step``,
# write ``held``, print HELD and wait for ``release`` (at most ``limit_s``), so a test can
# search the run's processes while they provably run, before a fault at a later step.
HOLD = """
import os
import time

import keras


class Hold(keras.callbacks.Callback):
    def __init__(self, at_step, held, release, limit_s=120):
        super().__init__()
        self.at_step, self.held, self.release, self.limit_s = at_step, held, release, limit_s

    def on_train_batch_begin(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) != self.at_step:
            return
        open(self.held, "w").close()
        print(f"hold: rank 0 held at step {self.at_step}", flush=True)
        deadline = time.monotonic() + self.limit_s
        while not os.path.exists(self.release) and time.monotonic() < deadline:
            time.sleep(0.05)
"""
HELD = "hold: rank 0 held at step"
HOLD_STEP = 5  # within epoch 1 of the digits runs, before the faults at step 30


@dataclass(frozen=True)
class Hold:
    """Rank 0 held at :data:`HOLD_STEP` of a run in ``workdir`` until :meth:`release`."""

    workdir: Path

    @property
    def held(self) -> Path:
        return self.workdir / "held"

    def overrides(self) -> tuple[str, ...]:
        """Write hold.py into the working directory; the tntrun overrides that add it."""
        (self.workdir / "hold.py").write_text(HOLD)
        return (
            "+callbacks.hold._target_=hold.Hold",
            "+callbacks.hold.ranks=master_only",
            f"+callbacks.hold.at_step={HOLD_STEP}",
            f"+callbacks.hold.held={self.held}",
            f"+callbacks.hold.release={self.workdir / 'release'}",
        )

    def wait(self, timeout: float, process: subprocess.Popen | None = None) -> None:
        """Until rank 0 is held; fail after ``timeout`` s, or once ``process`` ended."""
        deadline = time.monotonic() + timeout
        while not self.held.exists():
            assert process is None or process.poll() is None, f"{process.args[:3]} ended"
            assert time.monotonic() < deadline, f"rank 0 not at step {HOLD_STEP} in {timeout} s"
            time.sleep(0.1)

    def release(self) -> None:
        (self.workdir / "release").touch()

    def run_dir(self) -> Path:
        """The run directory of the (only) run in the working directory."""
        (found,) = {p.parent for p in self.workdir.glob(f"outputs/runs/*/*/{run_files.CONFIG}")}
        return found
