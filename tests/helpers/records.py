"""A run's record in its store against what its run directory holds: every metric point
rank 0 wrote and every system-metrics sample its host wrote, each once."""

from __future__ import annotations

import collections
import json
from pathlib import Path

from tntrun.contract import run_files


def expected_counts(run_dir: Path) -> collections.Counter:
    """How many points per key rank 0 wrote (what the run's history must hold)."""
    counts: collections.Counter = collections.Counter()
    for line in (run_dir / run_files.METRICS).read_text().splitlines():
        counts.update(json.loads(line)["metrics"].keys())
    return counts


def recorded_counts(client, run_id: str, keys) -> collections.Counter:
    return collections.Counter({key: len(client.get_metric_history(run_id, key)) for key in keys})


def host_samples(run_dir: Path) -> list[dict]:
    """The samples this (one) host's local rank 0 wrote of its system metrics."""
    (found,) = (run_dir / run_files.SYSTEM_METRICS).glob("*.jsonl")
    return [json.loads(line) for line in found.read_text().splitlines()]


def assert_each_sample_once(client, run_id: str, samples: list[dict]) -> None:
    """The run's system metrics hold each sample the host wrote, once (a one-node run)."""
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert sorted(m.step for m in cpu) == [sample["step"] for sample in samples]
    assert sorted(m.timestamp for m in cpu) == [sample["t"] for sample in samples]


def assert_record_whole(client, run_dir: Path, more_points_than: int) -> tuple:
    """The store holds the run of ``run_dir`` FINISHED, with every metric point rank 0 wrote
    (more than ``more_points_than``), each of its host's samples once and its model.keras;
    (the run, the samples)."""
    run_id = (run_dir / run_files.RUN_ID).read_text()
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    expected = expected_counts(run_dir)
    assert sum(expected.values()) > more_points_than
    assert recorded_counts(client, run_id, expected) == expected  # none lost, none twice
    samples = host_samples(run_dir)
    assert_each_sample_once(client, run_id, samples)
    assert "model.keras" in {a.path for a in client.list_artifacts(run_id)}
    return run, samples


def assert_delivered_whole(uri: str, run_dir: Path, more_points_than: int) -> None:
    """What delivering a run (the driver, or ``tntrun sync`` after an outage) must leave in
    the store at ``uri``: :func:`assert_record_whole`, and the final model logged once."""
    from mlflow.tracking import MlflowClient

    run, _ = assert_record_whole(MlflowClient(uri), run_dir, more_points_than)
    assert len(run.outputs.model_outputs) == 1  # the final model, logged once
