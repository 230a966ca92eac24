"""A seam's variant or a sweep's objective that is missing is said by name, never skipped:
a cluster environment without ``detect()`` would never be chosen, and a misspelt
``tracking.objective`` would hand the sweeper NaN for every job."""

from __future__ import annotations

import math
from collections.abc import Mapping

import pytest

from tntrun import cli, environments
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR
from tntrun.contract.run_status import RunStatus
from tntrun.environments import ClusterEnvironment
from tntrun.experiment import MissingObjective, RunResult


class WithoutDetect(ClusterEnvironment):
    name = "without_detect"


class Detected(ClusterEnvironment):
    name = "detected"

    @classmethod
    def detect(cls, environ: Mapping[str, str]) -> bool:
        return "DETECTED" in environ


HERE = __name__


def test_an_environment_without_detect_is_refused_by_name(monkeypatch):
    with pytest.raises(TypeError, match=r"WithoutDetect' \(WithoutDetect\) lacks detect"):
        environments.environment_named(f"{HERE}.WithoutDetect", {})
    registered = {"without_detect": f"{HERE}.WithoutDetect", **environments.ENVIRONMENTS}
    monkeypatch.setattr(environments, "ENVIRONMENTS", registered)
    with pytest.raises(TypeError, match="'without_detect' .* lacks detect"):
        environments.detect({})  # before: silently never chosen


def test_an_environment_with_detect_is_chosen_when_it_detects_itself(monkeypatch):
    registered = {"detected": f"{HERE}.Detected", **environments.ENVIRONMENTS}
    monkeypatch.setattr(environments, "ENVIRONMENTS", registered)
    assert type(environments.detect({"DETECTED": "1"})) is Detected
    assert type(environments.detect({})).__name__ == "LocalEnvironment"


def test_a_finished_run_without_the_objective_metric_says_so():
    finished = RunResult(RunStatus.FINISHED, 0, None, metrics={"loss": 0.5, "val_accuracy": 0.9})
    assert finished.objective("val_accuracy") == 0.9
    with pytest.raises(MissingObjective) as missing:
        finished.objective("val_acc")
    assert str(missing.value) == (
        "tracking.objective=val_acc: the run logged no such metric; set it to one it logs "
        "(loss, val_accuracy)"
    )
    failed = RunResult(RunStatus.FAILED, 1, None)
    assert math.isnan(failed.objective("val_acc"))  # a failed trial, as the sweeper expects


def test_a_sweep_job_without_its_objective_fails_the_sweep_in_one_line(monkeypatch, capsys):
    failed_jobs: list[int] = []
    monkeypatch.setattr(cli, "_failed_jobs", failed_jobs)
    finished = RunResult(RunStatus.FINISHED, 0, None, metrics={"loss": 0.5})
    assert math.isnan(cli._objective(finished, "val_acc"))
    assert failed_jobs == [EXIT_CONFIG_ERROR]
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "tracking.objective=val_acc: the run logged no such metric" in line
