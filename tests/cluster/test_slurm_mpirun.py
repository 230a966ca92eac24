"""``launcher=mpirun`` inside a Slurm allocation on the real 2-node cluster
(scripts/slurm_cluster.sh): the allocation is the layout, and the MPI starts its daemons on
the allocation's nodes through Slurm (srun), not ssh, under Open MPI and MPICH."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.asserts import assert_succeeded
from tests.helpers.driving import assert_nothing_left
from tests.helpers.mpi import MPIS, mpi_first_on_path
from tests.helpers.processes import Process, describe, processes_while_running
from tests.helpers.runs import DETERMINISTIC, assert_same_weights, final_weights, run_dir_of
from tests.helpers.slurm import ran_on_both_nodes, salloc_held
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow

# Found beside the ranks while they run: mpirun's srun starts a Slurm step on each node,
# whose slurmstepd starts the MPI's daemon (orted, hydra_pmi_proxy), the rank's parent.
MPIRUN_IN_SLURM = ("driver", "mpirun", "srun", "slurmstepd", "mpi daemon")


def mpirun_in_slurm_while_running(run_dir: Path) -> list[Process]:
    """The positive control of an mpirun run in an allocation."""
    return processes_while_running(run_dir, 2, *MPIRUN_IN_SLURM)


def assert_ranks_under_slurm_steps(seen: list[Process]) -> None:
    """Rank r runs on node r under its MPI daemon, which its node's slurmstepd started."""
    by_pid = {p.pid: p for p in seen}
    for rank, node in enumerate(("tnt-h1", "tnt-h2")):
        (found,) = [p for p in seen if p.role == f"rank {rank}"]
        daemon = by_pid.get(found.ppid)
        assert daemon is not None and daemon.role == "mpi daemon", describe(seen)
        step = by_pid.get(daemon.ppid)
        assert step is not None and step.role == "slurmstepd", describe(seen)
        assert found.environ.get("SLURMD_NODENAME") == node, describe(seen)


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_mpirun_in_an_allocation_trains_on_its_nodes_like_two_local_ranks(
    slurm, two_local_ranks_weights, tmp_path, monkeypatch, mpi
):
    """``salloc -N2 -n2 tntrun launcher=mpirun``: nodes and ranks per node come from the
    allocation, the MPI reaches the nodes through Slurm (no ssh knob given: the nodes' sshd
    listens on another port), one rank runs on each node, the weights are two local ranks'
    and nothing of the run is left."""
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    result, seen = salloc_held(
        slurm,
        tmp_path,
        "launcher=mpirun",
        "horovod.network_interface=tnt0",
        *DETERMINISTIC,
        search=mpirun_in_slurm_while_running,
    )
    assert_succeeded(result)
    assert ran_on_both_nodes(result), result.stdout[-3000:]
    assert_ranks_under_slurm_steps(seen)
    run_dir = run_dir_of(result)
    command = " ".join(Plan.load(run_dir / "plan.json").launch_command)
    hosts = "-H tnt-h1:1,tnt-h2:1" if mpi == "openmpi" else "-hosts tnt-h1,tnt-h2"
    assert hosts in command, command
    config = OmegaConf.load(run_dir / "config.yaml")
    assert (config.nodes, config.ranks_per_node, config.launcher) == (2, 1, "mpirun")
    assert_same_weights(final_weights(result), two_local_ranks_weights)
    assert_nothing_left(run_dir, seen, 0.0, 5.0)  # salloc ended: 5 s for slurmstepd's exit
