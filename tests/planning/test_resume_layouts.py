"""Resuming on another layout, the pure parts: the experiment's hash leaves the layout out,
where a run continues on a new world size, and the tags and name that follow the layout."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.plans import plan_for
from tntrun.config.settings import problem_hash
from tntrun.contract.checkpoints import LAYOUT_KEYS, CheckpointMeta
from tntrun.errors import PlanError
from tntrun.planning.plan import Plan
from tntrun.planning.resume import ResumedRun, ResumePoint, resume_position
from tntrun.tracking.opening import RunOrigin, resume_tags

# After 1 epoch and 9 batches of the 2nd on 2 ranks, global batch 64 (22 steps an epoch).
PREEMPTED = CheckpointMeta(1, 32, 2, 64, "h", 9)


def point(allow: bool, meta: CheckpointMeta = PREEMPTED) -> ResumePoint:
    return ResumePoint("/runs/a/checkpoints/epoch-0001.batch-00009", meta, allow)


def resumed_plan(compose_cfg, *overrides: str, allow: bool = True) -> Plan:
    return plan_for(compose_cfg, *overrides, run_dir=Path("/runs/b"), resume=point(allow))


def test_the_experiments_hash_leaves_out_where_the_ranks_run(compose_cfg):
    two = problem_hash(compose_cfg())
    layouts = ("ranks_per_node=1", "nodes=2", "hosts=[a,b]", "launcher=srun", "threads_per_rank=1")
    assert {problem_hash(compose_cfg(layout)) for layout in layouts} == {two}
    assert problem_hash(compose_cfg("global_batch_size=32")) != two
    assert problem_hash(compose_cfg("model=cnn")) != two
    assert set(LAYOUT_KEYS) <= set(compose_cfg().keys()), "each is a key of the schema"


def test_another_world_size_with_the_same_global_batch_continues_at_the_checkpoints_step():
    at = resume_position(point(True), world=1, global_batch=64, updates_per_epoch=22, epochs=4)
    assert at == (1, 32, 9)
    restarted = resume_position(
        point(True),
        world=1,
        global_batch=64,
        updates_per_epoch=22,
        epochs=4,
        samples_follow_steps=False,
    )
    assert restarted == (1, 22, 0), "a dataset sharding itself: the epoch's start"


def test_a_layout_change_not_allowed_is_one_line_naming_both_layouts_and_the_fix():
    with pytest.raises(PlanError) as refused:
        resume_position(point(False), world=1, global_batch=64, updates_per_epoch=22, epochs=4)
    (line,) = refused.value.problems
    assert line == (
        "resume: the checkpoint was trained on 2 ranks with global batch 64, this run has "
        "1 ranks and global batch 64: keep the layout or set resume_allow_layout_change=true"
    )


def test_the_plan_continues_mid_epoch_on_one_rank(compose_cfg):
    plan = resumed_plan(compose_cfg, "ranks_per_node=1")
    assert (plan.world_size, plan.micro_batch_size, plan.global_batch_size) == (1, 64, 64)
    assert (plan.initial_epoch, plan.initial_step, plan.initial_batch) == (1, 32, 9)
    manual = resumed_plan(compose_cfg, "ranks_per_node=1", "dataset.distribute=false")
    assert (manual.initial_epoch, manual.initial_step, manual.initial_batch) == (1, 22, 0)
    with pytest.raises(PlanError, match="resume_allow_layout_change=true"):
        resumed_plan(compose_cfg, "ranks_per_node=1", allow=False)


def tags_after(plan: Plan, recorded: dict[str, str]) -> dict[str, str]:
    resumed = ResumedRun(Path("/runs/a"), "r1", OmegaConf.create({}), point(True), "resume=auto")
    return resume_tags(resumed, plan, Path("/runs/b"), RunOrigin(), recorded, 1)


def test_a_resumed_runs_tags_and_name_follow_the_new_layout(compose_cfg, caplog):
    caplog.set_level(logging.INFO, logger="tntrun")
    recorded = {
        "world_size": "2",
        "hosts": "localhost:2",
        "mlflow.runName": "mlp-digits-2x32",
        "preempted": "SIGTERM on this rank: stopped after step 32",
    }
    tags = tags_after(resumed_plan(compose_cfg, "ranks_per_node=1"), recorded)
    assert (tags["world_size"], tags["hosts"]) == ("1", "localhost:1")
    assert tags["launch_command"].endswith("tntrun.engine.worker /runs/b")
    assert tags["mlflow.runName"] == "mlp-digits-1x64"
    assert tags["layout_changes"] == "1"
    change = "2 ranks, global batch 64 -> 1 ranks, global batch 64; LR 0.002, restarting at step 32"
    assert tags["resume.layout_change"] == f"{change} (epoch 2, batch 9)"
    assert tags["restart.1"].endswith(f"; layout {tags['resume.layout_change']}")
    assert "resuming with a new layout: 2 ranks" in caplog.text

    again = tags_after(
        resumed_plan(compose_cfg, "ranks_per_node=1"),
        {**recorded, "mlflow.runName": "my-run", "layout_changes": "1"},
    )
    assert "mlflow.runName" not in again, "a name of the user's stays"
    assert again["layout_changes"] == "2"


def test_the_same_layout_changes_no_layout_tag(compose_cfg):
    same = CheckpointMeta(1, 32, 2, 64, "h", 9)
    resumed = ResumedRun(Path("/runs/a"), "r1", OmegaConf.create({}), point(False, same), "x")
    plan = plan_for(compose_cfg, run_dir=Path("/runs/b"), resume=resumed.point)
    recorded = {"world_size": "2", "hosts": "localhost:2", "mlflow.runName": "mlp-digits-2x32"}
    tags = resume_tags(resumed, plan, Path("/runs/b"), RunOrigin(), recorded, 1)
    assert not {"world_size", "hosts", "mlflow.runName", "layout_changes"} & set(tags)
    assert "resume.layout_change" not in tags
