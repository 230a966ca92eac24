"""``predict_scaling=true`` on real ranks: profile, prediction table, files and metrics.

How accurate the prediction is, is measured by bench/scaling_prediction.py, not here.
"""

from __future__ import annotations

import csv
import json

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow


def test_a_profiled_run_predicts_1_to_1024_ranks(run_tntrun, tmp_path):
    result = run_tntrun(
        "predict_scaling=true",
        "train.epochs=2",
        "checkpoint.every_epochs=0",
        "tracking.system_metrics=false",
    )
    assert_succeeded(result)
    assert "Scaling prediction (ring allreduce, alpha-beta model)" in result.stdout

    out = run_dir_of(result) / "scaling_prediction"
    with (out / "prediction.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["world_size"]) for r in rows] == [2**k for k in range(11)]
    efficiency = [float(r["efficiency"]) for r in rows]
    assert efficiency[0] == 1.0 and all(
        a >= b for a, b in zip(efficiency, efficiency[1:], strict=False)
    )
    profile = json.loads((out / "profile.json").read_text())
    assert profile["profiled_world_size"] == 2 and profile["gradient_tensors"] == 6
    # The digits MLP: 64x128 + 128 + 128x64 + 64 + 64x10 + 10 float32 weights.
    assert profile["gradient_bytes"] == 4 * (64 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10)
    assert profile["compute_s"] > 0 and profile["link"]["latency_s"] >= 0
    assert len(profile["probes"]) >= 2 and profile["gradient_allreduce_s"] > 0
    assert profile["distributed_step_s"] > 0  # the interaction term's calibration
    assert (out / "prediction.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    client = MlflowClient(store_uri(tmp_path))
    run_id = (run_dir_of(result) / "run_id").read_text()
    metrics = client.get_run(run_id).data.metrics
    predicted_2 = metrics["steady_step_time_ms"] * (1 + metrics["prediction_error"])
    assert predicted_2 == pytest.approx(float(rows[1]["step_ms"]), rel=1e-3)
    assert metrics["profiled_step_time_ms"] == pytest.approx(profile["distributed_step_s"] * 1e3)
    assert metrics["interaction_ms"] == pytest.approx(profile["interaction_s"] * 1e3)
    history = client.get_metric_history(run_id, "predicted_efficiency")
    assert sorted(m.step for m in history) == [2**k for k in range(11)]
    artifacts = {a.path for a in client.list_artifacts(run_id, "scaling_prediction")}
    assert "scaling_prediction/prediction.md" in artifacts
