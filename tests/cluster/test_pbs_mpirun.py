"""A run inside a PBS job as PBS documents it (``PBS_JOBID``, ``PBS_NODEFILE`` listing the
netns hosts, one line per slot), with no PBS server: the node file is the layout,
mpirun the launcher, and Open MPI reaches the hosts over ssh, as on a PBS cluster."""

from __future__ import annotations

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.driving import the_run
from tests.helpers.mpi import mpi_first_on_path
from tests.helpers.runs import run_dir_of
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow


def test_a_pbs_job_trains_on_its_node_file_hosts_with_mpirun(netns_hosts, tmp_path, monkeypatch):
    mpi_first_on_path("openmpi", tmp_path, monkeypatch)
    nodefile = tmp_path / "4242.pbs01.nodes"
    nodefile.write_text("".join(f"{name}\n" for name in netns_hosts.names))  # 1 slot each
    monkeypatch.setenv("PBS_JOBID", "4242.pbs01")
    monkeypatch.setenv("PBS_NODEFILE", str(nodefile))
    result = tntrun_cli(tmp_path, "train.epochs=1", *netns_hosts.ssh_overrides())
    assert_succeeded(result)
    plan = Plan.load(run_dir_of(result) / "plan.json")
    assert plan.launcher == "mpirun" and (plan.nodes, plan.ranks_per_node) == (2, 1)
    assert "-H tnt-h1:1,tnt-h2:1" in " ".join(plan.launch_command)
    assert "rank 1/2: local rank 0, host tnt-h2" in result.stdout
    _, _, run = the_run(tmp_path, result.stdout)
    assert run.info.status == "FINISHED"
    assert run.data.tags["pbs_job_id"] == "4242.pbs01"
