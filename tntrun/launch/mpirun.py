"""``launcher=mpirun`` (or ``mpiexec``): the site's MPI starts the ranks; tntrun serves the
rendezvous.

The command is rendered for the MPI that is installed (``mpirun --version``: Open
MPI or MPICH's Hydra) by the pure builders below. Every rank runs ``python -m
tntrun.engine.worker`` and maps its MPI's task variables to Horovod's before
Horovod starts (``tntrun.environments.mpi``, named by ``TNTRUN_RANK_ENVIRONMENT``);
Horovod stays a Gloo build, and the ranks meet at the Gloo rendezvous server the
driver runs beside the job, as srun's do. Horovod knobs reach the ranks as
HOROVOD_* variables; mpirun reaches remote hosts by ssh with ``horovod.ssh_port``
and ``horovod.ssh_identity_file``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tntrun.config.schema import HorovodConfig
from tntrun.contract import run_files
from tntrun.environments.launchers import HOROVODRUN, MPIEXEC, MPIRUN
from tntrun.environments.mpi import MpiTasks
from tntrun.launch.launcher import Launcher, LaunchSpec, base_environment
from tntrun.launch.remote_hosts import is_local, local_addresses
from tntrun.launch.remote_hosts import ssh_options as remote_ssh_options
from tntrun.launch.rendezvous import RENDEZVOUS_VARIABLES, serving_rendezvous

if TYPE_CHECKING:
    from tntrun.planning.plan import Plan

OPEN_MPI, MPICH = "Open MPI", "MPICH"
# What the driver adds to the ranks' environment at launch (tntrun.launch.supervisor, the
# rendezvous server), beyond the variables command() renders: Open MPI exports only those
# named with -x to remote hosts. (MPICH's Hydra passes its whole environment.)
LAUNCH_TIME_VARIABLES = (
    *RENDEZVOUS_VARIABLES,
    run_files.ENV_DRIVER_START,
    run_files.ENV_USER_PATH,
    run_files.ENV_LIVE_PROGRESS,
    "PYTHONUNBUFFERED",
)
INSTALL = f"install one (apt-get install openmpi-bin, or mpich) or use launcher={HOROVODRUN}"


@dataclass(frozen=True)
class InstalledMpi:
    """The MPI the driver found: its launcher's path and what ``--version`` printed."""

    path: str | None  # None: no mpirun (nor mpiexec) on PATH
    version: str = ""
    as_root: bool = False  # Open MPI refuses root unless told

    @property
    def kind(self) -> str | None:
        return mpi_kind(self.version)


def mpi_kind(version: str) -> str | None:
    """Open MPI, MPICH (Hydra) or None (unknown), from ``mpirun --version``'s text."""
    if "(Open MPI)" in version or "(OpenRTE)" in version:
        return OPEN_MPI
    if "HYDRA build details" in version:
        return MPICH
    return None


def find_mpi(env: Mapping[str, str]) -> InstalledMpi:
    """The MPI on the driver's PATH: ``mpirun``, else ``mpiexec`` (what Cray PALS has)."""
    for name in (MPIRUN, MPIEXEC):
        found = shutil.which(name, path=env.get("PATH"))
        if found:
            # The binary itself, not a link to it (Debian's alternatives, a PATH entry):
            # Hydra starts its proxy from beside it, and the plan records which MPI ran.
            path = os.path.realpath(found)
            done = subprocess.run(
                [path, "--version"], capture_output=True, text=True, timeout=30, check=False
            )
            return InstalledMpi(path, done.stdout + done.stderr, os.geteuid() == 0)
    return InstalledMpi(None)


def mpi_problems(spec: LaunchSpec, mpi: InstalledMpi, local: set[str]) -> list[str]:
    """Why ``mpi`` cannot run ``spec`` (pure; ``local``: this machine's names and
    addresses): one line each, naming the key and the fix."""
    if mpi.path is None:
        return [f"launcher={MPIRUN} needs an MPI: no {MPIRUN} or {MPIEXEC} on PATH; {INSTALL}"]
    if mpi.kind is None:
        said = (mpi.version.strip().splitlines() or ["nothing"])[0]
        return [
            f"launcher={MPIRUN}: {mpi.path} is neither Open MPI nor MPICH (--version says "
            f"{said!r}); put one first on PATH or use launcher={HOROVODRUN}"
        ]
    problems = [
        f"horovod.{knob.key}={knob.value} has no effect with launcher={MPIRUN} (it sets no "
        "variable the ranks could read): remove it"
        for knob in spec.knobs
        if not knob.env and not knob.in_rank and not knob.over_ssh
    ]
    if all(is_local(host, local) for host, _ in spec.hosts):
        problems += [
            f"horovod.{knob.key}={knob.value} has no effect with launcher={MPIRUN} on this "
            f"machine alone ({MPIRUN} reaches no host by ssh): remove it"
            for knob in spec.knobs
            if knob.over_ssh
        ]
    return problems


def rank_variables(spec: LaunchSpec) -> dict[str, str]:
    """The variables every rank gets from the plan: tntrun's, the knobs', the MPI mapping."""
    env = base_environment(spec)
    for knob in spec.knobs:
        env.update(knob.env)  # mpi_problems() refused the knobs without variables
    env[run_files.ENV_RANK_ENVIRONMENT] = MpiTasks.name  # ranks: OMPI_COMM_WORLD_RANK -> ...
    return env


