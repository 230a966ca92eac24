"""A plan a person reads at 8,192 ranks: 1,024 hosts of 8 GPUs planned and dry-run in-process.

Its time is measured in ``bench/plan_scale.py`` (BENCHMARKS.md), not here.
"""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest

from tntrun import api
from tntrun.contract import run_files
from tntrun.planning.view import render_plan

HOSTS = [f"node{i:04d}" for i in range(1, 1025)]
LAYOUT = [
    "experiment=resnet50_imagenet",
    "nodes=1024",
    "gpus=8",
    f"hosts=[{','.join(HOSTS)}]",
    "global_batch_size=65536",
]


@pytest.fixture(scope="module")
def plan():
    return api.plan([*LAYOUT, "dry_run=true"])


def test_the_plan_of_8192_ranks_reads_in_a_screen(plan, tmp_path):
    assert plan.world_size == 8192 and len(plan.placements) == 8192
    shown = render_plan(plan, tmp_path).splitlines()
    assert len(shown) < 45
    assert "hosts:slots                       node[0001-1024] (1024 hosts), 8 slots each" in shown
    assert "first node  node0001: ranks 0-7, local ranks 0-7, GPUs 0-7" in shown
    assert "last node   node1024: ranks 8184-8191, local ranks 0-7, GPUs 0-7" in shown
    assert max(len(line) for line in shown) < 400  # no line holds a host per node


def test_the_dry_run_prints_under_60_lines_and_writes_the_rest(in_tmp, caplog):
    caplog.set_level(logging.INFO, logger="tntrun")
    exp = api.compose([*LAYOUT, "dry_run=true"])
    run_dir = in_tmp / "dry"
    result = api.run(replace(exp, run_dir=run_dir))
    assert result.status == "PLANNED"
    console = "\n".join(r.getMessage() for r in caplog.records).splitlines()
    assert len(console) < 60, "\n".join(console)
    assert f"{run_dir / run_files.CONFIG} (" in "\n".join(console)
    assert (
        "horovod.compression               none -> gradients allreduced uncompressed"
        in "\n".join(console)
    )
    rank_map = (run_dir / run_files.RANK_MAP).read_text().splitlines()
    assert len(rank_map) == 8192 and rank_map[-1] == "rank 8191, host node1024, local rank 7, GPU 7"
    hostfile = (run_dir / run_files.HOST_LIST).read_text().splitlines()
    assert hostfile == [f"{h} slots=8" for h in HOSTS]
    assert "node0513:8" in (run_dir / run_files.LAUNCH_COMMAND).read_text()
    assert "- node0513" in (run_dir / run_files.CONFIG).read_text()
