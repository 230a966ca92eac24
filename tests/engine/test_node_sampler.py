"""A host's system-metrics sampler (rank side): MLflow's names and units, its file's lines,
steps and network totals that go on after a restart or a resume, no GPU here."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor
from mlflow.system_metrics.metrics.disk_monitor import DiskMonitor
from mlflow.system_metrics.metrics.network_monitor import NetworkMonitor

from tntrun.contract.node_metrics import carry_over, samples_file
from tntrun.engine.node_sampler import Gpus, NodeSampler, sampling_this_node


def mlflow_names() -> set[str]:
    """The names MLflow's own CPU, disk and network monitors give one reading."""
    names: set[str] = set()
    for monitor in (CPUMonitor(), DiskMonitor(), NetworkMonitor()):
        monitor.collect_metrics()
        names |= set(monitor.aggregate_metrics())
    return names


def lines_of(run_dir, node) -> list[dict]:
    return [json.loads(line) for line in samples_file(run_dir, node).read_text().splitlines()]


def test_a_sample_is_a_line_of_mlflow_named_plausible_values(tmp_path):
    sampler = NodeSampler(tmp_path, "node-a", 60.0)
    before = int(time.time() * 1000)
    sampler.sample()
    sampler.sample()
    sampler.stop()
    first, second = lines_of(tmp_path, "node-a")
    assert set(first) == {"t", "step", "metrics"}
    assert before <= first["t"] <= second["t"] <= time.time() * 1000
    assert (first["step"], second["step"]) == (0, 1)
    values = second["metrics"]
    assert set(values) == mlflow_names()
    assert 0 <= values["cpu_utilization_percentage"] <= 100
    assert values["system_memory_usage_megabytes"] > 0
    assert 0 < values["system_memory_usage_percentage"] <= 100
    assert values["disk_usage_megabytes"] > 0 and values["disk_available_megabytes"] > 0
    assert values["network_receive_megabytes"] >= 0 and values["network_transmit_megabytes"] >= 0


def test_without_nvidia_ml_py_or_a_gpu_the_sampler_goes_on_without_gpu_metrics(
    tmp_path, monkeypatch
):
    if not Path("/dev/nvidiactl").exists():  # no NVIDIA driver: none found, installed or not
        assert Gpus.found() is None
    monkeypatch.setitem(sys.modules, "pynvml", None)  # nvidia-ml-py not installed
    assert Gpus.found() is None
    sampler = NodeSampler(tmp_path, "node-a", 60.0)
    assert not sampler.has_gpus
    sample = sampler.sample()
    sampler.stop()
    assert sample.metrics and not any(key.startswith("gpu_") for key in sample.metrics)


def test_steps_and_network_totals_go_on_after_a_restart_and_a_resume(tmp_path):
    first = NodeSampler(tmp_path / "run", "node-a", 60.0)
    first.sample()
    last = first.sample()
    first.stop()
    restarted = NodeSampler(tmp_path / "run", "node-a", 60.0)  # restarted ranks
    after_restart = restarted.sample()
    restarted.stop()
    assert after_restart.step == last.step + 1 == 2
    for key in ("network_receive_megabytes", "network_transmit_megabytes"):
        assert after_restart.metrics[key] >= last.metrics[key]

    assert carry_over(tmp_path / "run", tmp_path / "resumed") == ["node-a"]
    resumed = NodeSampler(tmp_path / "resumed", "node-a", 60.0)
    assert resumed.sample().step == 3
    resumed.stop()
    other = NodeSampler(tmp_path / "resumed", "node-b", 60.0)  # a host new to the run
    assert other.sample().step == 0
    other.stop()


def test_the_thread_samples_after_a_second_every_interval_and_once_more_when_stopped(tmp_path):
    sampler = NodeSampler(tmp_path, "node-a", 0.3).start()
    time.sleep(1.5)  # the first sample at 0.3 s (the interval is shorter than 1 s), then 0.6...
    sampler.stop()
    steps = [line["step"] for line in lines_of(tmp_path, "node-a")]
    assert steps == list(range(len(steps))) and 3 <= len(steps) <= 7


def test_only_local_rank_0_samples_and_only_when_asked(tmp_path, monkeypatch, compose_cfg):
    tracking = compose_cfg("tracking.system_metrics_interval_s=60").tracking
    monkeypatch.setenv("HOROVOD_HOSTNAME", "node-b")
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "1")
    with sampling_this_node(tracking, tmp_path) as sampler:
        assert sampler is None
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "0")
    off = compose_cfg("tracking.system_metrics=false").tracking
    with sampling_this_node(off, tmp_path) as sampler:
        assert sampler is None
    with sampling_this_node(tracking, tmp_path) as sampler:
        assert sampler is not None and sampler.node == "node-b"
    assert [line["step"] for line in lines_of(tmp_path, "node-b")] == [0]  # when it stopped
