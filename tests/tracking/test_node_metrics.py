"""The driver's relay of each host's system metrics: MLflow's per-node names, every sample
once through a failed send, a second relay on the directory and a run made anew."""

from __future__ import annotations

import json

import pytest

from tntrun.contract.metrics import METRICS_FILE, MetricsWriter
from tntrun.contract.node_metrics import Sample, SampleWriter, samples_file
from tntrun.tracking.metrics_stream import MetricsRelay
from tntrun.tracking.node_metrics import NodeMetricsRelay

CPU = "cpu_utilization_percentage"
MEMORY = "system_memory_usage_megabytes"


def write_samples(run_dir, node: str, steps: range, t0: int = 1_000) -> None:
    writer = SampleWriter(run_dir, node)
    for step in steps:
        writer.write(Sample(t0 + 10 * step, step, {CPU: 10.0 + step, MEMORY: 500.0}))
    writer.close()


def relay_of(run_dir, sent: list, run_id: str = "run-1", per_node: bool = True):
    return NodeMetricsRelay(run_dir, sent.extend, lambda: run_id, per_node)


def test_each_node_is_named_as_mlflow_names_a_monitor_with_a_node_id(tmp_path):
    write_samples(tmp_path, "10.77.0.1", range(2))
    write_samples(tmp_path, "node2", range(1), t0=2_000)
    sent: list = []
    assert relay_of(tmp_path, sent).drain() == 3
    assert sorted(sent) == sorted(
        [
            ("system/10.77.0.1/cpu_utilization_percentage", 10.0, 1_000, 0),
            ("system/10.77.0.1/system_memory_usage_megabytes", 500.0, 1_000, 0),
            ("system/10.77.0.1/cpu_utilization_percentage", 11.0, 1_010, 1),
            ("system/10.77.0.1/system_memory_usage_megabytes", 500.0, 1_010, 1),
            ("system/node2/cpu_utilization_percentage", 10.0, 2_000, 0),
            ("system/node2/system_memory_usage_megabytes", 500.0, 2_000, 0),
        ]
    )


def test_a_one_node_run_is_named_as_mlflow_names_a_monitor_without_a_node_id(tmp_path):
    write_samples(tmp_path, "localhost", range(1))
    sent: list = []
    relay_of(tmp_path, sent, per_node=False).drain()
    assert sorted(key for key, *_ in sent) == ["system/" + CPU, "system/" + MEMORY]


def test_every_sample_reaches_the_run_once_through_a_failed_send_and_a_second_relay(tmp_path):
    write_samples(tmp_path, "a", range(3))
    write_samples(tmp_path, "b", range(2))
    sent: list = []
    down = [True]

    def send(points: list) -> None:
        if down[0]:
            raise ConnectionRefusedError("the store is down")
        sent.extend(points)

    relay = NodeMetricsRelay(tmp_path, send, lambda: "run-1", True)
    with pytest.raises(ConnectionRefusedError):
        relay.drain()
    down[0] = False
    assert relay.drain() == 5
    write_samples(tmp_path, "b", range(2, 3))
    with samples_file(tmp_path, "a").open("a") as raw:  # a line being written waits
        raw.write(json.dumps({"t": 1, "step": 3, "metrics": {CPU: 1.0}})[:-3])
    assert relay.drain() == 1
    again = NodeMetricsRelay(tmp_path, send, lambda: "run-1", True)  # tntrun sync, later
    assert again.drain() == 0
    with samples_file(tmp_path, "a").open("a") as raw:
        raw.write("0}}\n")
    assert again.drain() == 1
    steps = sorted((key.split("/")[1], step) for key, _, _, step in sent if key.endswith(CPU))
    assert steps == [("a", 0), ("a", 1), ("a", 2), ("a", 3), ("b", 0), ("b", 1), ("b", 2)]
    assert len(sent) == 2 * 6 + 1  # two values a sample; the completed line has one

    made_anew: list = []  # tntrun sync into a store without the run: a new run, every sample
    assert relay_of(tmp_path, made_anew, run_id="run-2").drain() == 7


def test_a_line_that_is_not_a_sample_is_skipped_not_a_stop(tmp_path):
    write_samples(tmp_path, "a", range(1))
    with samples_file(tmp_path, "a").open("a") as raw:
        raw.write("{cut by a killed rank\n")
    write_samples(tmp_path, "a", range(1, 2))
    sent: list = []
    assert relay_of(tmp_path, sent).drain() == 2


def test_batches_stay_within_one_request_of_points(tmp_path):
    write_samples(tmp_path, "a", range(5))
    batches: list = []
    NodeMetricsRelay(tmp_path, batches.append, lambda: "run-1", True, max_points=4).drain()
    assert [len(batch) for batch in batches] == [4, 4, 2]


def test_every_host_s_new_samples_go_in_one_request_whatever_the_host_count(tmp_path):
    """32 hosts with a sample each: one send (the store's requests per drain stay flat as
    hosts are added), then a new sample of 2 hosts: one more; offsets per file all right."""
    for host in range(32):
        write_samples(tmp_path, f"10.77.0.{host + 1}", range(1))
    batches: list = []
    relay = NodeMetricsRelay(tmp_path, batches.append, lambda: "run-1", True)
    assert relay.drain() == 32 and [len(batch) for batch in batches] == [64]
    write_samples(tmp_path, "10.77.0.3", range(1, 2))
    write_samples(tmp_path, "10.77.0.7", range(1, 2))
    assert relay.drain() == 2 and [len(batch) for batch in batches] == [64, 4]
    again: list = []
    assert NodeMetricsRelay(tmp_path, again.append, lambda: "run-1", True).drain() == 0
    assert again == []


def test_batches_across_hosts_split_at_the_request_size_and_resume_where_they_stopped(tmp_path):
    for host in ("a", "b", "c"):
        write_samples(tmp_path, host, range(3))
    sent: list = []
    calls = [0]

    def send(points: list) -> None:
        calls[0] += 1
        if calls[0] == 2:
            raise ConnectionRefusedError("the store is down")
        sent.append(points)

    relay = NodeMetricsRelay(tmp_path, send, lambda: "run-1", True, max_points=8)
    with pytest.raises(ConnectionRefusedError):
        relay.drain()
    assert relay.drain() == 5  # the 4 of the first request stayed sent
    steps = sorted((k.split("/")[1], step) for batch in sent for k, _, _, step in batch if CPU in k)
    assert steps == [(host, step) for host in "abc" for step in range(3)]
    assert [len(batch) for batch in sent] == [8, 8, 2]


def test_the_metrics_relay_carries_the_hosts_samples_with_rank_0s_lines(tmp_path):
    sent: list = []
    writer = MetricsWriter(tmp_path)
    nodes = relay_of(tmp_path, sent)
    with MetricsRelay(tmp_path / METRICS_FILE, sent.extend, interval_s=3600, nodes=nodes):
        writer.log({"loss": 0.5}, step=0)
        write_samples(tmp_path, "a", range(1))
    writer.close()
    assert sorted(key for key, *_ in sent) == ["loss", "system/a/" + CPU, "system/a/" + MEMORY]
