"""MPI's task variables: the place of a rank that ``mpirun``/``mpiexec`` started.

Never detected and allocating nothing (an MPI runs inside whatever gives the
hosts: a host list, PBS, Slurm); named to the ranks by ``launcher=mpirun``
through ``TNTRUN_RANK_ENVIRONMENT`` so that each rank maps the variables of the
MPI that started it (Open MPI, MPICH's Hydra, Cray PALS) to Horovod's before
Horovod starts. Horovod itself stays a Gloo build: no MPI_Init anywhere.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tntrun.environments import ClusterEnvironment, horovod_rank_variables
from tntrun.environments.launchers import MPIRUN

# (rank, size, local rank) of each MPI's launcher, in the order they are looked for. PALS
# sets no size of its own (Cray's PMI sets PMI_SIZE beside it); None: the plan's world.
TASK_VARIABLES: tuple[tuple[str, str | None, str], ...] = (
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("PALS_RANKID", None, "PALS_LOCAL_RANKID"),
)


class MpiTasks(ClusterEnvironment):
    name = "mpi"
    title = "MPI"
    # MPICH's (Open MPI's are among the launchers' variables of tntrun.ranks already).
    rank_variables = ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        """Never: ``launcher=mpirun`` names it to the ranks."""
        return False

    def rank_environment(self, hosts: Sequence[tuple[str, int]]) -> dict[str, str]:
        rank, size, local_rank = task_place(self.environ, sum(slots for _, slots in hosts))
        return block_placement(hosts, rank, size, local_rank)


def task_place(environ: Mapping[str, str], world: int) -> tuple[int, int, int]:
    """(rank, size, local rank) from the first MPI whose variables this process has."""
    for rank, size, local in TASK_VARIABLES:
        if environ.get(rank) and environ.get(local):
            found_size = int(environ[size]) if size and environ.get(size) else world
            return int(environ[rank]), found_size, int(environ[local])
    names = ", ".join(f"{rank}/{local}" for rank, _, local in TASK_VARIABLES)
    raise RuntimeError(f"started as an MPI rank but none of {names} is set: start it with {MPIRUN}")


def block_placement(
    hosts: Sequence[tuple[str, int]], rank: int, size: int, local_rank: int
) -> dict[str, str]:
    """HOROVOD_* variables of ``rank`` when the MPI placed ranks in blocks over ``hosts``."""
    world = sum(slots for _, slots in hosts)
    if size != world:
        raise RuntimeError(
            f"{MPIRUN} started {size} ranks, the plan has {world}: launch as planned"
        )
    node, first = 0, 0
    while rank >= first + hosts[node][1]:
        first += hosts[node][1]
        node += 1
    if rank - first != local_rank:
        raise RuntimeError(
            f"{MPIRUN} placed rank {rank} as local rank {local_rank} of node {node}, not in "
            f"blocks of {hosts[node][1]}: map by slot (tntrun's {MPIRUN} command does)"
        )
    return horovod_rank_variables(hosts, node, rank, local_rank)
