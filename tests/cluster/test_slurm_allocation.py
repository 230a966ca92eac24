"""Slurm without a cluster: the allocation as layout, srun's rank variables and Horovod knobs,
what is refused before a job starts, and the submitit preset's job size."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from tests.helpers.asserts import assert_exit
from tests.helpers.components import require_module
from tests.helpers.plans import with_horovod
from tntrun.config.schema import HorovodConfig
from tntrun.environments import detect, layout_from_hosts
from tntrun.environments.slurm import horovod_env
from tntrun.launch.launcher import LaunchSpec
from tntrun.launch.srun import SrunLauncher

# The schema's horovod.* (what a composed config holds), for the knobs of a test.
HOROVOD = OmegaConf.to_container(OmegaConf.structured(HorovodConfig), enum_to_str=True)


def test_allocation_fills_the_layout_keys_not_given():
    env = {
        "SLURM_JOB_NODELIST": "gpu[01-04]",
        "SLURM_TASKS_PER_NODE": "4(x4)",
        "SLURM_GPUS_PER_NODE": "a100:4",
    }
    assert layout_from_hosts({}, detect(env).allocation(), set()) == {
        "nodes": 4,
        "gpus": 4,
        "ranks_per_node": 4,
    }
    assert layout_from_hosts({}, detect(env).allocation(), {"nodes"}) == {
        "gpus": 4,
        "ranks_per_node": 4,
    }
    assert layout_from_hosts({}, detect({}).allocation(), set()) == {}


def test_slurm_task_variables_become_horovods():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"}
    got = horovod_env(env, (("gpu01", 4), ("gpu02", 4)))
    assert got["HOROVOD_HOSTNAME"] == "gpu02" and got["HOROVOD_RANK"] == "5"
    assert (got["HOROVOD_LOCAL_RANK"], got["HOROVOD_LOCAL_SIZE"]) == ("1", "4")
    assert (got["HOROVOD_CROSS_RANK"], got["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    with pytest.raises(RuntimeError, match="--distribution=block"):
        horovod_env({**env, "SLURM_LOCALID": "0"}, (("gpu01", 4), ("gpu02", 4)))


@pytest.mark.slow
def test_srun_without_an_allocation_is_refused(run_tntrun):
    result = run_tntrun("launcher=srun")
    assert_exit(result, 2)
    assert "launcher=srun needs a Slurm allocation" in result.stderr


def test_a_layout_beyond_the_allocation_is_refused_naming_the_key():
    env = {"SLURM_JOB_NODELIST": "tnt-h[1-2]", "SLURM_JOB_CPUS_PER_NODE": "1(x2)"}
    spec = LaunchSpec(
        hosts=(("tnt-h1", 2), ("tnt-h2", 2)), world_size=4, knobs=(), worker=("python",), env=env
    )
    (problem,) = SrunLauncher().problems(spec)
    assert problem.startswith("ranks_per_node=2: the Slurm allocation has 1 CPU(s) on a node")
    assert problem.endswith("set ranks_per_node=1 or allocate --ntasks-per-node=2")
    spec = replace(spec, hosts=(("a", 1), ("b", 1), ("c", 1)), world_size=3)
    (problem,) = SrunLauncher().problems(spec)
    assert problem.startswith("nodes=3: the Slurm allocation has 2 node(s) (tnt-h[1-2])")


def test_every_horovod_knob_reaches_srun_ranks_or_is_refused(tmp_path):
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "SLURM_JOB_CPUS_PER_NODE": "2(x2)"}
    hvd = {
        **HOROVOD,
        "fusion_threshold_kb": 8192,
        "cycle_time_ms": 2.5,
        "autotune": True,
        "timeline": True,
        "hierarchical_allreduce": True,
        "network_interface": "ib0",
    }
    spec = LaunchSpec(
        hosts=(("n1", 2), ("n2", 2)), world_size=4, knobs=(), worker=("python",), env=env
    )
    spec = with_horovod(spec, tmp_path, hvd)
    assert SrunLauncher().problems(spec) == []
    _, ranks_env = SrunLauncher().command(spec)
    for knob in spec.knobs:
        for name, value in knob.env:
            assert ranks_env[name] == value, knob
    assert {
        "HOROVOD_AUTOTUNE",
        "HOROVOD_TIMELINE",
        "HOROVOD_HIERARCHICAL_ALLREDUCE",
        "HOROVOD_FUSION_THRESHOLD",
        "HOROVOD_CYCLE_TIME",
        "HOROVOD_GLOO_IFACE",
    } <= set(ranks_env)
    ssh = with_horovod(spec, tmp_path, {**HOROVOD, "ssh_port": 2222})
    assert SrunLauncher().problems(ssh) == [
        "horovod.ssh_port=2222 has no effect with launcher=srun (srun starts the ranks, nothing "
        "connects over ssh): remove it"
    ]


def test_submitit_preset_sizes_the_job_from_the_layout():
    require_module("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_module(config_module="tntrun.conf", version_base="1.3"):
        cfg = compose(
            config_name="config",
            return_hydra_config=True,
            overrides=["hydra/launcher=tntrun_slurm", "nodes=2", "gpus=4", "launcher=srun"],
        )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == (2, 4, 1)
    assert launcher.cpus_per_task == 2  # ranks_per_node's default: each node's CPUs are the ranks'
    allocation = {"SLURM_JOB_NODELIST": "gpu[01-02]", "SLURM_TASKS_PER_NODE": "1(x2)"}
    assert (
        layout_from_hosts(
            {}, detect({**allocation, "SUBMITIT_EXECUTOR": "slurm"}).allocation(), set()
        )
        == {}
    )
