"""RunStatus keeps every status the very string it was: what MLflow stores, the console
prints and ``tracking_pending.json`` holds; results built from a string carry the member."""

from __future__ import annotations

import json

import pytest

from tntrun.contract.run_status import RunStatus
from tntrun.experiment import RunResult, config_error
from tntrun.launch.supervisor import Outcome
from tntrun.tracking.outage import Pending


@pytest.mark.parametrize("status", list(RunStatus))
def test_a_status_reads_and_writes_as_its_string(status):
    text = status.name
    assert (
        status == text and str(status) == text and f"tntrun: run {status}" == f"tntrun: run {text}"
    )
    assert json.dumps({"status": status}) == json.dumps({"status": text})
    assert RunStatus(text) is status


def test_results_given_a_string_carry_the_member(tmp_path):
    assert RunResult("FINISHED", 0, None).status is RunStatus.FINISHED
    assert Outcome("KILLED").status is RunStatus.KILLED
    assert config_error(["bad"]).status is RunStatus.INVALID
    Pending("sqlite:///x.db", RunStatus.FAILED).save(tmp_path)
    assert Pending.load(tmp_path).status is RunStatus.FAILED
    with pytest.raises(ValueError):
        RunResult("DONE", 0, None)  # not a status: refused where it is made
