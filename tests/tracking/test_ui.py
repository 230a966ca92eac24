"""The MLflow UI over a tntrun store, in a real browser (Debian's Chromium).

One run carries everything the pages show: it trains on the two network-namespace hosts
(one rank each: a system-metrics section per host), logs its model and registers it
with an alias; every page is read from that run's store, served by ``tntrun ui``.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import free_port, start_in_session, tntrun_cli
from tests.helpers.components import require_module, require_path
from tests.helpers.netns import NetnsHosts
from tests.helpers.paths import BIN, ROOT
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = ROOT / "outputs" / "test-screenshots"
A_LINE = re.compile(r"^M[-\d.]+,[-\d.]+L[-\d.]+,[-\d.]+")  # an SVG path through 2+ points
VIEW = "workflowType=machine_learning"  # MLflow 3.17: the model-training view
RUN_NAME = "mlp-digits-2x32"  # model, dataset, ranks x micro-batch; its logged model's too
REGISTERED, ALIAS = "digits-mlp", "candidate"
CPU = "cpu_utilization_percentage"
CHART_CARD = "experiment-view-compare-runs-card"  # a chart, in the chart view and run page


def start_ui(work: Path) -> tuple[subprocess.Popen, str]:
    """``tntrun ui`` over ``work``'s store on a free port, in a session of its own; its URL."""
    port = free_port()
    server = start_in_session(
        [str(BIN / "tntrun"), "ui", "--tracking-uri", store_uri(work), "--port", str(port)],
        work,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return server, f"http://127.0.0.1:{port}"


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


def assert_each_host_sampled_the_whole_run(
    client: MlflowClient, run_id: str, hosts: NetnsHosts
) -> None:
    """Two samples at least per host: one a second after its rank starts, one at its end."""
    run = client.get_run(run_id)
    nodes = {key.split("/")[1] for key in run.data.metrics if key.startswith("system/")}
    assert nodes == set(hosts.addresses), sorted(run.data.metrics)
    last_accuracy = client.get_metric_history(run_id, "val_accuracy")[-1].timestamp
    for node in hosts.addresses:
        cpu = client.get_metric_history(run_id, f"system/{node}/{CPU}")
        assert [m.step for m in cpu] == list(range(len(cpu))) and len(cpu) >= 2
        assert cpu[0].timestamp - run.info.start_time < 10_000  # at the start, not after 10 s
        assert cpu[-1].timestamp >= last_accuracy


def logged_and_registered(client: MlflowClient, run_id: str) -> Any:
    """The run's one logged model (named as the run), registered as version 1 of
    REGISTERED at ALIAS and naming that version (the Models tab's column reads it)."""
    experiment_id = client.get_run(run_id).info.experiment_id
    (model,) = client.search_logged_models(
        [experiment_id], filter_string=f"source_run_id = '{run_id}'"
    )
    assert model.name == RUN_NAME
    version = client.get_model_version_by_alias(REGISTERED, ALIAS)
    assert str(version.version) == "1" and version.run_id == run_id
    named = json.loads(model.tags["mlflow.modelVersions"])
    assert [(v["name"], str(v["version"])) for v in named] == [(REGISTERED, "1")]
    return model


@dataclass(frozen=True)
class Browsed:
    """A browser tab on the served store, and the run its pages show."""

    page: Any  # playwright's Page
    expect: Callable[..., Any]  # playwright's expect
    url: str
    experiment_id: str
    run_id: str

    def open(self, route: str) -> None:
        self.page.goto(f"{self.url}/#/{route}")

    def screenshot(self, name: str, full_page: bool = False) -> None:
        self.page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=full_page)


def grid_cell(ui: Browsed, column: str):
    """ag-grid's cells of a column, by its id."""
    return ui.page.locator(f'[role="gridcell"][col-id="{column}"]')