def ssh_options(hvd: HorovodConfig) -> list[str]:
    """The ssh options mpirun's agent needs to reach remote hosts (as horovodrun's)."""
    if hvd.ssh_port is None and hvd.ssh_identity_file is None:
        return []
    return remote_ssh_options(hvd.ssh_port, hvd.ssh_identity_file)


def openmpi_command(spec: LaunchSpec, mpi: InstalledMpi, names: list[str]) -> tuple[str, ...]:
    """Open MPI's mpirun: ranks in blocks of slots per host, each ``-x`` variable exported."""
    per_node = max(slots for _, slots in spec.hosts)
    overloaded = spec.cores_per_node is not None and per_node > spec.cores_per_node
    bind = "socket" if spec.pin_to_socket else "none"
    if spec.pin_to_socket and overloaded:
        bind += ":overload-allowed"  # more ranks than cores: Open MPI refuses to bind else
    args = [
        str(mpi.path),
        "-np",
        str(spec.world_size),
        "-H",
        ",".join(f"{host}:{slots}" for host, slots in spec.hosts),
        "--map-by",
        "socket" if spec.pin_to_socket else "slot",
        "--bind-to",
        bind,
        "--tag-output",  # "[1,<rank>]<stdout>:": the per-rank logs split by rank
    ]
    if mpi.as_root:
        args.append("--allow-run-as-root")
    ssh = ssh_options(spec.horovod)
    if ssh:
        args += ["--mca", "plm_rsh_args", " ".join(ssh)]
    nic = spec.horovod.network_interface
    if nic:
        args += ["--mca", "oob_tcp_if_include", nic]
    for name in names:
        args += ["-x", name]  # exported from mpirun's environment (the man page's advice)
    return (*args, *spec.worker)


def mpich_command(
    spec: LaunchSpec, mpi: InstalledMpi, env: dict[str, str]
) -> tuple[tuple[str, ...], dict[str, str]]:
    """MPICH's Hydra mpiexec; the variables for mpiexec itself (its ssh agent's options)."""
    per_node = max(slots for _, slots in spec.hosts)
    args = [
        str(mpi.path),
        "-n",
        str(spec.world_size),
        "-ppn",
        str(per_node),
        "-hosts",
        ",".join(host for host, _ in spec.hosts),
        "-bind-to",
        "socket" if spec.pin_to_socket else "none",
        "-prepend-rank",  # "[<rank>] ": the per-rank logs split by rank
    ]
    launcher_env: dict[str, str] = {}
    ssh = ssh_options(spec.horovod)
    if ssh:
        args += ["-launcher", "ssh"]
        launcher_env["HYDRA_LAUNCHER_EXTRA_ARGS"] = " ".join(ssh)
    nic = spec.horovod.network_interface
    if nic:
        args += ["-iface", nic]
    for name, value in sorted(env.items()):
        args += ["-genv", name, value]  # Hydra also passes its own environment (-genvall)
    return (*args, *spec.worker), launcher_env


def launches_through_slurm(command: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Whether the MPI starts its daemons on the hosts with srun, not ssh: inside a Slurm
    allocation Open MPI (its slurm plm) and MPICH's Hydra (its slurm launcher) both do, by
    the job id in their environment, unless Hydra is told ``-launcher ssh`` (ssh knobs).
    Compute nodes often refuse ssh, so no ssh check may stand in the way then."""
    in_allocation = bool(environ.get("SLURM_JOB_ID") or environ.get("SLURM_JOBID"))
    return in_allocation and "-launcher" not in command


class MpirunLauncher(Launcher):
    name = MPIRUN
    binds_ranks = True  # --bind-to socket, -bind-to socket

    def __init__(self, mpi: InstalledMpi | None = None) -> None:
        self._mpi = mpi  # found on first use (the driver's PATH), unless given

    def installed(self, spec: LaunchSpec) -> InstalledMpi:
        if self._mpi is None:
            self._mpi = find_mpi(spec.env)
        return self._mpi

    def problems(self, spec: LaunchSpec) -> list[str]:
        return mpi_problems(spec, self.installed(spec), local_addresses())

    def command(self, spec: LaunchSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        mpi, env = self.installed(spec), rank_variables(spec)
        if mpi.kind == OPEN_MPI:
            names = sorted({*env, *LAUNCH_TIME_VARIABLES})
            return openmpi_command(spec, mpi, names), env
        command, launcher_env = mpich_command(spec, mpi, env)
        return command, {**env, **launcher_env}

    def preflight(self, plan: Plan, run_dir: Path) -> None:
        """ssh into every remote host and compare versions, as for horovodrun, unless the
        MPI reaches the hosts through Slurm (then, as for srun, Slurm's nodes are trusted)."""
        from tntrun.launch.horovodrun import HorovodrunLauncher

        if not launches_through_slurm(plan.launch_command, os.environ):
            HorovodrunLauncher().preflight(plan, run_dir)

    @contextmanager
    def running(self, plan: Plan) -> Iterator[dict[str, str]]:
        """The Gloo rendezvous server the ranks meet at; yields their variables."""
        with serving_rendezvous(plan) as variables:
            yield variables
