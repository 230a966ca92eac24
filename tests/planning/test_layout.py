"""Host lists: Slurm node-list expansion and hostfile parsing."""

from __future__ import annotations

import pytest

from tntrun.environments import LayoutError
from tntrun.environments.slurm import expand_slurm_nodelist
from tntrun.environments.static_hosts import parse_hostfile


@pytest.mark.parametrize(
    ("nodelist", "hosts"),
    [
        ("node01", ["node01"]),
        ("node[01-04]", ["node01", "node02", "node03", "node04"]),
        ("a,b", ["a", "b"]),
        ("gpu[8-10,12]", ["gpu8", "gpu9", "gpu10", "gpu12"]),
        ("n[098-101]-ib,login1", ["n098-ib", "n099-ib", "n100-ib", "n101-ib", "login1"]),
    ],
)
def test_slurm_nodelist_expansion(nodelist, hosts):
    assert expand_slurm_nodelist(nodelist) == hosts


def test_hostfile_accepts_tarantella_colon_and_horovod_styles():
    text = "# comment\nhostA\n\nhostB:4   # four slots\nhost-c.example.org slots=8\n"
    assert parse_hostfile(text) == [("hostA", None), ("hostB", 4), ("host-c.example.org", 8)]


@pytest.mark.parametrize("text", ["a b c\n", "host:four\n", "# only comments\n"])
def test_malformed_hostfile(text):
    with pytest.raises(LayoutError, match="hostfile=hosts"):
        parse_hostfile(text, "hosts")
