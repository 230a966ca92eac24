"""Two real hosts: network namespaces with their own hostname and a real sshd each.

``scripts/netns_hosts.sh`` builds them (10.77.0.1 and 10.77.0.2, bridged to
this namespace as 10.77.0.254); horovodrun reaches them over ssh exactly as it
would reach cluster nodes. Needs root, iproute2 and openssh-server. The hosts share
this machine's process table, so tests/helpers/processes.py finds a rank left on either host.
"""

from __future__ import annotations

import shlex
import subprocess
import time

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.bounds import AFTER_RANK_FAILURE_S, BUSY_MARGIN_S
from tests.helpers.commands import clean_env, tntrun_cli
from tests.helpers.driving import (
    LONG_RUN,
    assert_ctrl_c_stops_every_rank,
    assert_nothing_left,
    fault,
    run_reading,
    run_until,
    the_run,
)
from tests.helpers.netns import NetnsHosts
from tests.helpers.paths import BIN
from tests.helpers.processes import Process, describe
from tests.helpers.runs import (
    DETERMINISTIC,
    assert_same_weights,
    final_weights,
    run_dir_of,
    store_uri,
)
from tntrun.planning.plan import Plan

pytestmark = pytest.mark.slow


def remote(hosts: NetnsHosts, *extra: str) -> tuple[str, ...]:
    return (*hosts.one_rank_per_host(), *extra)


# Found beside the ranks while they run: rank 1 is started by horovodrun's ssh client.
REMOTE = ("driver", "horovodrun", "ssh")


def assert_one_rank_per_host(seen: list[Process], hosts: NetnsHosts) -> None:
    """The positive control found rank r running on host r (horovodrun's HOROVOD_HOSTNAME)."""
    for rank, address in enumerate(hosts.addresses):
        (found,) = [p for p in seen if p.role == f"rank {rank}"]
        assert found.environ.get("HOROVOD_HOSTNAME") == address, describe(seen)


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hosts=[10.77.0.9,10.77.0.1]", "host 10.77.0.9: unreachable by ssh"),
        ("horovod.ssh_port=2299", "host 10.77.0.1: unreachable by ssh (port 2299)"),
    ],
)
def test_unreachable_host_or_wrong_port_is_a_clear_error(netns_hosts, tmp_path, override, message):
    args = (*remote(netns_hosts), "horovod.start_timeout=3", override)
    code, text, after_plan_s = run_reading(tmp_path, args, marker="tntrun: 2 ranks on")
    assert code == 2, text
    assert message in text and "Traceback" not in text and "tntrun: 2 ranks on" in text, text
    # From the plan to the refusal: the ssh answer is awaited start_timeout (+5 s for ssh
    # itself) while the store opens to record the failure (MLflow's import: 10 s on a busy
    # machine), and a margin. The driver's start-up before the plan is not the pre-flight's
    # (timed from the command's start, 32 s were seen on a machine running 3 test workers).
    assert after_plan_s < 3 + 5 + 10 + BUSY_MARGIN_S, f"{after_plan_s:.1f} s"
    client = MlflowClient(store_uri(tmp_path))
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert run.info.status == "FAILED" and message in run.data.tags["failure.preflight"]


def test_a_host_that_does_not_see_the_run_directory_is_refused(netns_hosts, tmp_path):
    """The driver's output_root on a tmpfs in its own mount namespace: the hosts see the
    directory's path but not its files, as a host without the shared filesystem would."""
    private = tmp_path / "private"
    private.mkdir()
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    overrides = (
        *remote(netns_hosts),
        *DETERMINISTIC,
        f"output_root={private / 'outputs'}",
        f"tracking.uri={store}",
    )
    command = shlex.join([str(BIN / "tntrun"), *overrides])
    result = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f"mount -t tmpfs tmpfs {private} && exec {command}",
        ],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_exit(result, 2)
    assert "host 10.77.0.1 does not see the run directory" in result.stderr
    assert "put output_root on a filesystem every host shares" in result.stderr
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert run.info.status == "FAILED" and "does not see" in run.data.tags["failure.preflight"]


def test_a_rank_killed_on_the_second_host_fails_the_run_and_leaves_nothing(netns_hosts, tmp_path):
    code, seconds, output, seen = run_until(
        tmp_path, (*remote(netns_hosts), *LONG_RUN, *fault("kill")), "injecting fault", roles=REMOTE
    )
    assert_one_rank_per_host(seen, netns_hosts)
    fault_at = time.monotonic() - seconds
    assert code != 0 and seconds < AFTER_RANK_FAILURE_S, f"{seconds:.1f} s to end after the fault"
    run_dir, _, run = the_run(tmp_path, output)
    assert run.info.status == "FAILED" and run.data.tags["failure.rank"] == "1"
    # horovodrun's ssh does not stop a remote rank: the driver's last beat (driver_alive)
    # does. One pid namespace: the search sees both hosts' processes.
    assert_nothing_left(run_dir, seen, fault_at, AFTER_RANK_FAILURE_S)


def test_ctrl_c_of_a_two_host_run_stops_both_hosts(netns_hosts, tmp_path):
    # The remote rank, which horovodrun's ssh leaves running, ends on the driver's last
    # beat (driver_alive), within half a second of it.
    ran = assert_ctrl_c_stops_every_rank(tmp_path, *remote(netns_hosts), settle_s=2.0, roles=REMOTE)
    assert_one_rank_per_host(ran.seen, netns_hosts)


def test_two_hosts_train_like_two_local_ranks_and_each_host_s_system_metrics_reach_the_run(
    netns_hosts, two_local_ranks_weights, tmp_path
):
    """The weights of two local ranks; and local rank 0 on each host samples it, the driver
    logs the samples per node, with MLflow's node-id naming, each sample once (sampling in
    a thread of its own leaves the training as it was: one run shows both)."""
    sampled = [o for o in DETERMINISTIC if not o.startswith("tracking.system_metrics")]
    interval = "tracking.system_metrics_interval_s=0.5"
    result = tntrun_cli(tmp_path, *remote(netns_hosts), *sampled, interval)
    assert_succeeded(result)
    assert "rank 0/2: local rank 0, host tnt-h1" in result.stdout
    assert "rank 1/2: local rank 0, host tnt-h2" in result.stdout
    command = " ".join(Plan.load(run_dir_of(result) / "plan.json").launch_command)
    assert "-H 10.77.0.1:1,10.77.0.2:1" in command and "--network-interface tnt0" in command
    assert_same_weights(final_weights(result), two_local_ranks_weights)
    run_dir = run_dir_of(result)
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run((run_dir / "run_id").read_text())
    system = {key for key in run.data.metrics if key.startswith("system/")}
    nodes = {key.split("/")[1] for key in system}
    assert nodes == set(netns_hosts.addresses), sorted(system)  # no driver's series apart
    for node in netns_hosts.addresses:
        cpu = client.get_metric_history(
            run.info.run_id, f"system/{node}/cpu_utilization_percentage"
        )
        assert len(cpu) >= 2 and [m.step for m in cpu] == list(range(len(cpu)))
        assert all(0 <= m.value <= 100 for m in cpu)
        assert run.data.metrics[f"system/{node}/system_memory_usage_megabytes"] > 0
        for name in ("disk_usage_percentage", "network_receive_megabytes"):
            assert f"system/{node}/{name}" in system
        lines = (run_dir / "system" / f"{node}.jsonl").read_text().splitlines()
        assert len(lines) == len(cpu)  # every sample the host wrote, once
