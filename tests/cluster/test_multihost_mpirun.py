"""``launcher=mpirun`` across the two network-namespace hosts (scripts/netns_hosts.sh):
mpirun reaches each host over ssh, as on a cluster (Open MPI's orted, MPICH's
hydra_pmi_proxy started there), one rank per host, under each MPI: training, a killed
rank, a SIGKILLed driver."""

from __future__ import annotations

import time

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.bounds import AFTER_RANK_FAILURE_S
from tests.helpers.commands import tntrun_cli
from tests.helpers.driving import (
    LONG_RUN,
    Driver,
    assert_nothing_left,
    fault,
    run_until,
    sigkill_the_driver,
    the_run,
)
from tests.helpers.mpi import MPIS, mpi_first_on_path
from tests.helpers.netns import NetnsHosts
from tests.helpers.processes import Process, describe
from tests.helpers.runs import DETERMINISTIC, assert_same_weights, final_weights, run_dir_of
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow

# Found beside the ranks while they run: each remote rank's parent is its MPI's daemon,
# started over ssh by mpirun.
MPI_REMOTE = ("driver", "mpirun", "mpi daemon")


def over_mpirun(hosts: NetnsHosts) -> tuple[str, ...]:
    return ("launcher=mpirun", *hosts.one_rank_per_host())


def assert_one_rank_per_host(seen: list[Process]) -> None:
    """The positive control found rank r under an MPI daemon, on host r (its hostname)."""
    ranks = sorted((p for p in seen if p.role.startswith("rank ")), key=lambda p: p.role)
    daemons = {p.pid for p in seen if p.role == "mpi daemon"}
    assert [p.role for p in ranks] == ["rank 0", "rank 1"], describe(seen)
    assert all(p.ppid in daemons for p in ranks), describe(seen)


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_two_hosts_train_under_mpirun_like_two_local_ranks(
    netns_hosts, two_local_ranks_weights, tmp_path, monkeypatch, mpi
):
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    result = tntrun_cli(tmp_path, *over_mpirun(netns_hosts), *DETERMINISTIC)
    assert_succeeded(result)
    assert "rank 0/2: local rank 0, host tnt-h1" in result.stdout
    assert "rank 1/2: local rank 0, host tnt-h2" in result.stdout
    command = " ".join(Plan.load(run_dir_of(result) / "plan.json").launch_command)
    hosts = "-H 10.77.0.1:1,10.77.0.2:1" if mpi == "openmpi" else "-hosts 10.77.0.1,10.77.0.2"
    assert hosts in command, command
    assert_same_weights(final_weights(result), two_local_ranks_weights)


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_a_rank_killed_on_the_second_host_fails_the_mpirun_run_and_leaves_nothing(
    netns_hosts, tmp_path, monkeypatch, mpi
):
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    code, seconds, output, seen = run_until(
        tmp_path,
        (*over_mpirun(netns_hosts), *LONG_RUN, *fault("kill")),
        "injecting fault",
        roles=MPI_REMOTE,
    )
    assert_one_rank_per_host(seen)
    fault_at = time.monotonic() - seconds
    assert code != 0 and seconds < AFTER_RANK_FAILURE_S, f"{seconds:.1f} s to end after the fault"
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    # One pid namespace: the search sees both hosts' ranks and MPI daemons.
    assert_nothing_left(run_dir, seen, fault_at, AFTER_RANK_FAILURE_S)


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_a_sigkilled_driver_of_a_two_host_mpirun_run_leaves_no_rank_or_daemon(
    netns_hosts, tmp_path, monkeypatch, mpi
):
    """The driver SIGKILLed (the OOM killer, Slurm's KillWait): mpirun follows it (the
    parent-death signal), and on both hosts the MPI's daemon started over ssh (orted,
    hydra_pmi_proxy) and its rank end within the lost-driver bound, found by the same search
    that saw them run."""
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    with Driver(tmp_path, (*over_mpirun(netns_hosts), *LONG_RUN), MPI_REMOTE) as driver:
        _, outlived = sigkill_the_driver(tmp_path, driver)
    assert_one_rank_per_host(driver.seen)
    print(f"\n[lost driver, two hosts, {mpi}] ranks and daemons outlived it by {outlived:.1f} s")
