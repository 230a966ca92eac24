"""An elastic run's hosts on the driver: what discovery lists, the wait below min_nodes,
and hosts that come while the ranks train (the driver then asks the ranks to stop).

Discovery is a real command reading a real file; the tests that ask it start processes.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import pytest

from tests.helpers.plans import plan_for
from tntrun.launch.elastic import ElasticHosts, names

THREE = ("hosts=[a,b,c]", "ranks_per_node=1", "global_batch_size=48", "elastic.min_nodes=2")
FAST = ("elastic.discovery_interval_s=0.05",)


def hosts_of(
    compose_cfg, *overrides: str, discovery: Path | None = None
) -> tuple[ElasticHosts, list[str]]:
    """The ElasticHosts of a 2..3-node run, and the list its stop requests go to."""
    asked = (f"elastic.discovery='cat {discovery}'",) if discovery else ()
    stops: list[str] = []
    plan = plan_for(compose_cfg, *THREE, *FAST, *asked, *overrides)
    return ElasticHosts(plan, stops.append), stops


def test_hosts_are_named_in_order_or_none():
    assert names((("a", 1), ("b", 1))) == "a, b"
    assert names(()) == "none"


def test_without_discovery_the_runs_own_hosts_stay_available(compose_cfg):
    hosts, _ = hosts_of(compose_cfg)
    assert hosts.available() == (("a", 1), ("b", 1), ("c", 1))
    assert hosts.after_failure((("a", 1), ("b", 1), ("c", 1))) == (("a", 1), ("b", 1), ("c", 1))


def test_a_host_beyond_the_current_ones_asks_the_ranks_to_stop_and_is_grown_to(compose_cfg):
    hosts, stops = hosts_of(compose_cfg)
    with hosts.watching((("a", 1), ("b", 1))):
        deadline = time.monotonic() + 5
        while hosts.growing is None and time.monotonic() < deadline:
            time.sleep(0.01)
    assert hosts.growing == (("a", 1), ("b", 1), ("c", 1))
    assert stops == ["elastic: c joins"]


def test_at_max_nodes_nobody_watches(compose_cfg):
    hosts, stops = hosts_of(compose_cfg)
    with hosts.watching((("a", 1), ("b", 1), ("c", 1))):
        time.sleep(0.2)
        assert not any(t.name == "tntrun-elastic" for t in threading.enumerate())
    assert hosts.growing is None and stops == []


@pytest.mark.slow
def test_after_a_failure_the_run_goes_on_with_what_discovery_lists_up_to_max(compose_cfg, tmp_path):
    listed = tmp_path / "hosts"
    listed.write_text("c\nd\na\nb\n")
    hosts, _ = hosts_of(compose_cfg, discovery=listed)
    assert hosts.after_failure((("a", 1), ("b", 1), ("c", 1))) == (("c", 1), ("d", 1), ("a", 1))


@pytest.mark.slow
def test_below_min_nodes_it_waits_for_hosts_to_come_back(compose_cfg, tmp_path):
    listed = tmp_path / "hosts"
    listed.write_text("a\n")
    hosts, _ = hosts_of(compose_cfg, "elastic.timeout_s=30", discovery=listed)
    back = threading.Timer(0.3, lambda: listed.write_text("a\nc\n"))
    back.start()
    start = time.monotonic()
    try:
        assert hosts.after_failure((("a", 1), ("b", 1), ("c", 1))) == (("a", 1), ("c", 1))
    finally:
        back.cancel()
    assert 0.3 <= time.monotonic() - start < 10


@pytest.mark.slow
def test_below_min_nodes_for_longer_than_the_timeout_ends_the_run(compose_cfg, tmp_path, caplog):
    listed = tmp_path / "hosts"
    listed.write_text("a\n")
    hosts, _ = hosts_of(compose_cfg, "elastic.timeout_s=0.3", discovery=listed)
    start = time.monotonic()
    with caplog.at_level(logging.ERROR, logger="tntrun.launch.elastic"):
        assert hosts.after_failure((("a", 1), ("b", 1), ("c", 1))) is None
    assert 0.3 <= time.monotonic() - start < 10
    (said,) = caplog.messages
    assert "1 node(s) available (a), fewer than elastic.min_nodes=2 for 0.3 s" in said
    assert said.endswith("hosts lost: b, c")


@pytest.mark.slow
def test_a_failing_discovery_is_a_warning_and_no_host(compose_cfg, tmp_path, caplog):
    hosts, _ = hosts_of(compose_cfg, discovery=tmp_path / "missing")
    with caplog.at_level(logging.WARNING, logger="tntrun.launch.elastic"):
        assert hosts.available() == ()
    (said,) = caplog.messages
    assert said.startswith(f"tntrun: elastic: elastic.discovery=cat {tmp_path / 'missing'} failed")
