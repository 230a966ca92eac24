"""The shaped link and CPU share of the test hosts, and the arithmetic of the benchmarks on them."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from bench.wire import (
    median_and_spread,
    parse_rate,
    relative_errors,
    ring_bound_s,
    weak_scaling_efficiency,
    within,
)
from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.components import missing
from tests.helpers.paths import SCRIPTS
from tntrun.launch.remote_hosts import ssh_command


def test_rates_read_as_tc_reads_them():
    assert parse_rate("1gbit") == 1e9
    assert parse_rate("500mbit") == 5e8
    assert parse_rate("2.5gbit") == 2.5e9
    assert parse_rate("100kbit") == 1e5
    with pytest.raises(ValueError, match="use e.g. 1gbit"):
        parse_rate("1GB/s")


def test_the_ring_bound_moves_two_n_minus_one_over_n_of_the_data():
    # ResNet-50's gradients (25.56 M float32) on 2 ranks at 1 Gbit/s: the data once, 0.82 s.
    assert ring_bound_s(25_557_032 * 4, 2, 1e9) == pytest.approx(0.8178, abs=1e-4)
    assert ring_bound_s(1e9, 4, 8e9) == pytest.approx(1.5)  # 2 * 3/4 of 1 GB at 1 GB/s
    assert ring_bound_s(1e9, 1, 1e9) == 0.0  # nothing to exchange


def test_medians_spreads_and_tolerances():
    assert median_and_spread([1.0, 1.2, 0.9]) == (1.0, pytest.approx(0.3))
    assert within(0.93e9, 1e9, 0.10) and not within(0.89e9, 1e9, 0.10)


def test_prediction_errors_pair_repeats_and_say_which_way():
    assert relative_errors([33.0, 20.0], [30.0, 25.0]) == [pytest.approx(0.1), pytest.approx(-0.2)]
    with pytest.raises(ValueError):
        relative_errors([1.0, 2.0], [1.0])  # a lost repeat must not shift the pairs


def test_weak_scaling_efficiency_is_the_sweep_reports_efficiency():
    from tntrun.tracking import RunSummary
    from tntrun.tracking.report import rows_of

    step_ms = {1: 10.0, 2: 25.0, 4: 40.0}
    micro = 32  # fixed per rank: throughput(N) = N x micro / step(N)

    def run(n: int) -> RunSummary:
        return RunSummary(
            run_id=str(n),
            name=f"job{n}",
            status="FINISHED",
            params={"plan.world_size": str(n)},
            metrics={"steady_samples_per_s": n * micro / step_ms[n] * 1e3},
        )

    report = {row["world_size"]: row["scaling_efficiency"] for row in rows_of(map(run, step_ms))}
    assert weak_scaling_efficiency(step_ms) == pytest.approx(report)
    assert weak_scaling_efficiency(step_ms) == pytest.approx({1: 1.0, 2: 0.4, 4: 0.25})


def netns_hosts_sh(hosts, action: str, value: str) -> dict:
    """``netns_hosts.sh ACTION STATE VALUE`` on the test hosts; what it measured (1 s)."""
    done = subprocess.run(
        ["bash", str(SCRIPTS / "netns_hosts.sh"), action, str(Path(hosts.key).parent), value],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TNT_MEASURE_S": "1"},
    )
    assert_succeeded(done)
    return json.loads(done.stdout.strip().splitlines()[-1])


def on_host(hosts, index: int, command: str) -> str:
    """What ``command`` prints on the test host ``index``, run there over ssh as tntrun does."""
    ssh = ssh_command(hosts.addresses[index], int(hosts.port), hosts.key, timeout=10)
    return subprocess.run(
        [*ssh, command], capture_output=True, text=True, timeout=30, check=True
    ).stdout


@pytest.mark.slow
def test_a_cpu_share_is_a_number_of_cores(tmp_path):
    for bad in ("half", "0.01"):
        done = subprocess.run(
            ["bash", str(SCRIPTS / "netns_hosts.sh"), "cpu", str(tmp_path), bad],
            capture_output=True,
            text=True,
        )
        assert_exit(done, 2)
        assert "CORES: e.g. 0.5" in done.stderr, done.stderr


def root_qdiscs(hosts) -> list[str]:
    """Each test host's root queueing discipline on its link, as the kernel reports it."""
    return [
        subprocess.run(
            ["ip", "netns", "exec", name, "tc", "qdisc", "show", "dev", "tnt0", "root"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for name in hosts.names
    ]


# The rates asked, and whether the measurement (a Python TCP transfer, CPU-bound) reaches
# the rate on a machine whose cores other tests share: 200 Mbit/s always (690 Mbit/s came
# through a 1 Gbit/s link beside three test workers), 1 Gbit/s only on a quiet machine. A
# shaped link never carries more than asked, busy or not.
RATES = {"1gbit": (1e9, False), "200mbit": (2e8, True)}


@pytest.mark.slow
def test_the_hosts_get_the_link_rate_asked(netns_hosts):
    try:
        for value, (expected, reached) in RATES.items():
            measured = netns_hosts_sh(netns_hosts, "shape", value)["bits_per_s"]
            assert measured <= expected * 1.10, (value, measured)
            assert within(measured, expected, 0.10) or not reached, (value, measured)
            assert all(
                " tbf " in q and f"rate {value}" in q.lower() for q in root_qdiscs(netns_hosts)
            )
    finally:
        netns_hosts_sh(netns_hosts, "shape", "off")  # as other tests use them
    assert not any(" tbf " in q for q in root_qdiscs(netns_hosts)), "off lifts the shaping"


@pytest.mark.slow
def test_the_hosts_get_the_cpu_share_asked(netns_hosts):
    """What the host script sets, read back from the kernel (a quota and a cpuset), and
    that the quota holds: busy processes in host 1's cgroups never get more (the machine's
    other work can only lower what they get, so no lower bound is asserted)."""
    cgroups = ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cgroup.controllers")
    if not any(Path(p).exists() for p in cgroups):
        missing("a cgroup CPU controller", "a kernel with cgroup v1 cpu or cgroup v2")
    try:
        for value, cores in (("0.5", 0.5), ("1", 1.0)):
            got = netns_hosts_sh(netns_hosts, "cpu", value)
            assert (got["quota_cores"], got["cpus"]) == (cores, "0"), got  # host 1: core 0
            assert got["cores"] <= cores * 1.10, got
            print(f"\n[cpu share] {value} core(s) asked: {got}")
        # What a rank started over ssh gets: host 2's cgroup and core.
        assert "tntrun-h2" in on_host(netns_hosts, 1, "cat /proc/self/cgroup")
        assert on_host(netns_hosts, 1, "taskset -pc $$").split()[-1] == "1"
    finally:
        lifted = netns_hosts_sh(netns_hosts, "cpu", "off")  # as the other tests use them
    assert lifted["quota_cores"] is None and lifted["cpus"] == f"0-{os.cpu_count() - 1}", lifted