def check_runs_table(ui: Browsed, dataset_digest: str) -> None:
    """One run, one row: its name, dataset, source and model, the registered version it
    became."""
    ui.open(f"experiments/{ui.experiment_id}/runs?{VIEW}")

    def cell(column: str):
        return grid_cell(ui, f"attributes.`{column}`")

    ui.expect(cell("Run Name")).to_contain_text(RUN_NAME, timeout=60_000)
    ui.expect(cell("Dataset")).to_contain_text(f"digits ({dataset_digest})")
    ui.expect(cell("Source")).to_contain_text("tntrun")
    ui.expect(cell("Models")).to_contain_text(REGISTERED, timeout=30_000)
    version_page = f"#/models/{REGISTERED}/versions/1"
    ui.expect(cell("Models").get_by_role("link")).to_have_attribute("href", version_page)
    close = ui.page.get_by_role("button", name="Close")  # the MLflow Assistant, open at first
    if close.count():
        close.first.click()
    ui.screenshot("runs_table")


def check_charts(ui: Browsed, first_host: str) -> None:
    """The chart view: val_accuracy over its 2 epochs; a host's CPU from start to end."""
    ui.open(f"experiments/{ui.experiment_id}/runs?{VIEW}&compareRunsMode=CHART")
    for search, title in (("val_accuracy", "val_accuracy"), (CPU, f"system/{first_host}/{CPU}")):
        ui.page.get_by_placeholder("Search metric charts").fill(search)
        card = ui.page.get_by_test_id(CHART_CARD).filter(has_text=title)
        line = card.locator(".js-plotly-plot path.js-line").first  # plotly's trace
        ui.expect(line).to_have_attribute("d", A_LINE, timeout=60_000)
        if search == "val_accuracy":
            ui.screenshot("run_charts")


def check_logged_models(ui: Browsed, model: Any, dataset_digest: str) -> None:
    """The experiment's Models tab: the run's model, ready, its registered version, its
    dataset and its val_accuracy."""
    ui.open(f"experiments/{ui.experiment_id}/models?{VIEW}")
    name = grid_cell(ui, "name").get_by_role("link")
    ui.expect(name).to_have_text(RUN_NAME, timeout=60_000)
    model_page = f"#/experiments/{ui.experiment_id}/models/{model.model_id}"
    ui.expect(name).to_have_attribute("href", model_page)
    ui.expect(grid_cell(ui, "status")).to_have_text("Ready")
    ui.expect(grid_cell(ui, "registered_models")).to_contain_text(REGISTERED, timeout=30_000)
    ui.expect(grid_cell(ui, "dataset")).to_contain_text(f"digits (#{dataset_digest})")
    (accuracy,) = [metric.value for metric in model.metrics if metric.key == "val_accuracy"]
    shown = repr(accuracy).removesuffix(".0")  # as JavaScript prints the number
    ui.expect(ui.page.get_by_role("gridcell", name=shown, exact=True)).to_be_visible()
    ui.screenshot("models_view")


def check_registry(ui: Browsed) -> None:
    """The registered models page, then the model's: version 1 at its alias, from the run."""
    ui.open("models")
    listed = ui.page.get_by_role("row").filter(has_text=REGISTERED)
    ui.expect(listed).to_contain_text("Version 1", timeout=60_000)
    ui.expect(listed).to_contain_text(ALIAS)
    ui.page.keyboard.press("Escape")  # the new registry UI's announcement, over the list
    ui.screenshot("registered_models")
    ui.open(f"models/{REGISTERED}")
    version = ui.page.get_by_role("row").filter(has_text="Version 1")
    ui.expect(version).to_contain_text(ALIAS, timeout=60_000)
    ui.expect(version).to_contain_text(ui.run_id)  # its tntrun.run_id tag
    ui.screenshot("registered_model")


def check_run_page(ui: Browsed, accuracy: str) -> None:
    """The run's page, at the link tntrun printed."""
    ui.open(f"experiments/{ui.experiment_id}/runs/{ui.run_id}?{VIEW}")
    ui.page.get_by_text("val_accuracy").first.wait_for(timeout=60_000)
    ui.page.get_by_text(accuracy).first.wait_for(timeout=30_000)
    ui.screenshot("run_page", full_page=True)


def check_system_metrics(ui: Browsed, hosts: NetnsHosts) -> None:
    """The run page's System metrics tab: a section per host, each with its CPU line."""
    ui.open(f"experiments/{ui.experiment_id}/runs/{ui.run_id}/system-metrics?{VIEW}")
    sections = ui.page.get_by_test_id("experiment-view-compare-runs-section-header")
    for node in hosts.addresses:
        ui.expect(sections.filter(has_text=f"system/{node}")).to_have_count(1, timeout=60_000)
    ui.page.get_by_placeholder("Search metric charts").fill(CPU)
    for node in hosts.addresses:
        card = ui.page.get_by_test_id(CHART_CARD).filter(has_text=f"system/{node}/{CPU}")
        ui.expect(card.locator(".js-plotly-plot path.js-line").first).to_have_attribute("d", A_LINE)
    ui.screenshot("system_metrics", full_page=True)


