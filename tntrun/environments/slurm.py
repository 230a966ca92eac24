"""Slurm: the allocation (``SLURM_JOB_NODELIST`` and per-node counts), the job, requeue.

Read from the variables Slurm sets in a job (salloc, sbatch, srun, submitit),
without calling scontrol, except to requeue.
"""

from __future__ import annotations

import logging
import re
import signal
from collections.abc import Mapping, Sequence

from tntrun.environments import Allocation, ClusterEnvironment, horovod_rank_variables, requeue_job
from tntrun.environments.launchers import SRUN

log = logging.getLogger(__name__)


class SlurmEnvironment(ClusterEnvironment):
    name = "slurm"
    title = "Slurm"
    rank_variables = ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID")

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return bool(environ.get("SLURM_JOB_NODELIST"))

    def allocation(self) -> Allocation | None:
        env = self.environ
        if not env.get("SLURM_JOB_NODELIST"):
            return None
        gpus = env.get("SLURM_GPUS_PER_NODE")
        return Allocation(
            "the Slurm allocation",
            tuple((host, None) for host in expand_slurm_nodelist(env["SLURM_JOB_NODELIST"])),
            exact=False,
            tasks_per_node=tuple(allocated_tasks_per_node(env)),
            gpus_per_node=_first_count(gpus) if gpus else None,
            # submitit's Slurm executor sized the allocation from this very config (tntrun_slurm)
            sized_by_config=env.get("SUBMITIT_EXECUTOR") == "slurm",
        )

    def job_id(self) -> str | None:
        return self.environ.get("SLURM_JOB_ID") or None

    def restart_count(self) -> int:
        return int(self.environ.get("SLURM_RESTART_COUNT") or 0)

    def requeue(self, received: signal.Signals | None) -> None:
        """After a time-limit signal (any stop signal but SIGTERM) in a batch job: requeue
        the job, which continues the run (Slurm requeues preempted jobs itself)."""
        job = self.job_id()
        if received in (None, signal.SIGTERM) or not job:
            return
        requeue_job(
            ["scontrol", "requeue", job], f"{self.title} job {job}", "submit with --requeue"
        )

    def tags(self) -> dict[str, str]:
        job = self.job_id()
        return {"slurm_job_id": job} if job else {}

    def rank_environment(self, hosts: Sequence[tuple[str, int]]) -> dict[str, str]:
        return horovod_env(self.environ, hosts)


def horovod_env(slurm: Mapping[str, str], hosts: Sequence[tuple[str, int]]) -> dict[str, str]:
    """HOROVOD_* rank variables for this Slurm task (block distribution over ``hosts``)."""
    rank, size = int(slurm["SLURM_PROCID"]), int(slurm["SLURM_NTASKS"])
    node = int(slurm.get("SLURM_NODEID", 0))
    local_rank = int(slurm.get("SLURM_LOCALID", 0))
    per_node = hosts[node][1]
    if rank != node * per_node + local_rank:
        raise RuntimeError(
            f"{SRUN} placed task {rank} as local task {local_rank} of node {node}, not in blocks "
            f"of {per_node}: run {SRUN} with --distribution=block (tntrun's launch does)"
        )
    if size != sum(slots for _, slots in hosts):
        planned = sum(slots for _, slots in hosts)
        raise RuntimeError(
            f"{SRUN} started {size} tasks, the plan has {planned}: launch as planned"
        )
    return horovod_rank_variables(hosts, node, rank, local_rank)


def expand_slurm_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm node list such as ``node[01-03,07],gpu5`` without calling scontrol."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,\[]*)", nodelist):
        prefix, ranges, suffix = match.group(1), match.group(2), match.group(3)
        if not prefix.strip():
            continue
        if ranges is None:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            if not last:
                hosts.append(f"{prefix}{first}{suffix}")
                continue
            width = len(first)
            hosts.extend(
                f"{prefix}{str(i).zfill(width)}{suffix}" for i in range(int(first), int(last) + 1)
            )
    return hosts


def _first_count(value: str) -> int:
    """Slurm's per-node counts look like "4", "4(x2)" or "gpu:a100:4": the count."""
    return int(re.findall(r"\d+", value.split("(")[0])[-1])


def allocated_tasks_per_node(env: Mapping[str, str]) -> list[int]:
    """The allocation's tasks on each node, from SLURM_TASKS_PER_NODE (set for every
    allocation), else SLURM_NTASKS_PER_NODE; [] outside one."""
    return _per_node_counts(env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE"))


def allocated_cpus_per_node(env: Mapping[str, str]) -> list[int]:
    """The allocation's CPUs on each node (SLURM_JOB_CPUS_PER_NODE); [] outside one."""
    return _per_node_counts(env.get("SLURM_JOB_CPUS_PER_NODE"))


def _per_node_counts(value: str | None) -> list[int]:
    """Slurm's compressed per-node counts: "2(x3),1" -> [2, 2, 2, 1]; [] if absent."""
    counts: list[int] = []
    for part in filter(None, (value or "").split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            return []
        counts += [int(match[1])] * int(match[2] or 1)
    return counts
