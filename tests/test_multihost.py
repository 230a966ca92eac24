"""Two real hosts: network namespaces with their own hostname and a real sshd each.

``scripts/netns_hosts.sh`` builds them (10.77.0.1 and 10.77.0.2, bridged to
this namespace as 10.77.0.254); horovodrun reaches them over ssh exactly as it
would reach cluster nodes. Needs root, iproute2 and openssh-server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_dir_of, store_uri, tntrun_cli
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow
SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "netns_hosts.sh"
MISSING = [tool for tool in ("ip", "unshare", "ssh", "/usr/sbin/sshd") if not shutil.which(tool)]
CONFIG = ("deterministic=true", "train.epochs=2", "tracking.system_metrics=false",
          "model.dropout=0.0")  # fmt: skip


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    if os.geteuid() != 0 or MISSING:
        pytest.skip(f"needs root and {', '.join(MISSING) or 'iproute2/openssh-server'}")
    state = tmp_path_factory.mktemp("netns")
    up = subprocess.run(["bash", str(SCRIPT), "up", str(state)], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    lines = [line.split() for line in up.stdout.splitlines()]
    yield [line[0] for line in lines], lines[0][1], lines[0][2]
    subprocess.run(["bash", str(SCRIPT), "down", str(state)], check=True)


def remote(hosts_, *extra: str) -> tuple[str, ...]:
    names, port, key = hosts_
    return ("nodes=2", f"hosts=[{','.join(names)}]", "ranks_per_node=1",
            f"horovod.ssh_port={port}", f"horovod.ssh_identity_file={key}",
            "horovod.network_interface=tnt0", *extra)  # fmt: skip


def final_weights(result) -> list[np.ndarray]:
    with np.load(run_dir_of(result) / "final_weights.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


def test_two_hosts_train_like_two_local_ranks(hosts, tmp_path):
    (tmp_path / "hosts").mkdir()
    (tmp_path / "local").mkdir()
    two_hosts = tntrun_cli(tmp_path / "hosts", *remote(hosts), *CONFIG)
    assert two_hosts.returncode == 0, two_hosts.stdout[-3000:]
    assert "rank 0/2: local rank 0, host tnt-h1" in two_hosts.stdout
    assert "rank 1/2: local rank 0, host tnt-h2" in two_hosts.stdout
    command = " ".join(Plan.load(run_dir_of(two_hosts) / "plan.json").launch_command)
    assert "-H 10.77.0.1:1,10.77.0.2:1" in command and "--network-interface tnt0" in command

    local = tntrun_cli(tmp_path / "local", *CONFIG)
    assert local.returncode == 0, local.stdout[-3000:]
    for a, b in zip(final_weights(two_hosts), final_weights(local), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hosts=[10.77.0.9,10.77.0.1]", "host 10.77.0.9: unreachable by ssh"),
        ("horovod.ssh_port=2299", "host 10.77.0.1: unreachable by ssh (port 2299)"),
    ],
)
def test_unreachable_host_or_wrong_port_is_a_clear_error(hosts, tmp_path, override, message):
    start = time.monotonic()
    result = tntrun_cli(tmp_path, *remote(hosts), "horovod.start_timeout=5", override)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - start < 30
    client = MlflowClient(store_uri(tmp_path))
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert run.info.status == "FAILED" and message in run.data.tags["failure.preflight"]
