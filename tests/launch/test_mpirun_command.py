"""``launcher=mpirun`` without launching: the command rendered for each MPI from a plan's
LaunchSpec, what is refused in one line, how a rank takes its place from MPI's variables,
and the MPIs' output labels split into per-rank logs (pure functions; the real runs are
in test_mpirun.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from omegaconf import OmegaConf

from tests.helpers.plans import with_horovod
from tntrun.config.schema import HorovodConfig
from tntrun.contract.rank_logs import RANK_LINE, RankLogWriter, find_failure
from tntrun.environments.mpi import MpiTasks
from tntrun.launch.launcher import LaunchSpec, launcher_for
from tntrun.launch.mpirun import (
    MPICH,
    OPEN_MPI,
    InstalledMpi,
    MpirunLauncher,
    launches_through_slurm,
    mpi_kind,
    mpi_problems,
)
from tntrun.planning.knobs import HorovodKnob

HOROVOD = OmegaConf.to_container(OmegaConf.structured(HorovodConfig), enum_to_str=True)
WORKER = ("/venv/bin/python", "-m", "tntrun.engine.worker", "/runs/r1")
# What `mpirun --version` prints: Debian's Open MPI 4.1 and MPICH 4.0 (Hydra).
OPENMPI_VERSION = (
    "mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"
)
MPICH_VERSION = "HYDRA build details:\n    Version:                                 4.0.2\n"
OPENMPI = InstalledMpi("/usr/bin/orterun", OPENMPI_VERSION, as_root=True)
HYDRA = InstalledMpi("/usr/bin/mpiexec.hydra", MPICH_VERSION)
SPEC = LaunchSpec(hosts=(("localhost", 2),), world_size=2, knobs=(), worker=WORKER)


def two_hosts(tmp_path, **horovod) -> LaunchSpec:
    spec = replace(SPEC, hosts=(("10.77.0.1", 1), ("10.77.0.2", 1)))
    return with_horovod(spec, tmp_path, {**HOROVOD, **horovod})


def test_both_registry_names_are_the_mpirun_launcher():
    assert type(launcher_for("mpirun")) is type(launcher_for("mpiexec")) is MpirunLauncher


def test_the_mpi_is_told_by_its_version_text():
    assert mpi_kind(OPENMPI_VERSION) == OPEN_MPI
    assert mpi_kind("mpirun.openmpi (OpenRTE) 4.1.4") == OPEN_MPI  # called by that name
    assert mpi_kind(MPICH_VERSION) == MPICH
    assert mpi_kind("Intel(R) MPI Library for Linux* OS, Version 2021.6") is None


def test_open_mpi_runs_the_ranks_in_blocks_exporting_every_variable():
    command, env = MpirunLauncher(OPENMPI).command(SPEC)
    rendered = " ".join(command)
    assert command[:5] == ("/usr/bin/orterun", "-np", "2", "-H", "localhost:2")
    assert "--map-by slot --bind-to none --tag-output --allow-run-as-root" in rendered
    assert command[-4:] == WORKER
    exported = {command[i + 1] for i, arg in enumerate(command) if arg == "-x"}
    # the plan's variables and those the driver adds at launch (the rendezvous, ...)
    assert set(env) | {"HOROVOD_GLOO_RENDEZVOUS_PORT", "TNTRUN_USER_PATH"} <= exported
    assert env["TNTRUN_RANK_ENVIRONMENT"] == "mpi"
    assert (
        "--allow-run-as-root"
        not in MpirunLauncher(replace(OPENMPI, as_root=False)).command(SPEC)[0]
    )


def test_mpich_runs_ppn_ranks_per_host_with_its_variables():
    command, env = MpirunLauncher(HYDRA).command(SPEC)
    rendered = " ".join(command)
    assert rendered.startswith("/usr/bin/mpiexec.hydra -n 2 -ppn 2 -hosts localhost -bind-to none")
    assert "-genv TNTRUN_RANK_ENVIRONMENT mpi" in rendered and "-launcher" not in rendered
    assert env["TNTRUN_RANK_ENVIRONMENT"] == "mpi"


def test_pin_to_socket_maps_and_binds_by_socket_overloading_only_beyond_the_cores():
    pinned = replace(SPEC, pin_to_socket=True, cores_per_node=2)
    assert "--map-by socket --bind-to socket " in " ".join(
        MpirunLauncher(OPENMPI).command(pinned)[0]
    )
    crowded = replace(pinned, hosts=(("localhost", 4),), world_size=4)
    assert "socket:overload-allowed" in MpirunLauncher(OPENMPI).command(crowded)[0]
    assert "-bind-to socket" in " ".join(MpirunLauncher(HYDRA).command(pinned)[0])


def test_remote_hosts_are_reached_by_ssh_with_the_horovod_ssh_keys(tmp_path):
    spec = two_hosts(tmp_path, ssh_port=2222, ssh_identity_file="/k", network_interface="tnt0")
    ssh = "-o BatchMode=yes -o StrictHostKeyChecking=no -p 2222 -i /k"
    command, env = MpirunLauncher(OPENMPI).command(spec)
    rendered = " ".join(command)
    assert "-H 10.77.0.1:1,10.77.0.2:1" in rendered
    assert f"--mca plm_rsh_args {ssh} --mca oob_tcp_if_include tnt0" in rendered
    assert env["HOROVOD_GLOO_IFACE"] == "tnt0"  # the knob, as a variable for the ranks
    command, env = MpirunLauncher(HYDRA).command(spec)
    assert "-hosts 10.77.0.1,10.77.0.2 " in " ".join(command)
    assert "-launcher ssh -iface tnt0" in " ".join(command)
    assert env["HYDRA_LAUNCHER_EXTRA_ARGS"] == ssh


def test_inside_a_slurm_allocation_the_mpi_reaches_the_hosts_through_slurm_not_ssh(tmp_path):
    """No ssh pre-flight then (compute nodes often refuse ssh), unless Hydra is told to use
    ssh by the ssh knobs."""
    job = {"SLURM_JOB_ID": "7"}
    plain, keyed = two_hosts(tmp_path), two_hosts(tmp_path, ssh_port=2222)
    for mpi in (OPENMPI, HYDRA):
        command = MpirunLauncher(mpi).command(plain)[0]
        assert launches_through_slurm(command, job)
        assert not launches_through_slurm(command, {})
    assert launches_through_slurm(MpirunLauncher(OPENMPI).command(keyed)[0], job)
    assert not launches_through_slurm(MpirunLauncher(HYDRA).command(keyed)[0], job)


def test_every_horovod_knob_reaches_the_ranks_as_a_variable(tmp_path):
    hvd = {**HOROVOD, "fusion_threshold_kb": 64, "cycle_time_ms": 2.5, "timeline": True}
    spec = with_horovod(SPEC, tmp_path, {**hvd, "hierarchical_allreduce": True})
    for mpi in (OPENMPI, HYDRA):
        assert MpirunLauncher(mpi).problems(spec) == []
        _, env = MpirunLauncher(mpi).command(spec)
        assert env["HOROVOD_FUSION_THRESHOLD"] == "65536" and env["HOROVOD_CYCLE_TIME"] == "2.5"
        assert {"HOROVOD_TIMELINE", "HOROVOD_HIERARCHICAL_ALLREDUCE"} <= set(env)


@pytest.mark.parametrize(
    ("mpi", "knobs", "problem"),
    [
        (
            InstalledMpi(None),
            (),
            "launcher=mpirun needs an MPI: no mpirun or mpiexec on PATH; install one "
            "(apt-get install openmpi-bin, or mpich) or use launcher=horovodrun",
        ),
        (
            InstalledMpi("/opt/intel/bin/mpirun", "Intel(R) MPI Library, Version 2021.6\n"),
            (),
            "launcher=mpirun: /opt/intel/bin/mpirun is neither Open MPI nor MPICH (--version "
            "says 'Intel(R) MPI Library, Version 2021.6'); put one first on PATH or use "
            "launcher=horovodrun",
        ),
        (
            OPENMPI,
            (HorovodKnob("gloo_timeout", 30, args=("--gloo-timeout-seconds", "30")),),
            "horovod.gloo_timeout=30 has no effect with launcher=mpirun (it sets no variable "
            "the ranks could read): remove it",
        ),
    ],
)
def test_what_mpirun_cannot_render_is_one_line(mpi, knobs, problem):
    assert MpirunLauncher(mpi).problems(replace(SPEC, knobs=knobs)) == [problem]


def test_ssh_keys_for_this_machine_alone_have_no_effect(tmp_path):
    local = with_horovod(SPEC, tmp_path, {**HOROVOD, "ssh_port": 2222})
    assert mpi_problems(local, OPENMPI, {"localhost", "vm"}) == [
        "horovod.ssh_port=2222 has no effect with launcher=mpirun on this machine alone "
        "(mpirun reaches no host by ssh): remove it"
    ]
    assert mpi_problems(two_hosts(tmp_path, ssh_port=2222), OPENMPI, {"localhost"}) == []


HOSTS = (("h1", 2), ("h2", 2))


@pytest.mark.parametrize(
    "task",
    [
        {
            "OMPI_COMM_WORLD_RANK": "3",
            "OMPI_COMM_WORLD_SIZE": "4",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1",
        },
        {"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1"},
        {"PALS_RANKID": "3", "PALS_LOCAL_RANKID": "1"},  # Cray PALS: no size of its own
    ],
)
def test_a_rank_takes_its_place_from_its_mpis_variables(task):
    env = MpiTasks(task).rank_environment(HOSTS)
    assert env["HOROVOD_HOSTNAME"] == "h2" and env["HOROVOD_RANK"] == "3"
    assert (env["HOROVOD_SIZE"], env["HOROVOD_LOCAL_RANK"], env["HOROVOD_LOCAL_SIZE"]) == (
        "4",
        "1",
        "2",
    )
    assert (env["HOROVOD_CROSS_RANK"], env["HOROVOD_CROSS_SIZE"]) == ("1", "2")


def test_a_rank_placed_otherwise_than_planned_says_how():
    round_robin = {"PMI_RANK": "1", "PMI_SIZE": "4", "MPI_LOCALRANKID": "0"}  # rank 1 on h2
    with pytest.raises(RuntimeError, match="not in blocks of 2: map by slot"):
        MpiTasks(round_robin).rank_environment(HOSTS)
    with pytest.raises(RuntimeError, match="mpirun started 3 ranks, the plan has 4"):
        MpiTasks({**round_robin, "PMI_SIZE": "3"}).rank_environment(HOSTS)
    with pytest.raises(RuntimeError, match="none of OMPI_COMM_WORLD_RANK/"):
        MpiTasks({}).rank_environment(HOSTS)


def test_each_mpis_labels_split_the_output_by_rank():
    for line, rank, text in [
        ("[1,3]<stdout>:epoch 1\n", "3", "epoch 1\n"),  # Open MPI --tag-output
        ("[3] epoch 1\n", "3", "epoch 1\n"),  # MPICH -prepend-rank
        ("[3]<stderr>:epoch 1\n", "3", "epoch 1\n"),  # horovodrun
    ]:
        match = RANK_LINE.match(line)
        assert match is not None and (match.group(1), match.group(3)) == (rank, text)
    assert RANK_LINE.match("[mpiexec@vm] HYDU_create_process: execvp error\n") is None


def test_open_mpi_names_the_rank_that_ended_first(tmp_path):
    (tmp_path / "launcher.log").write_text(
        "orterun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).\n"
    )
    (tmp_path / "rank.0.log").write_text("rank 0/2: local rank 0\n")
    (tmp_path / "rank.1.log").write_text("rank 1/2: local rank 1\n")
    failure = find_failure(tmp_path)
    assert failure is not None and failure.rank == 1


def test_without_a_named_rank_one_that_saw_another_fail_is_not_the_cause(tmp_path):
    """MPICH's Hydra names no rank: rank 0's lost connection is the consequence."""
    (tmp_path / "launcher.log").write_text("BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES\n")
    (tmp_path / "rank.0.log").write_text(
        "rank 0/2\n[0]: Horovod background loop uncaught exception: Read error: Connection reset\n"
    )
    (tmp_path / "rank.1.log").write_text("rank 1/2\nrank 1: injecting fault 'kill' at step 30\n")
    failure = find_failure(tmp_path)
    assert failure is not None and failure.rank == 1


def test_open_mpis_label_inside_a_long_line_is_dropped_from_the_rank_log(tmp_path):
    """Open MPI labels each chunk it reads: a traceback's long line came split in two."""
    writer = RankLogWriter(tmp_path)
    writer.write("[1,0]<stderr>:Horovod has be[1,0]<stderr>:en shut down.\n")
    writer.close()
    assert (tmp_path / "rank.0.log").read_text() == "Horovod has been shut down.\n"
