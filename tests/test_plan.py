"""The pure training plan: batch split, LR scaling, steps and the launch command."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tntrun.plan import DatasetInfo, Plan, PlanError, build_plan, scale_learning_rate

DIGITS = DatasetInfo(num_train=1437, num_val=360, input_shape=(64,), num_classes=10)


def plan_for(compose_cfg, *overrides: str, data: DatasetInfo = DIGITS, cores: int = 2) -> Plan:
    cfg = OmegaConf.to_container(compose_cfg(*overrides), resolve=True)
    return build_plan(
        cfg,
        data,
        cores_per_node=cores,
        python="python",
        horovodrun="horovodrun",
        run_dir=Path("/runs/x"),
    )


def test_default_plan_splits_global_batch_over_two_cpu_ranks(compose_cfg):
    plan = plan_for(compose_cfg)
    assert plan.world_size == 2 and plan.micro_batch_size == 32
    assert plan.steps_per_epoch == 1437 // 64 == 22
    assert plan.total_steps == 22 * plan.epochs
    assert plan.threads_per_rank == 1
    assert plan.scaled_lr == pytest.approx(0.002)  # adam 0.002 stated at batch 64
    cmd = plan.launch_command
    assert cmd[:6] == ("horovodrun", "--gloo", "-np", "2", "-H", "localhost:2")
    assert cmd[-4:] == ("python", "-m", "tntrun.worker", "/runs/x")
    assert dict(plan.launch_env)["TF_USE_LEGACY_KERAS"] == "1"


def test_multi_node_gpu_layout(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "nodes=2",
        "gpus=4",
        "hosts=[a,b]",
        "global_batch_size=512",
        "optimizer=sgd",
        data=DatasetInfo(100_000, 1000, (224, 224, 3), 1000),
    )
    assert plan.world_size == 8 and plan.micro_batch_size == 64
    assert plan.launch_command[2:6] == ("-np", "8", "-H", "a:4,b:4")
    assert plan.scaled_lr == pytest.approx(0.2)  # 0.1 at 256, linear


@pytest.mark.parametrize(
    ("scaling", "expected"), [("linear", 0.4), ("sqrt", 0.1 * math.sqrt(4)), ("none", 0.1)]
)
def test_learning_rate_scaling(scaling, expected):
    assert scale_learning_rate(0.1, 1024, 256, scaling) == pytest.approx(expected)


def test_unknown_scaling_is_named():
    with pytest.raises(PlanError, match="schedule.scaling='cubic'"):
        scale_learning_rate(0.1, 512, 256, "cubic")


def test_indivisible_global_batch_suggests_valid_sizes(compose_cfg):
    with pytest.raises(PlanError, match=r"global_batch_size=65 .* use global_batch_size=64 or 66"):
        plan_for(compose_cfg, "global_batch_size=65")


def test_multi_node_without_hosts_says_how_to_give_them(compose_cfg):
    with pytest.raises(PlanError, match=r"nodes=2 needs the hosts .* hosts=\[h1,h2"):
        plan_for(compose_cfg, "nodes=2")


def test_more_hosts_than_nodes(compose_cfg):
    with pytest.raises(PlanError, match="hosts lists 3 hosts but nodes=2"):
        plan_for(compose_cfg, "nodes=2", "hosts=[a,b,c]")


def test_fusion_threshold_in_bytes_and_env(compose_cfg):
    plan = plan_for(compose_cfg, "horovod.fusion_threshold_kb=32")
    assert plan.fusion_threshold_bytes == 32 * 1024
    assert dict(plan.launch_env)["HOROVOD_FUSION_THRESHOLD"] == str(32 * 1024)
    with pytest.raises(PlanError, match="horovod.fusion_threshold_kb=-1"):
        plan_for(compose_cfg, "horovod.fusion_threshold_kb=-1")


def test_plan_round_trips_through_json(compose_cfg):
    plan = plan_for(compose_cfg, "hosts=[localhost]")
    assert Plan.from_json(plan.to_json()) == plan


def test_planning_does_not_import_tensorflow():
    import subprocess

    code = (
        "import sys, tntrun.cli, tntrun.plan, tntrun.tracking, tntrun.launch;"
        "from tntrun.datasets.digits import DigitsDataset; DigitsDataset().info();"
        "bad = [m for m in ('tensorflow', 'horovod', 'tf_keras', 'keras') if m in sys.modules];"
        "sys.exit(f'driver imported {bad}' if bad else 0)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
