"""``dry_run=true`` shows everything and starts nothing."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.plans import line_points

pytestmark = pytest.mark.slow


def test_dry_run_prints_config_plan_and_command(run_tntrun, tmp_path):
    result = run_tntrun(
        "dry_run=true",
        "schedule=warmup_piecewise",
        "train.epochs=90",
        "optimizer=sgd",
        "global_batch_size=128",
    )
    assert_succeeded(result)
    out = result.stdout
    assert "== Config ==" in out and "global_batch_size: 128" in out
    assert "global batch                      128 = 2 x 64 (micro-batch)" in out
    assert "steps per epoch                   11" in out  # 1438 // 128
    assert "warmup steps                      55 (5 epochs) from LR 0.025" in out
    assert "decay steps                       330, 660, 880 (epochs 30, 60, 80; x0.1)" in out
    assert "rank 1, host localhost, local rank 1" in out
    assert "KERAS_BACKEND=tensorflow" in out
    assert "--gloo -np 2 -H localhost:2" in out and "-m tntrun.engine.worker" in out
    assert "nothing was launched" in out
    assert not (tmp_path / "outputs" / "mlflow.db").exists()

    (chart,) = (tmp_path / "outputs" / "runs").glob("*/*/lr_schedule.svg")
    root = ET.fromstring(chart.read_text())
    assert (root.get("width"), root.get("height")) == ("700", "350")
    assert len(line_points(chart.read_text())) == 990  # 90 epochs x 11 steps
