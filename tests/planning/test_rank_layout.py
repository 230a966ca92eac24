"""The layout, pure: ranks a node, which hosts (the config's, a hostfile, the environment's
allocation or localhost) and where each rank sits."""

from __future__ import annotations

import pytest

from tntrun.environments import Allocation
from tntrun.planning.layout import (
    LOCALHOST,
    LayoutError,
    RankPlacement,
    place_ranks,
    ranks_per_node,
    resolve_hosts,
)

NOTHING = {"hosts": None, "hostfile": None}
SLURM = Allocation("the Slurm allocation", (("n1", 4), ("n2", 4), ("n3", 4)), exact=False)


def test_a_node_runs_a_rank_per_gpu_else_the_cpu_ranks_asked_for():
    assert ranks_per_node(gpus=4, cpu_ranks=1) == 4
    assert ranks_per_node(gpus=0, cpu_ranks=3) == 3
    with pytest.raises(LayoutError, match="gpus=-1: give the GPUs per node"):
        ranks_per_node(gpus=-1, cpu_ranks=1)
    with pytest.raises(LayoutError, match="ranks_per_node=0: .* set ranks_per_node=1 or more"):
        ranks_per_node(gpus=0, cpu_ranks=0)


def test_one_node_without_hosts_runs_on_localhost():
    assert resolve_hosts(1, NOTHING, 2, None) == ((LOCALHOST, 2),)
    with pytest.raises(LayoutError, match="nodes=2 needs the hosts to run on"):
        resolve_hosts(2, NOTHING, 2, None)
    with pytest.raises(LayoutError, match="nodes=0: .* set nodes=1"):
        resolve_hosts(0, NOTHING, 2, None)


def test_listed_hosts_are_one_a_node_and_win_over_the_allocation():
    given = {"hosts": ["a", "b"], "hostfile": None}
    assert resolve_hosts(2, given, 3, SLURM) == (("a", 3), ("b", 3))
    with pytest.raises(LayoutError, match="hosts lists 2 hosts but nodes=1: set nodes=2"):
        resolve_hosts(1, given, 3, None)
    with pytest.raises(LayoutError, match="nodes=3 but hosts lists only 2 host"):
        resolve_hosts(3, given, 3, None)


def test_a_hostfile_with_too_few_slots_for_a_node_is_refused(tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("a:4\nb slots=2\n")
    given = {"hosts": None, "hostfile": str(hostfile)}
    assert resolve_hosts(2, given, 2, None) == (("a", 2), ("b", 2))
    with pytest.raises(LayoutError) as refused:
        resolve_hosts(2, given, 3, None)
    assert str(refused.value).startswith("hostfile: host b has 2 slot(s) but each node runs 3")


def test_a_schedulers_allocation_gives_its_first_nodes():
    assert resolve_hosts(2, NOTHING, 4, SLURM) == (("n1", 4), ("n2", 4))
    with pytest.raises(LayoutError, match="nodes=4 but the Slurm allocation has 3 node"):
        resolve_hosts(4, NOTHING, 4, SLURM)


def test_ranks_fill_each_host_in_turn_with_sockets_and_gpus():
    placed = place_ranks((("a", 3), ("b", 3)), gpus=3, sockets=2)
    assert placed[4] == RankPlacement(rank=4, host="b", local_rank=1, socket=1, gpu=1)
    assert [p.rank for p in placed] == list(range(6))
    assert [p.socket for p in placed] == [0, 1, 0, 0, 1, 0]
    cpu = place_ranks((("a", 2),), gpus=0, sockets=None)
    assert [(p.socket, p.gpu) for p in cpu] == [(None, None), (None, None)]
