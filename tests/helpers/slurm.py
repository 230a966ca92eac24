"""The test Slurm cluster: slurmctld here, a slurmd on each netns host
(scripts/slurm_cluster.sh)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import clean_env, in_session, tntrun_command
from tests.helpers.components import require_commands
from tests.helpers.netns import NetnsHosts
from tests.helpers.paths import BIN, SCRIPTS
from tests.helpers.processes import Hold, Process

SLURM_CLUSTER = str(SCRIPTS / "slurm_cluster.sh")


@dataclass(frozen=True)
class SlurmCluster:
    """scripts/slurm_cluster.sh's cluster: slurmctld here, a slurmd on each netns host."""

    conf: Path
    hosts: NetnsHosts

    def env(self) -> dict[str, str]:
        """As a user submits: the environment active (sbatch passes it to the job)."""
        env = clean_env()
        return {**env, "SLURM_CONF": str(self.conf), "PATH": f"{BIN}:{env['PATH']}"}

    def run(self, *command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(command), cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout
        )


def require_slurm() -> None:
    """Slurm's daemons and commands, checked before the hosts start (the failure names Slurm)."""
    require_commands(
        "slurmctld", "slurmd", "munged", "salloc", fix="apt-get install slurm-wlm munge"
    )


def slurm_up(state: Path, hosts: NetnsHosts) -> SlurmCluster:
    """Start the cluster on ``hosts``, its state in ``state``."""
    up = subprocess.run(
        ["bash", SLURM_CLUSTER, "up", str(state)], capture_output=True, text=True, timeout=120
    )
    assert_succeeded(up)
    return SlurmCluster(state / "slurm.conf", hosts)


def slurm_down(state: Path) -> None:
    subprocess.run(["bash", SLURM_CLUSTER, "down", str(state)], check=True)


def salloc_held(
    slurm: SlurmCluster,
    workdir: Path,
    *args: str,
    search: Callable[[Path], list[Process]],
    env: dict[str, str] | None = None,
) -> tuple[subprocess.CompletedProcess, list[Process]]:
    """``salloc -N2 -n2 tntrun ...`` (``env`` added to the cluster's) with rank 0 held while
    ``search`` finds the run's processes in its run directory (the positive control); the
    result and what the search found. salloc's stdin is not a terminal: it runs as in a batch
    script, however pytest was started."""
    hold = Hold(workdir)
    command = ["salloc", "-N2", "-n2", *tntrun_command(workdir, *hold.overrides(), *args)]
    out, err = workdir / "salloc.out", workdir / "salloc.err"
    with (
        out.open("w") as stdout,
        err.open("w") as stderr,
        in_session(
            command,
            workdir,
            {**slurm.env(), **(env or {})},
            stdin=subprocess.DEVNULL,
            stdout=stdout,
            stderr=stderr,
        ) as salloc,
    ):
        try:
            hold.wait(180, salloc)
            seen = search(hold.run_dir())
        finally:
            hold.release()  # after a failed check too: the run ends by itself
            code = salloc.wait(timeout=300)
    return subprocess.CompletedProcess(command, code, out.read_text(), err.read_text()), seen


def ran_on_both_nodes(result: subprocess.CompletedProcess) -> bool:
    """Rank 0 ran on the cluster's first node, rank 1 on its second (their start-up lines)."""
    return (
        "rank 0/2: local rank 0, host tnt-h1" in result.stdout
        and "rank 1/2: local rank 0, host tnt-h2" in result.stdout
    )
