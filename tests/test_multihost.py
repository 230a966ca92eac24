"""Two real hosts: network namespaces with their own hostname and a real sshd each.

``scripts/netns_hosts.sh`` builds them (10.77.0.1 and 10.77.0.2, bridged to
this namespace as 10.77.0.254); horovodrun reaches them over ssh exactly as it
would reach cluster nodes. Needs root, iproute2 and openssh-server.
"""

from __future__ import annotations

import time

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import (
    DETERMINISTIC,
    NetnsHosts,
    assert_same_weights,
    final_weights,
    run_dir_of,
    store_uri,
    tntrun_cli,
)
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow


def remote(hosts: NetnsHosts, *extra: str) -> tuple[str, ...]:
    return ("nodes=2", f"hosts=[{','.join(hosts.addresses)}]", "ranks_per_node=1",
            *hosts.ssh_overrides(), *extra)  # fmt: skip


def test_two_hosts_train_like_two_local_ranks(netns_hosts, two_local_ranks_weights, tmp_path):
    two_hosts = tntrun_cli(tmp_path, *remote(netns_hosts), *DETERMINISTIC)
    assert two_hosts.returncode == 0, two_hosts.stdout[-3000:]
    assert "rank 0/2: local rank 0, host tnt-h1" in two_hosts.stdout
    assert "rank 1/2: local rank 0, host tnt-h2" in two_hosts.stdout
    command = " ".join(Plan.load(run_dir_of(two_hosts) / "plan.json").launch_command)
    assert "-H 10.77.0.1:1,10.77.0.2:1" in command and "--network-interface tnt0" in command
    assert_same_weights(final_weights(two_hosts), two_local_ranks_weights)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hosts=[10.77.0.9,10.77.0.1]", "host 10.77.0.9: unreachable by ssh"),
        ("horovod.ssh_port=2299", "host 10.77.0.1: unreachable by ssh (port 2299)"),
    ],
)
def test_unreachable_host_or_wrong_port_is_a_clear_error(netns_hosts, tmp_path, override, message):
    start = time.monotonic()
    result = tntrun_cli(tmp_path, *remote(netns_hosts), "horovod.start_timeout=5", override)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - start < 30
    client = MlflowClient(store_uri(tmp_path))
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert run.info.status == "FAILED" and message in run.data.tags["failure.preflight"]
