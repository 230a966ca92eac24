"""Cluster environments: where a run's hosts, rank variables and job identity come from.

One module per environment (Slurm, a static host list, MPI's tasks, the local machine),
each a :class:`ClusterEnvironment` subclass registered in :data:`ENVIRONMENTS` in
the order they are detected. The driver detects the environment before planning
and hands its :class:`Allocation` to the planner as a fact, so planning stays
pure; the environment also requeues a job, tells its job id and restart count,
names the tags a run records, and maps its task variables to Horovod's on a rank.
Adding an environment (PBS, LSF) is one module and a line in :data:`ENVIRONMENTS`.
"""

from __future__ import annotations

import inspect
import logging
import signal
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from tntrun.registry import find_class

log = logging.getLogger(__name__)

ENVIRONMENTS = {
    "slurm": "tntrun.environments.slurm.SlurmEnvironment",
    "pbs": "tntrun.environments.pbs.PbsEnvironment",
    "static_hosts": "tntrun.environments.static_hosts.StaticHosts",
    "mpi": "tntrun.environments.mpi.MpiTasks",
    "local": "tntrun.environments.local.LocalEnvironment",
}


class LayoutError(ValueError):
    """A layout that cannot run; the message names the key and the fix."""


@dataclass(frozen=True)
class Allocation:
    """The hosts an environment gives a run, and what it allocated on each (facts)."""

    source: str  # how messages name it: "hosts", "hostfile", "the Slurm allocation"
    hosts: tuple[tuple[str, int | None], ...]  # (host, slots or None for any)
    exact: bool = True  # a listed host per node; a scheduler's allocation may hold more
    tasks_per_node: tuple[int, ...] = ()
    gpus_per_node: int | None = None
    sized_by_config: bool = False  # allocated from this very config: fills no layout key
    launcher: str | None = None  # how the scheduler's jobs start ranks (PBS: mpirun)

    def layout(self, given: set[str]) -> dict[str, int | str]:
        """Layout keys the allocation fills, for those not given on the command line (and
        the launcher its scheduler starts ranks with)."""
        if self.sized_by_config or not self.hosts:
            return {}
        layout: dict[str, int | str] = {} if "nodes" in given else {"nodes": len(self.hosts)}
        if self.launcher and "launcher" not in given:
            layout["launcher"] = self.launcher
        if not self.exact:  # a scheduler's allocation also says what it gave each node
            if "gpus" not in given and self.gpus_per_node:
                layout["gpus"] = self.gpus_per_node
            if "ranks_per_node" not in given and self.tasks_per_node:
                layout["ranks_per_node"] = min(self.tasks_per_node)
        return layout


class ClusterEnvironment(ABC):
    """What a cluster environment tells a run. Subclasses say whether they are detected
    (:meth:`detect`, abstract: one without it is refused by name, never silently skipped)
    and override what else they know."""

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""  # as messages name it: "Slurm"
    # The task variables (rank, size, local rank) its own launcher sets on every rank.
    rank_variables: ClassVar[tuple[str, str, str] | None] = None

    def __init__(
        self, environ: Mapping[str, str], requested: Mapping[str, Any] | None = None
    ) -> None:
        # ``requested``: the hosts the config lists (``hosts``, ``hostfile``), if any.
        self.environ, self.requested = environ, requested or {}

    @classmethod
    @abstractmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        """Whether this process runs in this environment (from its variables)."""

    def allocation(self) -> Allocation | None:
        """The hosts it gives the run (None: only this machine); raises LayoutError."""
        return None

    def job_id(self) -> str | None:
        return None

    def restart_count(self) -> int:
        """How often the scheduler restarted (requeued) this job."""
        return 0

    def requeued_job(self) -> str | None:
        """The job id when the scheduler restarted this job (a run to continue), else None."""
        return self.job_id() if self.restart_count() > 0 else None

    def requeue(self, received: signal.Signals | None) -> None:
        """After a stop signal: ask the scheduler to run the job again, where it can."""
        return None  # an environment without a scheduler: resume=auto continues the run

    def tags(self) -> dict[str, str]:
        """What a run records about the job (a requeued job finds its run by it)."""
        return {}

    def rank_environment(self, hosts: Sequence[tuple[str, int]]) -> dict[str, str]:
        """On a rank its launcher started: HOROVOD_* variables from the task variables."""
        return {}


