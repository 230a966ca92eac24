"""``launcher=mpirun`` with real ranks, under Open MPI and under MPICH: the default
experiment, a killed rank, and the refusal when no MPI is installed."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.bounds import AFTER_RANK_FAILURE_S
from tests.helpers.commands import tntrun_cli
from tests.helpers.driving import (
    LONG_RUN,
    assert_ctrl_c_stops_every_rank,
    assert_nothing_left,
    fault,
    run_until,
    the_run,
)
from tests.helpers.mpi import MPIS, mpi_first_on_path
from tests.helpers.paths import BIN
from tests.helpers.runs import run_dir_of
from tntrun.contract.run_files import RANK_DONE
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow

# Found beside the ranks while they run: the driver and mpirun (ranks on this host are its
# children, or its daemon's: MPICH's hydra_pmi_proxy).
MPIRUN = ("driver", "mpirun")


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_a_killed_rank_ends_the_run_failed_and_leaves_nothing(tmp_path, monkeypatch, mpi):
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    code, seconds, output, seen = run_until(
        tmp_path, ("launcher=mpirun", *LONG_RUN, *fault("kill")), "injecting fault", roles=MPIRUN
    )
    assert code != 0 and seconds < AFTER_RANK_FAILURE_S, f"{seconds:.1f} s to end after the fault"
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED"
    assert_nothing_left(run_dir, seen, time.monotonic(), 0)  # the driver waited for them all
    # Open MPI names the rank that ended first; MPICH's Hydra names none and SIGKILLs the
    # others at once, so rank 0 may not live to log the lost connection that marks it a
    # consequence: either rank may then be named.
    named = {"openmpi": {"1"}, "mpich": {"0", "1"}}[mpi]
    assert run.data.tags["failure.rank"] in named, run.data.tags.get("failure.reason")


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_ctrl_c_stops_every_mpirun_rank(tmp_path, monkeypatch, mpi):
    """SIGINT to the driver: mpirun is stopped, its ranks with it: KILLED, nothing left."""
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    assert_ctrl_c_stops_every_rank(tmp_path, "launcher=mpirun", roles=MPIRUN)


def test_without_an_mpi_the_run_is_refused_in_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(BIN))  # the environment's commands, no MPI
    result = tntrun_cli(tmp_path, "launcher=mpirun")
    assert_exit(result, 2)
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .endswith(
            "launcher=mpirun needs an MPI: no mpirun or mpiexec on PATH; install one "
            "(apt-get install openmpi-bin, or mpich) or use launcher=horovodrun"
        )
    )


@pytest.mark.parametrize("mpi", sorted(MPIS))
def test_the_default_experiment_finishes_under_each_mpi_which_binds_its_ranks_to_sockets(
    run_tntrun, tmp_path, monkeypatch, mpi
):
    """The default experiment with pin_to_socket=true (one launch proves both): the MPI binds
    each rank to its socket, so the ranks do not re-execute under numactl, which need not be
    installed (this machine has none); on one socket that is a note."""
    real = mpi_first_on_path(mpi, tmp_path, monkeypatch)
    pinned = ("launcher=mpirun", "pin_to_socket=true", "sockets_per_node=1")
    shown = run_tntrun(*pinned, "dry_run=true")
    assert_succeeded(shown)
    assert "rank 1, host localhost, local rank 1, socket 0, bound by mpirun" in shown.stdout
    assert "numactl" not in shown.stdout
    result = run_tntrun(*pinned, "train.epochs=1")
    assert_succeeded(result)
    assert "pin_to_socket=true on nodes of one socket" in result.stderr
    run_dir = run_dir_of(result)
    plan = Plan.load(run_dir / "plan.json")
    assert plan.bound_by == "mpirun"
    assert Path(plan.launch_command[0]).name == real
    assert {"--bind-to socket", "-bind-to socket"} & {
        " ".join(plan.launch_command[i : i + 2]) for i in range(len(plan.launch_command))
    }
    _, _, run = the_run(tmp_path, result.stdout)
    assert run.info.status == "FINISHED"
    assert run.data.params["plan.world_size"] == "2"
    assert "rank 1/2: local rank 1, host" in result.stdout  # Horovod's place, from MPI's
    for rank in (0, 1):  # each rank's lines, split by the MPI's label
        assert RANK_DONE in (run_dir / "logs" / f"rank.{rank}.log").read_text()
