"""Elastic runs, the pure parts: the node range, the global batch at every reachable world
size, the plan at a new size, and what discovery may print."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.plans import DIGITS, FACTS, plan_for
from tntrun.errors import PlanError
from tntrun.launch.discovery import parse_hosts
from tntrun.planning.resume import ResumePoint
from tntrun.planning.view import render_plan
from tntrun.preparation import PlanInputs, typed_experiment

THREE = ("hosts=[a,b,c]", "ranks_per_node=1", "elastic.min_nodes=2")


def test_an_elastic_plan_shows_its_range_and_keeps_the_global_batch(compose_cfg):
    plan = plan_for(compose_cfg, *THREE, "global_batch_size=48")
    assert plan.elastic_nodes == (2, 3) and plan.world_size == 3
    shown = render_plan(plan)
    assert "elastic                           2..3 node(s): world sizes 2, 3" in shown
    assert "every 50 steps" in shown
    assert plan_for(compose_cfg, "global_batch_size=48").elastic_nodes is None


def test_a_global_batch_some_reachable_world_size_cannot_divide_is_refused(compose_cfg):
    with pytest.raises(PlanError) as refused:
        plan_for(compose_cfg, *THREE, "global_batch_size=64")
    # The starting size's own line, and the range's.
    (line,) = [p for p in refused.value.problems if "elastic.min_nodes..max_nodes" in p]
    assert line.startswith("global_batch_size=64 is not divisible by the world sizes 3 that")
    assert "it can run at 2" in line and "e.g. 66" in line


@pytest.mark.parametrize(
    ("given", "says"),
    [
        (("elastic.max_nodes=1",), "elastic.min_nodes=2 > elastic.max_nodes=1: give min <= max"),
        (("elastic.commit_every_steps=0",), "elastic.commit_every_steps=0: commit every 1"),
        (("micro_batch_size=8", "global_batch_size=null"), "give global_batch_size instead"),
    ],
)
def test_bad_elastic_settings_are_one_line_each(compose_cfg, given, says):
    with pytest.raises(PlanError) as refused:
        plan_for(compose_cfg, *THREE, "global_batch_size=48", *given)
    assert any(says in line for line in refused.value.problems), refused.value.problems


def test_max_nodes_alone_asks_for_min_nodes(compose_cfg):
    with pytest.raises(PlanError, match="without elastic.min_nodes: give elastic.min_nodes"):
        plan_for(compose_cfg, "elastic.max_nodes=3")


def test_a_resize_replans_on_the_new_hosts_from_the_commit(compose_cfg):
    overrides = (*THREE, "global_batch_size=48", "train.epochs=2")
    typed = typed_experiment(compose_cfg(*overrides), list(overrides), None)
    inputs = PlanInputs(typed.settings, typed.config_hash, DIGITS, FACTS, Path("/runs/e"))
    first = inputs.plan()
    commit = ResumePoint("/runs/e/checkpoints/epoch-0000.batch-00020", _meta(first, 20), True)
    smaller = inputs.plan(commit, (("a", 1), ("b", 1)))
    assert (smaller.world_size, smaller.micro_batch_size) == (2, 24)
    assert smaller.global_batch_size == first.global_batch_size == 48
    assert smaller.schedule == first.schedule and smaller.scaled_lr == first.scaled_lr
    assert (smaller.initial_step, smaller.initial_batch) == (20, 20)
    assert smaller.elastic_nodes == (2, 3), "the range is the one the run started with"
    assert smaller.hosts == (("a", 1), ("b", 1))


def _meta(plan, step):
    from tntrun.contract.checkpoints import CheckpointMeta

    return CheckpointMeta(0, step, plan.world_size, plan.global_batch_size, "h", step)


def test_discovery_prints_hosts_and_slots_a_line():
    text = "tnt-h1:1\n\n  tnt-h2  \n10.77.0.3:4\n"
    assert parse_hosts(text, "cat hosts") == [("tnt-h1", 1), ("tnt-h2", None), ("10.77.0.3", 4)]
    for garbage in ("tnt-h1 slots=2", "host:zero", "a:0", "<html>"):
        with pytest.raises(PlanError, match="print one host or host:slots"):
            parse_hosts(garbage, "cat hosts")
