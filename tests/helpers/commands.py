"""The processes tests start: the installed ``tntrun`` command and ``horovodrun`` ranks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.paths import BIN
from tntrun.launch.horovodrun import HOROVODRUN_COMMAND


def free_port() -> int:
    """A TCP port nothing listens on now, on localhost."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env() -> dict[str, str]:
    """This environment without MLflow/Horovod settings that would leak into a run."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HOROVOD_"))}


def tntrun_command(workdir: Path, *args: str) -> list[str]:
    return [str(BIN / "tntrun"), *args, f"output_root={workdir / 'outputs'}"]


def start_tntrun(workdir: Path, *args: str, **popen: Any) -> subprocess.Popen:
    """The installed ``tntrun`` started in its own session, its output (stderr merged) read
    line by line by the caller."""
    return subprocess.Popen(
        tntrun_command(workdir, *args),
        cwd=workdir,
        env=clean_env(),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        **popen,
    )


def tntrun_cli(workdir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed ``tntrun`` console script with outputs under ``workdir``."""
    return subprocess.run(
        tntrun_command(workdir, *args),
        cwd=workdir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def concurrent_drivers(
    workdir: Path, *args: str, count: int = 4, timeout: float = 900
) -> list[str]:
    """Start ``count`` tntrun drivers at once (``seed=0..count-1`` besides ``args``), wait for
    all and fail unless each exits 0; their combined outputs, in seed order."""
    drivers = [
        subprocess.Popen(
            tntrun_command(workdir, *args, f"seed={seed}"),
            cwd=workdir,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for seed in range(count)
    ]
    outputs = [driver.communicate(timeout=timeout)[0] for driver in drivers]
    for driver, output in zip(drivers, outputs, strict=True):
        assert driver.returncode == 0, output[-3000:]
    return outputs


def modules_imported(code: str, candidates: str) -> list[str]:
    """Run ``code`` in a fresh interpreter: which of ``candidates`` (a Python expression
    evaluated there after ``code``, so it may name what ``code`` imported) are in its
    ``sys.modules``."""
    report = f"import json, sys; print(json.dumps([m for m in {candidates} if m in sys.modules]))"
    result = subprocess.run(
        [sys.executable, "-c", f"{code}\n{report}"],
        env=clean_env(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return json.loads(result.stdout.splitlines()[-1])


def run_on_two_ranks(script: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``horovodrun -np 2`` of a rank script (tests/rank_scripts) on CPU ranks over loopback,
    through tntrun's horovodrun command (tntrun/launch/horovodrun_command.py)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            HOROVODRUN_COMMAND,
            "--gloo",
            "-np",
            "2",
            "-H",
            "localhost:2",
            sys.executable,
            str(script),
        ],
        env={**clean_env(), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def rank_summaries(script: Path, timeout: float = 600) -> list[dict]:
    """Each rank's ``RESULT {json}`` line of a 2-rank launch of ``script``, by rank; fails
    the calling test when the launch fails or a rank printed none."""
    result = run_on_two_ranks(script, timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    summaries = [
        json.loads(line.split("RESULT ", 1)[1])
        for line in result.stdout.splitlines()
        if "RESULT {" in line
    ]
    assert sorted(s["rank"] for s in summaries) == [0, 1], result.stdout[-3000:]
    assert all(s["keras"].startswith("3.") and s["size"] == 2 for s in summaries)
    return sorted(summaries, key=lambda s: s["rank"])
