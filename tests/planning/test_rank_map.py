"""The rank map for a person: every rank of a small run, the pattern of a large one."""

from __future__ import annotations

from dataclasses import replace

from tests.helpers.plans import IMAGENET, plan_for
from tntrun.contract import run_files
from tntrun.planning.layout import RankPlacement
from tntrun.planning.plan import MachineFacts
from tntrun.planning.rank_map import FULL_VIEW_MAX_RANKS, rank_pattern_lines, shows_every_rank
from tntrun.planning.view import plan_files, render_plan


def gpu_plan(compose_cfg, nodes: int, gpus: int, *more: str, facts=None):
    hosts = ",".join(f"gpu{i:02d}" for i in range(1, nodes + 1))
    layout = [
        f"nodes={nodes}",
        f"gpus={gpus}",
        f"hosts=[{hosts}]",
        f"global_batch_size={nodes * gpus * 8}",
    ]
    extra = {"facts": facts} if facts else {}
    return plan_for(compose_cfg, *layout, *more, data=IMAGENET, **extra)


def test_the_threshold_is_one_number_and_a_small_run_shows_every_rank(compose_cfg):
    assert shows_every_rank(FULL_VIEW_MAX_RANKS) and not shows_every_rank(FULL_VIEW_MAX_RANKS + 1)
    plan = gpu_plan(compose_cfg, 2, 4)
    shown = render_plan(plan)
    assert "hosts:slots                       gpu01:4, gpu02:4" in shown
    assert "rank 7, host gpu02, local rank 3, GPU 3" in shown
    assert "-H gpu01:4,gpu02:4" in shown
    assert plan_files(plan) == {}  # nothing to write: the console holds it all


def test_a_large_run_shows_its_pattern_with_the_first_and_last_node(compose_cfg, tmp_path):
    plan = gpu_plan(compose_cfg, 12, 4)  # 48 ranks
    shown = render_plan(plan, tmp_path)
    assert "hosts:slots                       gpu[01-12] (12 hosts), 4 slots each" in shown
    ranks = shown.split("== Ranks ==\n")[1].split("\n\n")[0].splitlines()
    assert ranks == [
        "48 ranks: 4 per node on 12 nodes, rank = node index x 4 + local rank",
        "local rank i -> GPU i",
        "first node  gpu01: ranks 0-3, local ranks 0-3, GPUs 0-3",
        "last node   gpu12: ranks 44-47, local ranks 0-3, GPUs 0-3",
        f"full map: {tmp_path / 'rank_map.txt'}; hosts: {tmp_path / 'hosts.txt'}",
    ]
    assert "rank 5," not in shown
    assert "-H gpu01:4,...,gpu12:4 " in shown  # the list cut, named in full in its file
    assert str(tmp_path / run_files.LAUNCH_COMMAND) in shown


def test_sockets_and_their_binder_are_part_of_the_pattern(compose_cfg):
    facts = MachineFacts(cores_per_node=8, sockets_per_node=2, numactl="/usr/bin/numactl")
    plan = plan_for(
        compose_cfg,
        "pin_to_socket=true",
        "ranks_per_node=4",
        "nodes=5",
        "hosts=[c1,c2,c3,c4,c5]",
        "global_batch_size=200",
        facts=facts,
    )
    lines = rank_pattern_lines(plan, "map", "hosts")
    assert lines[1] == "local rank i -> socket i mod 2 (bound by numactl)"
    assert lines[2] == "first node  c1: ranks 0-3, local ranks 0-3, sockets 0,1,0,1"


def test_a_map_off_the_pattern_is_not_described_as_one(compose_cfg):
    plan = gpu_plan(compose_cfg, 5, 4)
    moved = list(plan.placements)
    moved[6] = RankPlacement(rank=6, host="gpu02", local_rank=2, socket=None, gpu=3)
    lines = rank_pattern_lines(replace(plan, placements=tuple(moved)), "map", "hosts")
    assert lines == ["20 ranks on 5 nodes, in no single pattern", "full map: map; hosts: hosts"]


def test_the_files_hold_the_whole_map_the_hosts_and_the_command(compose_cfg):
    plan = gpu_plan(compose_cfg, 12, 4)
    files = plan_files(plan)
    assert set(files) == {run_files.RANK_MAP, run_files.HOST_LIST, run_files.LAUNCH_COMMAND}
    rank_map = files[run_files.RANK_MAP].splitlines()
    assert len(rank_map) == 48 and rank_map[47] == "rank 47, host gpu12, local rank 3, GPU 3"
    assert files[run_files.HOST_LIST].splitlines()[::11] == ["gpu01 slots=4", "gpu12 slots=4"]
    hosts = ",".join(f"gpu{i:02d}:4" for i in range(1, 13))
    assert f"-H {hosts} " in files[run_files.LAUNCH_COMMAND]
