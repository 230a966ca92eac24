"""Sweeps as nested MLflow runs, the scaling report, and concurrent drivers on one store."""

from __future__ import annotations

import csv
import subprocess

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import NO_LOGGED_MODEL, clean_env, concurrent_drivers, tntrun_cli
from tests.helpers.components import require_module
from tests.helpers.paths import BIN
from tests.helpers.runs import store_uri

pytestmark = pytest.mark.slow


def test_sweep_makes_a_parent_run_with_children_and_a_scaling_report(tmp_path):
    result = tntrun_cli(
        tmp_path,
        "-m",
        "ranks_per_node=1,2",
        "train.epochs=2",
        "tracking.system_metrics=false",
        NO_LOGGED_MODEL,
    )
    assert_succeeded(result)
    client = MlflowClient(store_uri(tmp_path))
    experiment = client.get_experiment_by_name("tntrun")
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("tntrun.tracking.sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert parent.info.status == "FINISHED" and len(children) == 2
    assert sorted(c.data.params["plan.world_size"] for c in children) == ["1", "2"]
    assert all(c.info.status == "FINISHED" for c in children)
    names = sorted(c.info.run_name for c in children)  # model-dataset-ranks x micro-batch-job
    assert names == ["mlp-digits-1x64-job0", "mlp-digits-2x32-job1"]

    report_dir = next((tmp_path / "outputs" / "multirun").glob("*/*/report"))
    rows = list(csv.DictReader((report_dir / "report.csv").open()))
    assert [r["world_size"] for r in rows] == ["1", "2"]
    assert float(rows[0]["scaling_efficiency"]) == pytest.approx(1.0)
    assert 0.0 < float(rows[1]["scaling_efficiency"]) < 1.5
    for plot in ("steady_samples_per_s.png", "steady_step_time_ms.png", "scaling_efficiency.png"):
        assert (report_dir / plot).read_bytes()[:4] == b"\x89PNG"
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.csv", "report/report.md", "report/scaling_efficiency.png"} <= logged

    again = subprocess.run(
        [
            str(BIN / "tntrun"),
            "report",
            str(report_dir.parent),
            "--tracking-uri",
            store_uri(tmp_path),
            "--out",
            str(tmp_path / "again"),
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        cwd=tmp_path,
    )
    assert_succeeded(again)
    assert "| world_size |" in again.stdout and "scaling_efficiency" in again.stdout
    assert (tmp_path / "again" / "report.md").exists()


def test_a_sweep_over_seeds_reports_their_mean_and_spread(tmp_path):
    result = tntrun_cli(
        tmp_path,
        "-m",
        "seed=1,2",
        "ranks_per_node=1",  # the report's claim; one rank a job spares a TensorFlow start
        "train.epochs=1",
        "tracking.system_metrics=false",
        NO_LOGGED_MODEL,
    )
    assert_succeeded(result)
    client = MlflowClient(store_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("tntrun.tracking.sweep") == "parent"]
    accuracies = [r.data.metrics["val_accuracy"] for r in runs if r is not parent]
    mean = sum(accuracies) / 2
    line = f"all jobs: val_accuracy {mean:.4f} ± {abs(accuracies[0] - mean) * 2**0.5:.4f} over 2"
    assert parent.data.tags["repeats.1"].startswith(line)
    assert f"tntrun: {line} seeds (" in result.stdout
    report_dir = next((tmp_path / "outputs" / "multirun").glob("*/*/report"))
    assert "| all jobs | " in (report_dir / "seeds.md").read_text()
    assert "## Repeats over seeds" in (report_dir / "report.md").read_text()


def test_four_concurrent_drivers_share_one_store(tmp_path):
    outputs = concurrent_drivers(
        tmp_path,
        "ranks_per_node=1",
        "train.epochs=2",
        "tracking.system_metrics=false",
        "checkpoint.every_epochs=0",
        timeout=600,  # each logs its model too: the store's writes of a whole run, at once
    )
    for output in outputs:
        assert "database is locked" not in output
    client = MlflowClient(store_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)
    for run in runs:
        for key in ("loss", "val_accuracy", "samples_per_s"):
            history = client.get_metric_history(run.info.run_id, key)
            assert [m.step for m in history] == [0, 1], (run.info.run_id, key)


def sweep_runs(tmp_path):
    client = MlflowClient(store_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("tntrun.tracking.sweep") == "parent"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    return parent, children


def test_optuna_sweeper_optimises_the_returned_objective(tmp_path):
    require_module("hydra_plugins.hydra_optuna_sweeper")
    result = tntrun_cli(
        tmp_path,
        "-m",
        "hydra/sweeper=optuna",
        "hydra.sweeper.n_trials=2",
        "hydra.sweeper.direction=maximize",
        "optimizer.base_lr=interval(0.001,0.01)",
        "ranks_per_node=1",
        "train.epochs=1",
        "tracking.system_metrics=false",
        "checkpoint.every_epochs=0",
        NO_LOGGED_MODEL,
    )
    assert_succeeded(result)
    (results,) = (tmp_path / "outputs" / "multirun").glob("*/*/optimization_results.yaml")
    best = yaml.safe_load(results.read_text())["best_value"]
    _, children = sweep_runs(tmp_path)
    assert len(children) == 2
    assert best == pytest.approx(max(c.data.metrics["val_accuracy"] for c in children))


def test_parallel_submitit_local_launcher_nests_its_jobs_and_a_failed_one_fails_the_sweep(
    tmp_path,
):
    """Submitit's jobs run in other processes: the sweep's exit code comes from the store."""
    require_module("hydra_plugins.hydra_submitit_launcher")
    result = tntrun_cli(
        tmp_path,
        "-m",
        "hydra/launcher=submitit_local",
        "model.hidden_units=[16],[-5]",
        "ranks_per_node=1",
        "train.epochs=1",
        "tracking.system_metrics=false",
        "checkpoint.every_epochs=0",
        NO_LOGGED_MODEL,
    )
    assert_exit(result, 1)
    assert "tntrun: 1 sweep job(s) did not finish" in result.stderr
    parent, children = sweep_runs(tmp_path)
    assert parent.info.status == "FAILED"
    statuses = {c.data.params["model.hidden_units"]: c.info.status for c in children}
    assert statuses == {"[16]": "FINISHED", "[-5]": "FAILED"}
