"""The one run path on the driver: ``resolve`` (shared by the CLI, api.plan and api.run),
the status the supervisor alone decides, and the tracker's one typed input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tntrun.config.schema import TrackingConfig
from tntrun.contract.run_status import RunStatus
from tntrun.errors import PlanError
from tntrun.experiment import Experiment
from tntrun.launch.rank_job import LaunchResult
from tntrun.launch.supervisor import ended_status
from tntrun.preparation import resolve
from tntrun.tracking import TrackerSettings, tracker_for
from tntrun.tracking.mlflow_tracker import MlflowTracker

TWO_NODES = ("model=resnet50", "nodes=2", "gpus=4", "hosts=[a,b]", "dry_run=true")


def test_resolve_plans_the_layout_the_command_line_gives(compose_cfg, tmp_path):
    overrides = (*TWO_NODES, f"output_root={tmp_path}")
    exp = Experiment(compose_cfg(*overrides), overrides, {"model": "resnet50"})
    prepared = resolve(exp, tmp_path / "run")
    plan = prepared.plan
    assert (plan.world_size, plan.hosts) == (8, (("a", 4), ("b", 4)))
    assert prepared.resumed is None and prepared.run_dir == tmp_path / "run"
    assert prepared.inputs.launcher.name == plan.launcher == "horovodrun"
    assert isinstance(prepared.tracker, MlflowTracker) and prepared.tracker.run_id is None
    assert str(tmp_path / "run") in " ".join(plan.launch_command)
    assert not (tmp_path / "run").exists()  # nothing written before the directory is locked


def test_resolve_refuses_a_run_to_continue_that_is_not_there(compose_cfg, tmp_path):
    overrides = ("model=cnn", f"output_root={tmp_path}", f"resume={tmp_path / 'gone'}")
    exp = Experiment(compose_cfg(*overrides), overrides)
    with pytest.raises(PlanError, match="neither a run directory nor a run id"):
        resolve(exp, tmp_path / "run")
    assert not (tmp_path / "mlflow.db").exists()  # looking a run up creates no store


@pytest.mark.parametrize(
    ("result", "interrupted", "signalled", "preempted", "status"),
    [
        (LaunchResult(0, False), False, False, False, RunStatus.FINISHED),
        (LaunchResult(0, False), False, True, False, RunStatus.FINISHED),  # after the last step
        (LaunchResult(0, False, stalled="rank 1 silent"), False, False, False, RunStatus.FAILED),
        (LaunchResult(1, False), False, False, False, RunStatus.FAILED),
        (LaunchResult(1, False), False, True, False, RunStatus.KILLED),  # a stop signal
        (LaunchResult(0, False), False, True, True, RunStatus.KILLED),  # checkpointed on it
        (LaunchResult(130, True), False, False, False, RunStatus.KILLED),  # Ctrl-C on the job
        (None, True, False, False, RunStatus.KILLED),  # Ctrl-C before the ranks started
        (None, False, True, False, RunStatus.FAILED),  # the launcher refused them
    ],
)
def test_the_supervisor_alone_decides_the_status(result, interrupted, signalled, preempted, status):
    assert ended_status(result, interrupted, signalled, preempted) is status


def test_a_tracker_is_made_from_the_same_typed_settings_by_a_run_and_a_sweep(tmp_path):
    section = {"uri": f"sqlite:///{tmp_path / 'x.db'}", "experiment_name": "e", "team": "v"}
    from_sweep = TrackerSettings.of_section(section, tmp_path)
    assert from_sweep.tracking == TrackingConfig(uri=section["uri"], experiment_name="e")
    assert from_sweep.options == {"team": "v"} and from_sweep.output_root == Path(tmp_path)
    tracker = tracker_for(from_sweep)
    assert (tracker.store, tracker.experiment_name) == (section["uri"], "e")
    with pytest.raises(PlanError, match="tracking._target_=no.such.Tracker: no such class"):
        tracker_for(TrackerSettings(TrackingConfig(_target_="no.such.Tracker"), tmp_path))