def _environment_class(name: str) -> type[ClusterEnvironment]:
    found = find_class(name, ENVIRONMENTS, ClusterEnvironment)
    if found is None:
        raise ValueError(f"no cluster environment {name!r}: choose {', '.join(ENVIRONMENTS)}")
    if inspect.isabstract(found):
        missing = ", ".join(sorted(found.__abstractmethods__))
        raise TypeError(f"cluster environment {name!r} ({found.__qualname__}) lacks {missing}")
    return found


def environment_named(
    name: str, environ: Mapping[str, str], requested: Mapping[str, Any] | None = None
) -> ClusterEnvironment:
    """The environment registered as ``name`` (or at a dotted path)."""
    return _environment_class(name)(environ, requested)


def detect(environ: Mapping[str, str]) -> ClusterEnvironment:
    """The first registered environment that detects itself (the local machine at last)."""
    for name in ENVIRONMENTS:
        found = _environment_class(name)
        if found.detect(environ):
            return found(environ)
    return environment_named("local", environ)


def allocation_for(requested: Mapping[str, Any], allocated: Allocation | None) -> Allocation | None:
    """The run's hosts: those the config lists (``requested``: ``hosts``, ``hostfile``),
    else the detected environment's allocation (``allocated``). Raises LayoutError."""
    if requested.get("hosts") or requested.get("hostfile"):
        return environment_named("static_hosts", {}, requested).allocation()
    return allocated


def layout_from_hosts(
    requested: Mapping[str, Any], allocated: Allocation | None, given: set[str]
) -> dict[str, int | str]:
    """Layout keys not given on the command line that the hosts fill in: a host list sets
    ``nodes`` (``tntrun -m 'hosts=[a],[a,b]'`` sweeps 1 and 2 nodes), a scheduler's
    allocation (``allocated``: the detected environment's) what it allocated."""
    try:
        allocation = allocation_for(requested, allocated)
    except LayoutError:
        return {}  # a missing or malformed hostfile: planning reports it
    return allocation.layout(given) if allocation else {}


def rank_variable_names() -> list[tuple[str, str, str]]:
    """(rank, size, local rank) task variables of every registered environment."""
    named = (_environment_class(name).rank_variables for name in ENVIRONMENTS)
    return [names for names in named if names]


def horovod_rank_variables(
    hosts: Sequence[tuple[str, int]], node: int, rank: int, local_rank: int
) -> dict[str, str]:
    """The HOROVOD_* variables horovodrun would give ``rank`` (local rank ``local_rank`` on
    node ``node`` of ``hosts``), for ranks another launcher started (srun, mpirun): they
    meet at tntrun's Gloo rendezvous server."""
    return {
        "HOROVOD_HOSTNAME": hosts[node][0],
        "HOROVOD_RANK": str(rank),
        "HOROVOD_SIZE": str(sum(slots for _, slots in hosts)),
        "HOROVOD_LOCAL_RANK": str(local_rank),
        "HOROVOD_LOCAL_SIZE": str(hosts[node][1]),
        "HOROVOD_CROSS_RANK": str(node),
        "HOROVOD_CROSS_SIZE": str(len(hosts)),
        "HOROVOD_CONTROLLER": "gloo",
        "HOROVOD_CPU_OPERATIONS": "gloo",
    }


def requeue_job(command: list[str], job: str, fix: str) -> None:
    """Ask the scheduler to run ``job`` again (``command``), which continues the run; one
    line either way (``fix``: what makes the job requeueable)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the requeue ends this job: let it
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode == 0:
        log.info(f"tntrun: requeued {job}; it continues this run")
    else:
        log.warning(
            f"tntrun: could not requeue {job} ({done.stderr.strip()}): {fix}, or continue "
            "with resume=auto"
        )
