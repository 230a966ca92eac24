"""An elastic run's node range and the settings it cannot go on with, checked on the typed
settings alone (the plan's view of them: tests/planning/test_elastic_plan.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.helpers.plans import settings_for
from tntrun.config.schema import ElasticConfig
from tntrun.planning.elastic import elastic_problems, node_range


def elastic(compose_cfg, nodes: int = 3, batch: int | None = 48, **given):
    """Settings of ``nodes`` nodes and ``global_batch_size=batch`` with ``elastic.*=given``."""
    settings = settings_for(compose_cfg, f"nodes={nodes}", f"global_batch_size={batch or 'null'}")
    return replace(settings, elastic=ElasticConfig(**given))


def test_the_range_runs_up_to_the_starting_nodes_unless_given(compose_cfg):
    assert node_range(elastic(compose_cfg)) is None
    assert node_range(elastic(compose_cfg, min_nodes=2)) == (2, 3)
    assert node_range(elastic(compose_cfg, min_nodes=2, max_nodes=5)) == (2, 5)


def test_a_run_that_is_not_elastic_has_no_problem_but_a_lone_max_nodes(compose_cfg):
    assert elastic_problems(elastic(compose_cfg), per_node=1) == []
    (line,) = elastic_problems(elastic(compose_cfg, max_nodes=4), per_node=1)
    assert line.startswith("elastic.max_nodes=4 without elastic.min_nodes")


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ({"min_nodes": 0}, "elastic.min_nodes=0: an elastic run needs at least 1 node"),
        ({"min_nodes": 4}, "elastic.min_nodes=4 > elastic.max_nodes=3: give min <= max"),
        ({"min_nodes": 1, "max_nodes": 2}, "nodes=3 is outside elastic.min_nodes..max_nodes=1..2"),
        ({"min_nodes": 1, "commit_every_steps": 0}, "elastic.commit_every_steps=0: commit every"),
        ({"min_nodes": 1, "timeout_s": -1.0}, "elastic.timeout_s and elastic.discovery_interval_s"),
        ({"min_nodes": 1, "discovery_interval_s": 0.0}, "elastic.timeout_s and elastic.disc"),
    ],
)
def test_a_range_it_cannot_run_in_is_one_line(compose_cfg, given, says):
    (line,) = elastic_problems(elastic(compose_cfg, **given), per_node=None)
    assert line.startswith(says), line


def test_the_global_batch_must_divide_every_reachable_world_size(compose_cfg):
    assert elastic_problems(elastic(compose_cfg, batch=24, min_nodes=1), per_node=2) == []
    (line,) = elastic_problems(elastic(compose_cfg, batch=20, min_nodes=1), per_node=2)
    assert "not divisible by the world sizes 6 that elastic.min_nodes..max_nodes=1..3" in line
    assert "(2 ranks a node; it can run at 2, 4)" in line
    assert line.endswith("e.g. 24, or narrow the node range"), "the multiple of 2, 4, 6 nearest"
    (none,) = elastic_problems(elastic(compose_cfg, batch=7, min_nodes=2), per_node=2)
    assert "it can run at none of them" in none and "e.g. 12" in none


def test_elastic_runs_state_the_global_batch(compose_cfg):
    settings = replace(elastic(compose_cfg, batch=None, min_nodes=2), micro_batch_size=8)
    (line,) = elastic_problems(settings, per_node=2)
    assert line.startswith("elastic runs keep the global batch as the world size changes")
    missing = elastic(compose_cfg, batch=None, min_nodes=2)
    assert elastic_problems(missing, per_node=2) == [], "the batch's own check reports it"
