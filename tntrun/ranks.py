"""Where this process stands in the job: rank, size, local rank, master rank.

Horovod's launcher exports ``HOROVOD_RANK``, ``HOROVOD_SIZE`` and
``HOROVOD_LOCAL_RANK`` to each rank (MPI's its ``OMPI_COMM_WORLD_*``; a cluster
environment's launcher its task variables, such as Slurm's ``SLURM_PROCID``:
:mod:`tntrun.environments`). Reading them keeps this module free of TensorFlow
and Horovod imports, so user code may call it anywhere; outside a launch it is
rank 0 of 1.
"""

from __future__ import annotations

import os

from tntrun.environments import rank_variable_names

MASTER_RANK = 0


def _env_int(*names: str, default: int) -> int:
    for name in names:
        value = os.environ.get(name)
        if value is not None and value.strip():
            return int(value)
    return default


def _names(position: int, *launchers: str) -> list[str]:
    """The launchers' variable, then each cluster environment's, for rank, size or local rank."""
    return [*launchers, *(names[position] for names in rank_variable_names())]


def get_rank() -> int:
    """This process's rank in ``[0, get_size())``."""
    return _env_int(*_names(0, "HOROVOD_RANK", "OMPI_COMM_WORLD_RANK"), default=0)


def get_size() -> int:
    """Number of ranks in the job."""
    return _env_int(*_names(1, "HOROVOD_SIZE", "OMPI_COMM_WORLD_SIZE"), default=1)


def get_local_rank() -> int:
    """This process's rank among the ranks on its node."""
    return _env_int(*_names(2, "HOROVOD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK"), default=0)


def get_master_rank() -> int:
    """The rank that logs, checkpoints and prints: always 0."""
    return MASTER_RANK


def is_master_rank() -> bool:
    """True on the master rank (and in a plain, unlaunched process)."""
    return get_rank() == MASTER_RANK
