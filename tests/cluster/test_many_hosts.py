"""16 and 32 network-namespace hosts x 1 rank: the default run FINISHED, a killed rank
FAILED, an elastic run shrinking by a host and growing back FINISHED, and after each
nothing left on any host (every namespace's processes are searched, not the run's).

Not in ``make test``: on 2 cores a 32-rank launch alone costs minutes. ``make test-scale``
runs them (``TNTRUN_SCALE_TESTS=1``); alone, as the hosts' names are fixed.
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.bounds import AFTER_RANK_FAILURE_S
from tests.helpers.commands import tntrun_cli
from tests.helpers.driving import LONG_RUN, fault, run_reading, the_run
from tests.helpers.netns import (
    NetnsHosts,
    netns_hosts_down,
    netns_hosts_in_use,
    netns_hosts_up,
    processes_on_hosts,
    require_netns_hosts,
)

SCALE_ENV = "TNTRUN_SCALE_TESTS"
pytestmark = [
    pytest.mark.slow,
    pytest.mark.scale,
    pytest.mark.skipif(os.environ.get(SCALE_ENV) != "1", reason=f"make test-scale ({SCALE_ENV}=1)"),
]
HOST_COUNTS = (16, 32)
LEFT_WITHIN_S = 10.0  # a remote rank ends on the driver's last beat (tests/helpers/bounds.py)
# 32 ranks importing TensorFlow on 2 cores outlast Gloo's own 30 s wait at the rendezvous.
SLOW_START = ("horovod.gloo_timeout_s=600",)


@pytest.fixture(scope="module", params=HOST_COUNTS, ids=lambda count: f"{count}hosts")
def many_hosts(request, tmp_path_factory) -> tuple[NetnsHosts, Path]:
    """``count`` hosts up for the module's tests at that count; their state folder."""
    require_netns_hosts()
    if netns_hosts_in_use():
        pytest.fail("the netns hosts are up already (another session?): run make test-scale alone")
    state = tmp_path_factory.mktemp(f"netns-{request.param}")
    started = time.monotonic()
    hosts = netns_hosts_up(state, count=request.param, spare=0)
    print(f"{request.param} hosts up in {time.monotonic() - started:.1f} s")
    yield hosts, state
    netns_hosts_down(state)


def assert_nothing_left_on_any_host(state: Path) -> None:
    """Every host's namespace holds its sshd alone, at the latest LEFT_WITHIN_S from now."""
    deadline = time.monotonic() + LEFT_WITHIN_S
    while (left := processes_on_hosts(state)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, f"left on the hosts: {left}"


def test_the_default_run_finishes_with_a_rank_on_every_host(many_hosts, tmp_path):
    hosts, state = many_hosts
    result = tntrun_cli(tmp_path, *hosts.one_rank_per_host(), *SLOW_START, timeout=1200)
    assert_succeeded(result)
    count = len(hosts.addresses)
    run_dir, _, run = the_run(tmp_path, result.stdout)
    for rank, name in enumerate(hosts.names):
        # Above 16 ranks the console shows rank 0's lines alone: each rank's are in its log.
        said = (run_dir / "logs" / f"rank.{rank}.log").read_text()
        assert f"rank {rank}/{count}: local rank 0, host {name}" in said, said[-2000:]
    assert run.info.status == "FINISHED" and run.data.tags["world_size"] == str(count)
    nodes = {key.split("/")[1] for key in run.data.metrics if key.startswith("system/")}
    assert nodes == set(hosts.addresses)  # every host's system metrics reached the run
    assert_nothing_left_on_any_host(state)


def test_a_rank_killed_on_the_last_host_fails_the_run(many_hosts, tmp_path):
    hosts, state = many_hosts
    last = len(hosts.addresses) - 1
    args = (*hosts.one_rank_per_host(), *SLOW_START, *LONG_RUN, *fault("kill", rank=last))
    # Above 16 ranks the console shows rank 0's lines and errors, not the killed rank's
    # announcement: the clock starts at horovodrun's line on its exit (a little after it).
    marker = f"Process {last} exit"
    code, output, after_fault_s = run_reading(tmp_path, args, marker=marker)
    assert code != 0 and marker in output, output[-3000:]
    assert after_fault_s < AFTER_RANK_FAILURE_S, f"{after_fault_s:.1f} s to end after the fault"
    run_dir, _, run = the_run(tmp_path, output)
    assert "injecting fault 'kill'" in (run_dir / "logs" / f"rank.{last}.log").read_text()
    assert run.info.status == "FAILED" and run.data.tags["failure.rank"] == str(last)
    assert_nothing_left_on_any_host(state)


# Epochs of the elastic run: about 40 steps after the fault, so the smaller world is still
# training when the host is listed again (global batch 240 at 16 hosts: 5 steps an epoch of
# the digits; 992 at 32: 1 step).
ELASTIC_EPOCHS = {16: 10, 32: 40}


def elastic_args(hosts: NetnsHosts, listed: Path, once: Path) -> tuple[str, ...]:
    """Elastic from N-1 to N nodes, the last host's rank killed at step 3 (once: not again
    when it is back); a global batch both sizes divide."""
    count = len(hosts.addresses)
    return (
        *hosts.one_rank_per_host(),
        *SLOW_START,
        f"elastic.min_nodes={count - 1}",
        f"elastic.discovery=cat {listed}",
        "elastic.commit_every_steps=1",
        "elastic.discovery_interval_s=1",
        f"global_batch_size={math.lcm(count, count - 1)}",
        f"train.epochs={ELASTIC_EPOCHS[count]}",
        "tracking.system_metrics=false",
        *fault("kill", rank=count - 1, step=3),
        f"+callbacks.fault.once_file={once}",
    )


def test_an_elastic_run_loses_the_last_host_and_grows_back(many_hosts, tmp_path):
    hosts, state = many_hosts
    count, last = len(hosts.addresses), hosts.addresses[-1]
    listed = tmp_path / "hosts.txt"
    listed.write_text("".join(f"{host}\n" for host in hosts.addresses[:-1]))
    shrunk = []

    def on_line(line: str) -> None:
        if f"elastic: {count} -> {count - 1} node(s)" in line:
            shrunk.append(line)
        elif len(shrunk) == 1 and f"/{ELASTIC_EPOCHS[count]}: " in line:  # "epoch k/n: "
            shrunk.append(line)  # the smaller world trained an epoch: the host is back
            listed.write_text("".join(f"{host}\n" for host in hosts.addresses))

    args = elastic_args(hosts, listed, tmp_path / "fault-once")
    code, output, _ = run_reading(tmp_path, args, on_line)
    assert code == 0, output[-4000:]
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FINISHED", run_dir
    tags = run.data.tags
    assert tags["restart.1"].startswith(f"elastic: {count} -> {count - 1} node(s)")
    assert f"({last} lost)" in tags["restart.1"]
    assert tags["restart.2"].startswith(f"elastic: {count - 1} -> {count} node(s)")
    assert tags["world_size"] == str(count)
    assert_nothing_left_on_any_host(state)
