"""Slurm: the allocation as layout, srun-launched ranks (with a recording fake srun), and
the submitit preset."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from mlflow.tracking import MlflowClient

from tests.conftest import run_dir_of, store_uri
from tntrun.launch.srun import horovod_env
from tntrun.planning.layout import allocation_layout

FAKE_BIN = Path(__file__).parent / "fake_bin"


def test_allocation_fills_the_layout_keys_not_given():
    env = {"SLURM_JOB_NODELIST": "gpu[01-04]", "SLURM_NTASKS_PER_NODE": "4(x4)",
           "SLURM_GPUS_PER_NODE": "a100:4"}  # fmt: skip
    assert allocation_layout(env, set()) == {"nodes": 4, "gpus": 4, "ranks_per_node": 4}
    assert allocation_layout(env, {"nodes"}) == {"gpus": 4, "ranks_per_node": 4}
    assert allocation_layout({}, set()) == {}


def test_slurm_task_variables_become_horovods():
    env = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"}
    got = horovod_env(env, (("gpu01", 4), ("gpu02", 4)))
    assert got["HOROVOD_HOSTNAME"] == "gpu02" and got["HOROVOD_RANK"] == "5"
    assert (got["HOROVOD_LOCAL_RANK"], got["HOROVOD_LOCAL_SIZE"]) == ("1", "4")
    assert (got["HOROVOD_CROSS_RANK"], got["HOROVOD_CROSS_SIZE"]) == ("1", "2")
    with pytest.raises(RuntimeError, match="--distribution=block"):
        horovod_env({**env, "SLURM_LOCALID": "0"}, (("gpu01", 4), ("gpu02", 4)))


def test_srun_without_an_allocation_is_refused(run_tntrun):
    result = run_tntrun("launcher=srun")
    assert result.returncode == 2
    assert "launcher=srun needs a Slurm allocation" in result.stderr


@pytest.mark.slow
def test_srun_launches_the_ranks_inside_an_allocation(tmp_path):
    import subprocess

    from tests.conftest import clean_env, tntrun_command

    log = tmp_path / "srun.json"
    env = {**clean_env(), "PATH": f"{FAKE_BIN}:{os.environ['PATH']}",
           "FAKE_SRUN_LOG": str(log), "SLURM_JOB_NODELIST": socket.gethostname(),
           "SLURM_NTASKS_PER_NODE": "2"}  # fmt: skip
    result = subprocess.run(
        tntrun_command(tmp_path, "launcher=srun", "horovod.network_interface=lo",
                       "train.epochs=2", "tracking.system_metrics=false"),
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    recorded = json.loads(log.read_text())
    assert recorded["argv"][:6] == [
        "--nodes=1",
        "--ntasks=2",
        "--ntasks-per-node=2",
        "--distribution=block",
        "--kill-on-bad-exit=1",
        "--label",
    ]
    assert recorded["env"]["HOROVOD_GLOO_IFACE"] == "lo"  # the knob as a variable
    assert recorded["env"]["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "127.0.0.1"
    assert int(recorded["env"]["HOROVOD_GLOO_RENDEZVOUS_PORT"]) > 0
    run_dir = run_dir_of(result)
    assert json.loads((run_dir / "plan.json").read_text())["launcher"] == "srun"
    assert {"rank.0.log", "rank.1.log"} <= {p.name for p in (run_dir / "logs").iterdir()}
    run = MlflowClient(store_uri(tmp_path)).get_run((run_dir / "mlflow_run_id").read_text())
    assert run.info.status == "FINISHED" and run.data.params["launcher"] == "srun"


def test_submitit_preset_sizes_the_job_from_the_layout():
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    with initialize_config_module(config_module="tntrun.conf", version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True,
                      overrides=["hydra/launcher=tntrun_slurm", "nodes=2", "gpus=4",
                                 "launcher=srun"])  # fmt: skip
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.gpus_per_node, launcher.tasks_per_node) == (2, 4, 1)
