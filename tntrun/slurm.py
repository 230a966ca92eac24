"""Ranks started by Slurm's ``srun``: Horovod's Gloo environment from Slurm's.

With ``launcher=srun`` every task runs ``python -m tntrun.worker``; before
Horovod starts, the worker maps SLURM_PROCID and friends to the HOROVOD_*
variables horovodrun would have set. The rendezvous address and port come from
the driver (``tntrun.rendezvous``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence


def horovod_env(slurm: Mapping[str, str], hosts: Sequence[tuple[str, int]]) -> dict[str, str]:
    """HOROVOD_* rank variables for this Slurm task (block distribution over ``hosts``)."""
    rank, size = int(slurm["SLURM_PROCID"]), int(slurm["SLURM_NTASKS"])
    node = int(slurm.get("SLURM_NODEID", 0))
    local_rank = int(slurm.get("SLURM_LOCALID", 0))
    per_node = hosts[node][1]
    if rank != node * per_node + local_rank:
        raise RuntimeError(
            f"srun placed task {rank} as local task {local_rank} of node {node}, not in blocks of "
            f"{per_node}: run srun with --distribution=block (tntrun's launch does)"
        )
    return {
        "HOROVOD_HOSTNAME": hosts[node][0],
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(size),
        "HOROVOD_LOCAL_RANK": str(local_rank),
        "HOROVOD_LOCAL_SIZE": str(per_node),
        "HOROVOD_CROSS_RANK": str(node),
        "HOROVOD_CROSS_SIZE": str(len(hosts)),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


def _first_count(value: str) -> int:
    """Slurm's per-node counts look like "4", "4(x2)" or "gpu:a100:4": the count."""
    return int(re.findall(r"\d+", value.split("(")[0])[-1])


def allocation_layout(env: Mapping[str, str], given: set[str]) -> dict[str, int]:
    """Layout keys taken from the Slurm allocation, for those not given on the command line."""
    if not env.get("SLURM_JOB_NODELIST"):
        return {}
    from tntrun.layout import expand_slurm_nodelist

    layout = {}
    if "nodes" not in given:
        layout["nodes"] = len(expand_slurm_nodelist(env["SLURM_JOB_NODELIST"]))
    if "gpus" not in given and env.get("SLURM_GPUS_PER_NODE"):
        layout["gpus"] = _first_count(env["SLURM_GPUS_PER_NODE"])
    if "ranks_per_node" not in given and env.get("SLURM_NTASKS_PER_NODE"):
        layout["ranks_per_node"] = _first_count(env["SLURM_NTASKS_PER_NODE"])
    return layout
