"""PBS Professional (and OpenPBS): the allocation from ``$PBS_NODEFILE``, the job, requeue.

Read from what PBS gives a job (``PBS_JOBID``, the node file with one line per MPI
slot: a host once per ``mpiprocs`` of its chunk), calling PBS's commands only to
read the job's ``run_count`` and to requeue. Under PBS the ranks are started by
the site's MPI: the allocation names ``mpirun`` as the launcher unless
``launcher=`` is given.
"""

from __future__ import annotations

import logging
import re
import shutil
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path

from tntrun.environments import Allocation, ClusterEnvironment, LayoutError, requeue_job
from tntrun.environments.launchers import MPIRUN

log = logging.getLogger(__name__)

RUN_COUNT = re.compile(r"^\s*run_count\s*=\s*(\d+)\s*$", re.MULTILINE)  # qstat -f's line


class PbsEnvironment(ClusterEnvironment):
    name = "pbs"
    title = "PBS"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return bool(environ.get("PBS_JOBID"))

    def allocation(self) -> Allocation | None:
        nodefile = self.environ.get("PBS_NODEFILE")
        if not nodefile:
            return None
        path = Path(nodefile)
        if not path.is_file():
            raise LayoutError(
                f"PBS_NODEFILE={path} does not exist: run inside a PBS job (qsub), or unset "
                "PBS_NODEFILE and PBS_JOBID to run outside PBS"
            )
        hosts = slots_per_host(path.read_text())
        if not hosts:
            raise LayoutError(
                f"PBS_NODEFILE={path} lists no host: check the job's select (qsub -l "
                "select=<nodes>:mpiprocs=<ranks>), or unset PBS_NODEFILE to run here"
            )
        return Allocation(
            "the PBS allocation",
            tuple(hosts),
            exact=False,
            tasks_per_node=tuple(slots for _, slots in hosts),
            launcher=MPIRUN,
        )

    def job_id(self) -> str | None:
        return self.environ.get("PBS_JOBID") or None

    def restart_count(self) -> int:
        """Runs before this one: ``PBS_RUN_COUNT`` where a site sets it, else the job's
        ``run_count`` attribute (``qstat -f``), counting this run; 0 without either."""
        given = self.environ.get("PBS_RUN_COUNT")
        if given:
            if not given.strip().isdigit():
                raise LayoutError(
                    f"PBS_RUN_COUNT={given} is not a number of runs: unset it (the job's "
                    "run_count is then read with qstat -f) or give an integer, e.g. 1"
                )
            return max(0, int(given) - 1)
        job = self.job_id()
        if not job or shutil.which("qstat") is None:
            return 0
        done = subprocess.run(["qstat", "-f", job], capture_output=True, text=True, check=False)
        return max(0, run_count(done.stdout) - 1) if done.returncode == 0 else 0

    def requeue(self, received: signal.Signals | None) -> None:
        """After a stop signal other than SIGTERM (qdel's, or the end of the job): requeue
        the job with ``qrerun``, which continues the run; say how to continue else."""
        job = self.job_id()
        if received in (None, signal.SIGTERM) or not job:
            return
        if shutil.which("qrerun") is None:
            log.warning(
                f"tntrun: could not requeue PBS job {job} (no qrerun on PATH): continue "
                "with resume=auto"
            )
            return
        requeue_job(["qrerun", job], f"{self.title} job {job}", "submit with -r y")

    def tags(self) -> dict[str, str]:
        job = self.job_id()
        return {"pbs_job_id": job} if job else {}


def slots_per_host(nodefile: str) -> list[tuple[str, int]]:
    """Hosts in first-seen order with their line counts: PBS writes a host once per slot."""
    counts: dict[str, int] = {}
    for line in nodefile.splitlines():
        host = line.split("#", 1)[0].strip()
        if host:
            counts[host] = counts.get(host, 0) + 1
    return list(counts.items())


def run_count(qstat_full: str) -> int:
    """The job's ``run_count`` from ``qstat -f`` (0 when absent)."""
    found = RUN_COUNT.search(qstat_full)
    return int(found.group(1)) if found else 0
