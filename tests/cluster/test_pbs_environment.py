"""PBS without a PBS server: the variables and node file PBS documents for a job, read as
the allocation, the job and its tags, mpirun as its launcher; what a layout beyond the
node file's slots gets; requeue without qrerun. (No PBS server runs here; the real run
under such a job, with mpirun on the netns hosts, is in test_pbs_mpirun.py.)"""

from __future__ import annotations

import logging
import signal

import pytest

from tests.helpers.plans import plan_for
from tntrun.environments import LayoutError, detect, layout_from_hosts
from tntrun.environments.pbs import PbsEnvironment, run_count, slots_per_host
from tntrun.errors import PlanError
from tntrun.planning.plan import MachineFacts

# A node file as PBS writes it for select=2:ncpus=4:mpiprocs=2: each host once per slot.
NODEFILE = "node07.cluster\nnode07.cluster\nnode12.cluster\nnode12.cluster\n"


def pbs_job(tmp_path, nodefile: str = NODEFILE, **more: str) -> dict[str, str]:
    path = tmp_path / "aaaa1234.pbs01"
    path.write_text(nodefile)
    return {"PBS_JOBID": "1234.pbs01", "PBS_NODEFILE": str(path), **more}


def test_a_pbs_job_is_detected_by_its_job_id(tmp_path):
    assert detect(pbs_job(tmp_path)).name == "pbs"
    assert detect({"PBS_O_WORKDIR": "/home/u"}).name == "local"  # no job: not PBS


def test_the_node_file_gives_hosts_slots_and_mpirun(tmp_path):
    allocation = PbsEnvironment(pbs_job(tmp_path)).allocation()
    assert allocation.hosts == (("node07.cluster", 2), ("node12.cluster", 2))
    assert layout_from_hosts({}, detect(pbs_job(tmp_path)).allocation(), set()) == {
        "nodes": 2,
        "ranks_per_node": 2,
        "launcher": "mpirun",
    }
    given = {"launcher", "ranks_per_node"}  # on the command line: kept
    assert layout_from_hosts({}, detect(pbs_job(tmp_path)).allocation(), given) == {"nodes": 2}


def test_slots_are_counted_per_host_in_first_seen_order():
    assert slots_per_host("b\na\nb\n\n# comment\na\na\n") == [("b", 2), ("a", 3)]


def test_more_ranks_than_the_node_file_has_slots_is_one_line(compose_cfg, tmp_path):
    env = pbs_job(tmp_path, "tnt-h1\ntnt-h2\n")
    facts = MachineFacts(cores_per_node=2, env=env, allocation=PbsEnvironment(env).allocation())
    with pytest.raises(PlanError) as refused:
        plan_for(compose_cfg, "nodes=2", "ranks_per_node=2", facts=facts)
    assert str(refused.value) == (
        "the PBS allocation: host tnt-h1 has 1 slot(s) but each node runs 2 ranks: raise "
        "its slots or lower ranks_per_node/gpus to 1"
    )


def test_a_missing_node_file_is_one_line(tmp_path):
    env = {"PBS_JOBID": "1.s", "PBS_NODEFILE": str(tmp_path / "gone")}
    with pytest.raises(LayoutError, match=r"^PBS_NODEFILE=.*/gone does not exist: run inside"):
        PbsEnvironment(env).allocation()


def test_the_job_id_tags_the_run_and_its_run_count_tells_a_rerun(tmp_path):
    job = PbsEnvironment(pbs_job(tmp_path))
    assert job.job_id() == "1234.pbs01" and job.tags() == {"pbs_job_id": "1234.pbs01"}
    assert job.restart_count() == 0 and job.requeued_job() is None  # no qstat here
    rerun = PbsEnvironment(pbs_job(tmp_path, PBS_RUN_COUNT="2"))
    assert rerun.restart_count() == 1 and rerun.requeued_job() == "1234.pbs01"
    qstat = (
        "Job Id: 1234.pbs01\n    Job_Name = train.pbs\n    run_count = 3\n    Rerunable = True\n"
    )
    assert run_count(qstat) == 3 and run_count("Job Id: 1\n") == 0


def test_without_qrerun_a_preempted_job_says_to_resume(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        PbsEnvironment(pbs_job(tmp_path)).requeue(signal.SIGUSR1)
        PbsEnvironment(pbs_job(tmp_path)).requeue(signal.SIGTERM)  # qdel: ends the run
    assert [r.getMessage() for r in caplog.records] == [
        "tntrun: could not requeue PBS job 1234.pbs01 (no qrerun on PATH): continue with "
        "resume=auto"
    ]
