"""The planner's stages one by one: the batch, the layout's checks all at once, the steps
of an epoch and their bounds, where each rank runs and on how many threads."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers.plans import DIGITS, FACTS, settings_for
from tntrun.errors import PlanError
from tntrun.planning.machine import MachineFacts
from tntrun.planning.planner import (
    MAX_TOTAL_STEPS,
    batch_sizes,
    check_step_count,
    checked_layout,
    global_batch_per_rank,
    planned_steps,
    predict_scaling_problems,
    rank_placements,
    steps_per_epoch,
    threads_per_rank,
)

RUN_DIR = Path("/runs/planner")


@pytest.mark.parametrize(
    ("given", "world", "sequence", "expected"),
    [
        (("global_batch_size=64",), 4, None, (64, 16)),
        (("global_batch_size=null", "micro_batch_size=8"), 4, None, (32, 8)),
        (("global_batch_size=32", "micro_batch_size=8"), 4, None, (32, 8)),
        (("global_batch_size=null", "batch_tokens=1000"), 2, 50, (20, 10)),
    ],
)
def test_the_batch_follows_whichever_setting_gives_it(
    compose_cfg, given, world, sequence, expected
):
    settings = settings_for(compose_cfg, *given)
    assert batch_sizes(settings, world, sequence) == expected


@pytest.mark.parametrize(
    ("given", "sequence", "says"),
    [
        (("batch_tokens=1000",), None, "batch_tokens=1000 needs a dataset of token sequences"),
        (("global_batch_size=30", "batch_tokens=1000"), 50, "gives 20 sentences of length 50"),
        (("micro_batch_size=0",), None, "micro_batch_size=0: a rank needs at least 1 sample"),
        (("global_batch_size=30", "micro_batch_size=8"), None, "(8 x 4 = 32)"),
    ],
)
def test_batch_settings_that_disagree_are_refused(compose_cfg, given, sequence, says):
    settings = settings_for(compose_cfg, *given)
    with pytest.raises(PlanError) as refused:
        batch_sizes(settings, 4, sequence)
    assert says in str(refused.value)


@pytest.mark.parametrize(
    ("global_batch", "says"),
    [
        (None, "global_batch_size is not set"),
        (3, "global_batch_size=3 gives a micro-batch < 1 on 4 ranks: use global_batch_size=4"),
        (30, "not divisible by the world size 4: use global_batch_size=28 or 32"),
    ],
)
def test_a_global_batch_the_world_cannot_share_is_refused(global_batch, says):
    with pytest.raises(PlanError) as refused:
        global_batch_per_rank(global_batch, 4)
    assert says in str(refused.value)


def test_predict_scaling_needs_two_ranks_and_two_epochs():
    assert predict_scaling_problems(2, 2) == []
    assert predict_scaling_problems(None, 2) == [], "no world yet: its own problem is reported"
    one_rank, one_epoch = predict_scaling_problems(1, 1)
    assert "needs 2 or more ranks" in one_rank and "this run has 1" in one_rank
    assert "train.epochs=1: use train.epochs=2 or more" in one_epoch


def test_every_layout_problem_is_reported_at_once(compose_cfg):
    settings = settings_for(
        compose_cfg,
        "global_batch_size=30",
        "ranks_per_node=4",
        "train.epochs=0",
        "threads_per_rank=0",
        "elastic.max_nodes=2",
    )
    with pytest.raises(PlanError) as refused:
        checked_layout(settings, DIGITS, FACTS, RUN_DIR)
    problems = refused.value.problems
    assert len(problems) == 4, problems
    assert "not divisible by the world size 4" in problems[0]
    assert problems[1].startswith("train.epochs=0")
    assert problems[2].startswith("threads_per_rank=0")
    assert problems[3].startswith("elastic.max_nodes=2 without elastic.min_nodes")


def test_a_checked_layout_holds_the_hosts_world_and_batch(compose_cfg):
    settings = settings_for(compose_cfg, "hosts=[a,b]", "ranks_per_node=2", "global_batch_size=64")
    layout = checked_layout(settings, DIGITS, FACTS, RUN_DIR)
    assert (layout.ranks_per_node, layout.world_size) == (2, 4)
    assert layout.hosts == (("a", 2), ("b", 2))
    assert (layout.global_batch_size, layout.micro_batch_size) == (64, 16)


def test_a_last_partial_batch_is_a_step_unless_dropped_and_an_epoch_needs_one():
    assert steps_per_epoch(100, 32, drop_remainder=False) == 4
    assert steps_per_epoch(100, 32, drop_remainder=True) == 3
    assert steps_per_epoch(100, 200, drop_remainder=False) == 1
    with pytest.raises(PlanError, match="global_batch_size=200 exceeds the 100 training samples"):
        steps_per_epoch(100, 200, drop_remainder=True)


def test_the_step_count_is_bounded_both_ways():
    check_step_count(10, MAX_TOTAL_STEPS // 10, passes=10)
    with pytest.raises(PlanError, match=r"at most 1,000,000 at this batch"):
        check_step_count(10, MAX_TOTAL_STEPS // 10 + 1, passes=1)
    with pytest.raises(PlanError, match="backward_passes_per_step=11 exceeds the 10 steps"):
        check_step_count(10, 1, passes=11)


def test_the_learning_rate_scales_with_the_batch_over_all_backward_passes(compose_cfg):
    given = ("optimizer=sgd", "ranks_per_node=2", "global_batch_size=64")
    settings = settings_for(compose_cfg, *given)
    layout = checked_layout(settings, DIGITS, FACTS, RUN_DIR)
    steps = planned_steps(settings, DIGITS, layout)
    accumulating = settings_for(compose_cfg, *given, "horovod.backward_passes_per_step=2")
    doubled = planned_steps(accumulating, DIGITS, layout)
    assert steps.per_epoch == doubled.per_epoch == 22  # 1438 // 64 (train.drop_remainder)
    assert doubled.scaled_lr == pytest.approx(2 * steps.scaled_lr)
    assert steps.schedule.total_steps == 22 * settings.train.epochs


def test_ranks_are_pinned_to_the_sockets_given_else_the_machines(compose_cfg):
    facts = MachineFacts(cores_per_node=8, sockets_per_node=2)
    settings = settings_for(compose_cfg, "ranks_per_node=4", "pin_to_socket=true")
    layout = checked_layout(settings, DIGITS, facts, RUN_DIR)
    assert [p.socket for p in rank_placements(settings, facts, layout)] == [0, 1, 0, 1]
    three = settings_for(
        compose_cfg, "ranks_per_node=4", "pin_to_socket=true", "sockets_per_node=3"
    )
    assert [p.socket for p in rank_placements(three, facts, layout)] == [0, 1, 2, 0]
    unpinned = settings_for(compose_cfg, "ranks_per_node=4")
    assert {p.socket for p in rank_placements(unpinned, facts, layout)} == {None}


def test_threads_per_rank_share_the_nodes_cores_unless_given(compose_cfg):
    facts = MachineFacts(cores_per_node=8)
    assert threads_per_rank(settings_for(compose_cfg), facts, per_node=3) == 2
    assert threads_per_rank(settings_for(compose_cfg), facts, per_node=16) == 1
    assert threads_per_rank(settings_for(compose_cfg, "threads_per_rank=5"), facts, 3) == 5
