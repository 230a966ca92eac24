"""The MLflow UI over a tntrun store, in a real browser (Debian's Chromium)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import BIN, clean_env, run_dir_of, store_uri, tntrun_cli

pytestmark = pytest.mark.slow
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SCREENSHOTS = Path(__file__).resolve().parents[1] / "outputs" / "test-screenshots"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.mark.skipif(
    not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed (make test installs it)"
)
def test_finished_run_and_its_metric_are_visible_in_the_mlflow_ui(tmp_path):
    sync_api = pytest.importorskip("playwright.sync_api")
    result = tntrun_cli(tmp_path, "train.epochs=2", "tracking.run_name=ui-check",
                        "tracking.system_metrics=false")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:]
    run_id = (run_dir_of(result) / "mlflow_run_id").read_text()
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run(run_id)
    accuracy = f"{run.data.metrics['val_accuracy']:.4g}"[:4]

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [str(BIN / "tntrun"), "ui", "--tracking-uri", store_uri(tmp_path), "--port", str(port)],
        env=clean_env(), cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        wait_healthy(url, server)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        with sync_api.sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=CHROMIUM,
                args=["--no-sandbox", "--headless", "--disable-gpu",
                      "--disable-background-networking", "--disable-component-update",
                      "--no-first-run", "--disable-sync", "--disable-quic"],
            )  # fmt: skip
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto(f"{url}/#/experiments/{run.info.experiment_id}/runs")
            page.get_by_text("ui-check").first.wait_for(timeout=60_000)
            page.screenshot(path=str(SCREENSHOTS / "runs_table.png"))
            page.goto(f"{url}/#/experiments/{run.info.experiment_id}/runs/{run_id}")
            page.get_by_text("val_accuracy").first.wait_for(timeout=60_000)
            page.get_by_text(accuracy).first.wait_for(timeout=30_000)
            page.screenshot(path=str(SCREENSHOTS / "run_page.png"), full_page=True)
            browser.close()
    finally:
        subprocess.run(["pkill", "-TERM", "-g", str(server.pid)], check=False)
        server.wait(timeout=30)
    assert (SCREENSHOTS / "run_page.png").stat().st_size > 10_000
