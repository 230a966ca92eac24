"""``elastic.discovery`` asked before launch: a command that fails or prints garbage is one
config-error line, and no rank starts nor run is tracked."""

from __future__ import annotations

import pytest

from tests.helpers.asserts import assert_exit
from tntrun.errors import PlanError
from tntrun.launch.discovery import available_hosts, discovery_problems

pytestmark = pytest.mark.slow  # discovery is a real command


def test_discovery_lists_hosts_that_can_take_a_node(tmp_path):
    listed = tmp_path / "hosts.txt"
    listed.write_text("a:2\nb:1\nc\na:2\n")
    got = available_hosts(f"cat {listed}", (), per_node=2)
    assert got == (("a", 2), ("c", 2)), "b has too few slots for a node; a once"
    assert available_hosts(None, (("x", 1),), per_node=2) == (("x", 2),)


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("echo nope >&2; exit 3", "failed (exit 3): nope"),
        (
            "echo 'a slots=2'",
            "printed 'a slots=2': print one host or host:slots (slots 1 or more) a line",
        ),
    ],
)
def test_a_discovery_that_fails_or_prints_garbage_is_one_line(command, says):
    (line,) = discovery_problems(command, per_node=1)
    assert line == f"elastic.discovery={command} {says}"
    with pytest.raises(PlanError):
        available_hosts(command, (), per_node=1)


@pytest.mark.parametrize(
    ("printed", "says"),
    [
        ("", "printed no host: it must print the hosts the run may use now"),
        ("a:1\\nb:1", "lists a:1, b:1: none has the 2 slots a node of ranks_per_node=2 needs"),
    ],
)
def test_a_discovery_with_no_host_that_can_take_a_node_is_one_line(printed, says):
    command = f"printf '{printed}'"
    (line,) = discovery_problems(command, per_node=2)
    assert line.startswith(f"elastic.discovery={command} {says}"), line


def test_a_bad_discovery_stops_the_run_before_any_rank(run_tntrun, tmp_path):
    result = run_tntrun("elastic.min_nodes=1", "elastic.discovery=exit 7", "global_batch_size=48")
    assert_exit(result, 2)
    (line,) = [ln for ln in result.stderr.splitlines() if "elastic.discovery" in ln]
    assert line == "tntrun: config error: elastic.discovery=exit 7 failed (exit 7): no message"
    assert "MLflow run id" not in result.stdout  # nothing tracked: no run to leave RUNNING
