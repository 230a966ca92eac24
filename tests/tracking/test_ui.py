"""The MLflow UI over a tntrun store, in a real browser (Debian's Chromium)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.commands import clean_env, free_port, tntrun_cli
from tests.helpers.components import require_module, require_path
from tests.helpers.paths import BIN, ROOT
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "outputs" / "test-screenshots"
A_LINE = re.compile(r"^M[-\d.]+,[-\d.]+L[-\d.]+,[-\d.]+")  # an SVG path through 2+ points


def wait_healthy(url: str, server: subprocess.Popen, seconds: float = 90) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"mlflow server exited: {server.stdout.read()[-2000:]}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                if response.read().strip() == b"OK":
                    return
        except OSError:
            time.sleep(0.5)
    raise AssertionError(f"mlflow server at {url} not healthy within {seconds} s")


def test_the_runs_table_shows_name_dataset_and_a_metric_chart(tmp_path):
    require_path(Path(CHROMIUM), "Debian's chromium", "apt-get install chromium")
    sync_api = require_module("playwright.sync_api")
    clock = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        timings[name], clock = round(time.monotonic() - clock, 1), time.monotonic()

    result = tntrun_cli(tmp_path, "train.epochs=2")  # system metrics every 10 s: a shorter run
    assert result.returncode == 0, result.stdout[-3000:]
    lap("run")
    run_id = (run_dir_of(result) / "run_id").read_text()
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run(run_id)
    experiment_id = run.info.experiment_id
    assert client.get_experiment(experiment_id).tags["mlflow.experimentKind"] == (
        "custom_model_development"
    )
    assert run.info.run_name == "mlp-digits-2x32"  # model, dataset, ranks x micro-batch
    (dataset,) = [used.dataset for used in run.inputs.dataset_inputs]
    assert (dataset.name, dataset.source_type) == ("digits", "code")
    assert json.loads(dataset.profile)["num_train"] == 1438
    tags = run.data.tags
    assert Path(tags["mlflow.source.name"]).name == "tntrun" and tags["mlflow.user"]
    assert tags["mlflow.source.type"] == "LOCAL" and tags["command"].startswith("tntrun ")
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert [m.step for m in cpu] == list(range(len(cpu))) and len(cpu) >= 2
    assert cpu[0].timestamp - run.info.start_time < 10_000  # at the start, not after 10 s
    assert cpu[-1].timestamp >= client.get_metric_history(run_id, "val_accuracy")[-1].timestamp
    accuracy = f"{run.data.metrics['val_accuracy']:.4g}"[:4]
    view = "workflowType=machine_learning"  # MLflow 3.17: the model-training view
    assert f"#/experiments/{experiment_id}/runs/{run_id}?{view}" in result.stdout

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(BIN / "tntrun"), "ui", "--tracking-uri", store_uri(tmp_path), "--port", str(port)],
        env=clean_env(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        wait_healthy(url, server)
        lap("server")
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=[
                    "--no-sandbox",
                    "--headless",
                    "--disable-gpu",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--no-first-run",
                    "--disable-sync",
                    "--disable-quic",
                ],
            )
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            expect = sync_api.expect

            # The runs table (one run: one row; ag-grid cells by column id).
            page.goto(f"{url}/#/experiments/{experiment_id}/runs?{view}")

            def cell(column: str):
                return page.locator(f'[role="gridcell"][col-id="attributes.`{column}`"]')

            expect(cell("Run Name")).to_contain_text("mlp-digits-2x32", timeout=60_000)
            expect(cell("Dataset")).to_contain_text(f"digits ({dataset.digest})")
            expect(cell("Source")).to_contain_text("tntrun")
            page.screenshot(path=str(SCREENSHOTS / "runs_table.png"))
            lap("runs table")

            # The chart view: the run's val_accuracy line over its 2 epochs.
            page.goto(f"{url}/#/experiments/{experiment_id}/runs?{view}&compareRunsMode=CHART")
            page.get_by_placeholder("Search metric charts").fill("val_accuracy")
            card = page.get_by_test_id("experiment-view-compare-runs-card").filter(
                has_text="val_accuracy"
            )
            line = card.locator(".js-plotly-plot path.js-line").first  # plotly's trace
            expect(line).to_have_attribute("d", A_LINE, timeout=60_000)
            page.screenshot(path=str(SCREENSHOTS / "run_charts.png"))
            page.get_by_placeholder("Search metric charts").fill("cpu_utilization")
            card = page.get_by_test_id("experiment-view-compare-runs-card").filter(
                has_text="system/cpu_utilization_percentage"
            )  # its start and end samples
            line = card.locator(".js-plotly-plot path.js-line").first
            expect(line).to_have_attribute("d", A_LINE)
            lap("charts")

            # The run's page, at the link tntrun printed.
            page.goto(f"{url}/#/experiments/{experiment_id}/runs/{run_id}?{view}")
            page.get_by_text("val_accuracy").first.wait_for(timeout=60_000)
            page.get_by_text(accuracy).first.wait_for(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "run_page.png"), full_page=True)
            lap("run page")
            browser.close()
    finally:
        subprocess.run(["pkill", "-TERM", "-g", str(server.pid)], check=False)
        server.wait(timeout=30)
    print(f"timings (s): {timings}")
    assert (SCREENSHOTS / "run_page.png").stat().st_size > 10_000
