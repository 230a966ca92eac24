"""The tracker seam: the core protocol, the optional capabilities, tntrun's run summaries
(MLflow's objects stay in tracking/mlflow*), lost runs judged from summaries."""

from __future__ import annotations

import os
import socket

import pytest

from tntrun.contract.driver_alive import driver_tags
from tntrun.tracking import (
    Browsable,
    DatasetLogging,
    LostRunCleanup,
    NestedRuns,
    RunSummary,
    children_of,
)
from tntrun.tracking.lost_runs import lost_runs
from tntrun.tracking.mlflow_tracker import MlflowTracker
from tntrun.tracking.report import rows_of


def _tracker(tmp_path) -> MlflowTracker:
    return MlflowTracker.at(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path)


def test_the_mlflow_tracker_has_every_optional_capability(tmp_path):
    tracker = _tracker(tmp_path)
    for capability in (Browsable, DatasetLogging, LostRunCleanup, NestedRuns):
        assert isinstance(tracker, capability), capability.__name__
    assert not isinstance(object(), NestedRuns)


@pytest.mark.slow  # MLflow runs `uname -p` as it creates a run
def test_a_sweeps_child_runs_come_back_as_run_summaries(tmp_path):
    parent = _tracker(tmp_path)
    parent_id = parent.start("sweep", {})
    for n, status in ((1, "FINISHED"), (2, "FAILED")):
        child = _tracker(tmp_path)
        child.start(f"job{n}", {"world_size": str(n)}, parent_run_id=parent_id)
        child.log_params({"plan.world_size": n})
        child.log_metrics([("steady_samples_per_s", 100.0 * n, 0, 0)])
        child.finish(status)

    children = sorted(children_of(parent), key=lambda run: run.name or "")
    assert all(isinstance(run, RunSummary) for run in children)
    assert [(run.name, run.status) for run in children] == [
        ("job1", "FINISHED"),
        ("job2", "FAILED"),
    ]
    assert children[1].params["plan.world_size"] == "2"
    assert children[1].tags["mlflow.parentRunId"] == parent_id
    assert [row["scaling_efficiency"] for row in rows_of(children)] == [1.0, 1.0]
    assert parent.summary().status == "RUNNING" and parent.summary().name == "sweep"


@pytest.mark.slow  # MLflow runs `uname -p` as it creates a run
def test_reopening_a_run_returns_its_tags_and_forgets_how_it_ended(tmp_path):
    first = _tracker(tmp_path)
    run_id = first.start("run", {"restarts": "1", "preempted": "SIGTERM: stopped after step 9"})
    first.finish("KILLED")

    again = _tracker(tmp_path)
    before = again.reopen(run_id)
    assert before["restarts"] == "1" and before["preempted"].startswith("SIGTERM")
    now = again.summary()
    assert now.status == "RUNNING" and "preempted" not in now.tags
    assert again.run_id == run_id


def test_lost_runs_are_judged_from_summaries():
    gone = {"driver_host": socket.gethostname(), "driver_pid": "4194304", "driver_started": "1.0"}
    runs = [
        RunSummary("alive", tags=driver_tags()),
        RunSummary("gone", tags=gone),
        RunSummary("older tntrun"),  # no driver recorded: nothing to judge by
    ]
    assert lost_runs(runs) == [("gone", f"driver pid 4194304 on {socket.gethostname()} is gone")]
    assert os.getpid() != 4194304
