"""The test Slurm cluster: slurmctld here, a slurmd on each netns host
(scripts/slurm_cluster.sh)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import clean_env
from tests.helpers.components import require_commands
from tests.helpers.netns import NetnsHosts
from tests.helpers.paths import BIN, SCRIPTS

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
