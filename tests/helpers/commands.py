"""The processes tests start: the installed ``tntrun`` command and ``horovodrun`` ranks;
what runs beside the test, each in a session of its own (:func:`in_session`)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from tests.helpers.asserts import assert_succeeded
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


# For a run whose test does not read the model it logs as an MLflow Model: rank 0 saves that
# model and loads it back to check it (about 1.7 CPU-s of a finished 2-rank digits run, 12 s
# of ResNet-50's); model.keras, the final weights and the checkpoints are written either way.
NO_LOGGED_MODEL = "tracking.log_model=false"


def tntrun_command(workdir: Path, *args: str) -> list[str]:
    return [str(BIN / "tntrun"), *args, f"output_root={workdir / 'outputs'}"]


def tntrun_sync(workdir: Path, run_dir: Path, *args: str) -> subprocess.CompletedProcess:
    """``tntrun sync`` of ``run_dir`` (what a run left to deliver after a store's outage)."""
    return subprocess.run(
        [str(BIN / "tntrun"), "sync", str(run_dir), *args],
        cwd=workdir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def start_in_session(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, **popen: Any
) -> subprocess.Popen:
    """``command`` started in a session of its own (``env``: :func:`clean_env` unless given):
    a signal the test sends reaches it alone, and :func:`stop_session` finds all it started."""
    return subprocess.Popen(
        command, cwd=cwd, env=clean_env() if env is None else env, start_new_session=True, **popen
    )


def stop_session(process: subprocess.Popen, timeout: float = 30) -> None:
    """SIGKILL what is left of ``process``'s session while ``process`` is not yet reaped
    (after that its pid, the group's id, may name someone else's group), and reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    process.wait(timeout=timeout)


@contextlib.contextmanager
def in_session(
    command: list[str], cwd: Path, env: dict[str, str] | None = None, **popen: Any
) -> Iterator[subprocess.Popen]:
    """:func:`start_in_session`, and :func:`stop_session` on leaving, after a failure too."""
    process = start_in_session(command, cwd, env, **popen)
    try:
        yield process
    finally:
        stop_session(process)


def start_tntrun(workdir: Path, *args: str, **popen: Any) -> subprocess.Popen:
    """The installed ``tntrun`` started in its own session, its output (stderr merged) read
    line by line by the caller."""
    return start_in_session(
        tntrun_command(workdir, *args),
        workdir,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
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
    with contextlib.ExitStack() as started:
        drivers = [
            started.enter_context(
                in_session(
                    tntrun_command(workdir, *args, f"seed={seed}"),
                    workdir,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
            for seed in range(count)
        ]
        outputs = [driver.communicate(timeout=timeout)[0] for driver in drivers]
    for driver, output in zip(drivers, outputs, strict=True):
        assert_succeeded(subprocess.CompletedProcess(driver.args, driver.returncode, output))
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
    assert_succeeded(result)
    return json.loads(result.stdout.splitlines()[-1])


def run_on_two_ranks(
    script: Path, timeout: float = 300, ranks: int = 2, args: Sequence[str] = ()
) -> subprocess.CompletedProcess:
    """``horovodrun -np 2`` (or ``ranks``) of a rank script (tests/rank_scripts) with
    ``args`` on CPU ranks over loopback, through tntrun's horovodrun command
    (tntrun/launch/horovodrun_command.py)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            HOROVODRUN_COMMAND,
            "--gloo",
            "-np",
            str(ranks),
            "-H",
            f"localhost:{ranks}",
            sys.executable,
            str(script),
            *args,
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
    assert_succeeded(result)
    summaries = [
        json.loads(line.split("RESULT ", 1)[1])
        for line in result.stdout.splitlines()
        if "RESULT {" in line
    ]
    assert sorted(s["rank"] for s in summaries) == [0, 1], result.stdout[-3000:]
    assert all(s["keras"].startswith("3.") and s["size"] == 2 for s in summaries)
    return sorted(summaries, key=lambda s: s["rank"])