def test_the_ui_shows_the_run_its_model_its_registered_version_and_each_host(netns_hosts, tmp_path):
    require_path(Path(CHROMIUM), "Debian's chromium", "apt-get install chromium")
    sync_api = require_module("playwright.sync_api")
    clock = time.monotonic()
    timings: dict[str, float] = {}

    def lap(name: str) -> None:
        nonlocal clock
        timings[name], clock = round(time.monotonic() - clock, 1), time.monotonic()

    result = tntrun_cli(
        tmp_path,
        *netns_hosts.one_rank_per_host(),
        "train.epochs=2",  # system metrics every 10 s: a shorter run
        f"tracking.register_model={REGISTERED}",
        f"tracking.register_alias={ALIAS}",
    )
    assert_succeeded(result)
    lap("run")
    run_id = (run_dir_of(result) / "run_id").read_text()
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run(run_id)
    experiment_id = run.info.experiment_id
    assert client.get_experiment(experiment_id).tags["mlflow.experimentKind"] == (
        "custom_model_development"
    )
    assert run.info.run_name == RUN_NAME
    (dataset,) = [used.dataset for used in run.inputs.dataset_inputs]
    assert (dataset.name, dataset.source_type) == ("digits", "code")
    assert json.loads(dataset.profile)["num_train"] == 1438
    tags = run.data.tags
    assert Path(tags["mlflow.source.name"]).name == "tntrun" and tags["mlflow.user"]
    assert tags["mlflow.source.type"] == "LOCAL" and tags["command"].startswith("tntrun ")
    assert_each_host_sampled_the_whole_run(client, run_id, netns_hosts)
    model = logged_and_registered(client, run_id)
    accuracy = f"{run.data.metrics['val_accuracy']:.4g}"[:4]
    assert f"#/experiments/{experiment_id}/runs/{run_id}?{VIEW}" in result.stdout

    server, url = start_ui(tmp_path)
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
            ui = Browsed(page, sync_api.expect, url, experiment_id, run_id)
            check_runs_table(ui, dataset.digest)
            lap("runs table")
            check_charts(ui, netns_hosts.addresses[0])
            lap("charts")
            check_logged_models(ui, model, dataset.digest)
            lap("models tab")
            check_registry(ui)
            lap("registry")
            check_run_page(ui, accuracy)
            lap("run page")
            check_system_metrics(ui, netns_hosts)
            lap("system metrics")
            browser.close()
    finally:
        subprocess.run(["pkill", "-TERM", "-g", str(server.pid)], check=False)
        server.wait(timeout=30)
    print(f"timings (s): {timings}")
    assert (SCREENSHOTS / "run_page.png").stat().st_size > 10_000


def session_processes(leader: int) -> list[str]:
    """The command lines of the processes in ``leader``'s session."""
    ps = ["ps", "-o", "args=", "-s", str(leader)]
    listed = subprocess.run(ps, capture_output=True, text=True)
    return [line for line in listed.stdout.splitlines() if line.strip()]


def test_a_stopped_ui_leaves_no_process_behind(tmp_path):
    """``tntrun ui`` as a user starts and stops it (SIGINT to it alone, the harsher case than
    Ctrl-C to the terminal's group): MLflow 3's job runner (huey consumers), which training
    runs never use, is not started, and nothing of the session is left once it exits."""
    server, url = start_ui(tmp_path)
    try:
        wait_healthy(url, server)
        running = session_processes(server.pid)
        assert running and not [p for p in running if "huey" in p], running
        server.send_signal(signal.SIGINT)
        server.wait(timeout=30)
        left = session_processes(server.pid)
        for _ in range(10):  # uvicorn's worker ends with its parent, within a second
            if not left:
                break
            time.sleep(0.5)
            left = session_processes(server.pid)
        assert not left, left
    finally:
        subprocess.run(["pkill", "-KILL", "-s", str(server.pid)], check=False)
