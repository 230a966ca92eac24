"""One run directory, one run: the driver's flock on ``run.lock`` (contract.run_lock).

flock belongs to an open file description, so two locks opened in one process exclude each
other as two drivers' do; one test holds it from another process and kills it, as a
driver dies."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from dataclasses import replace

import pytest

from tests.helpers.commands import start_in_session
from tntrun import api
from tntrun.contract.run_lock import Holder, RunDirBusy, RunDirLock, live_holder
from tntrun.errors import PlanError


def test_a_second_lock_on_a_held_directory_is_refused_in_one_line_naming_the_holder(tmp_path):
    with RunDirLock(tmp_path) as first:
        assert first.stale is None
        with pytest.raises(RunDirBusy) as refused:
            RunDirLock(tmp_path).acquire()
        line = str(refused.value)
        assert "\n" not in line
        who = f"pid {os.getpid()}@{socket.gethostname()}, since "
        assert f"{tmp_path} is in use by a running tntrun ({who}" in line
        assert "give this run another hydra.run.dir" in line
        assert live_holder(tmp_path) == Holder.parse((tmp_path / "run.lock").read_text())
    assert live_holder(tmp_path) is None
    assert (tmp_path / "run.lock").read_text() == ""  # a clean end names no holder
    with RunDirLock(tmp_path) as again:
        assert again.stale is None, "a lock released cleanly is no stale lock"


def test_a_lock_file_left_by_a_dead_driver_is_taken_over_with_its_holder_noted(tmp_path):
    (tmp_path / "run.lock").write_text("4242 gone-host 1764300000.5\n")  # nobody flocks it
    assert live_holder(tmp_path) is None, "a stale file blocks neither resume nor sync"
    with RunDirLock(tmp_path) as lock:
        assert lock.stale == Holder(4242, "gone-host", 1764300000.5)
        assert (tmp_path / "run.lock").read_text().split()[:2] == [
            str(os.getpid()),
            socket.gethostname(),
        ]


def test_a_run_into_a_held_directory_is_refused_before_writing_anything(in_tmp):
    exp = api.compose([f"output_root={in_tmp / 'outputs'}", "train.epochs=1"])
    run_dir = in_tmp / "the-run"
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text("seed: 42\n")  # the running run's
    with RunDirLock(run_dir), pytest.raises(PlanError) as refused:
        api.run(replace(exp, run_dir=run_dir))
    (line,) = refused.value.problems
    assert line.startswith(f"run directory {run_dir} is in use by a running tntrun (pid ")
    assert (run_dir / "config.yaml").read_text() == "seed: 42\n"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.yaml", "run.lock"]
    assert not (in_tmp / "outputs" / "mlflow.db").exists(), "no run may be tracked"


HOLD = """
import sys, time
from pathlib import Path
from tntrun.contract.run_lock import RunDirLock
lock = RunDirLock(Path(sys.argv[1])).acquire()
print("held", flush=True)
time.sleep(60)
"""


@pytest.mark.slow
def test_a_lock_held_by_another_process_refuses_until_that_process_dies(tmp_path):
    holder = start_in_session(
        [sys.executable, "-c", HOLD, str(tmp_path)], tmp_path, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RunDirBusy, match=f"pid {holder.pid}@"):
            RunDirLock(tmp_path).acquire()
        assert live_holder(tmp_path).pid == holder.pid
    finally:
        holder.send_signal(signal.SIGKILL)  # as a driver dies: no release, the kernel's flock goes
        holder.wait()
    assert live_holder(tmp_path) is None
    with RunDirLock(tmp_path) as lock:
        assert lock.stale is not None and lock.stale.pid == holder.pid


def test_the_command_line_locks_its_run_directory_before_hydra_writes_into_it(tmp_path):
    from omegaconf import OmegaConf

    from tntrun.cli import LockRunDir
    from tntrun.contract.run_lock import taken_early

    config = OmegaConf.create({"hydra": {"run": {"dir": str(tmp_path / "run")}}})
    with RunDirLock(tmp_path / "run"), pytest.raises(SystemExit) as refused:
        LockRunDir().on_run_start(config)
    assert refused.value.code == 2
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["run.lock"]
    LockRunDir().on_run_start(config)  # free now: held for the driver that runs next
    early = taken_early(tmp_path / "run")
    assert early is not None and live_holder(tmp_path / "run").pid == os.getpid()
    early.release()
    assert taken_early(tmp_path / "run") is None


def test_a_requeued_job_resumes_the_run_in_the_directory_its_own_command_line_locked(tmp_path):
    from tntrun.contract.run_lock import take_early, taken_early

    take_early(tmp_path)  # a requeued job's hydra.run.dir is its previous run's
    try:
        assert live_holder(tmp_path) is None, "its own lock is not another run's"
    finally:
        taken_early(tmp_path).release()


def test_the_driver_takes_a_dead_drivers_lock_over_with_one_line(in_tmp, caplog):
    exp = api.compose([f"output_root={in_tmp / 'outputs'}", "dry_run=true"])
    run_dir = in_tmp / "the-run"
    run_dir.mkdir()
    (run_dir / "run.lock").write_text("4242 gone-host 1764300000.5\n")
    result = api.run(replace(exp, run_dir=run_dir))
    assert result.exit_code == 0
    (note,) = [r.getMessage() for r in caplog.records if "took over" in r.getMessage()]
    assert note == (
        f"tntrun: note: took over {run_dir / 'run.lock'} from a tntrun that ended without "
        f"releasing it ({Holder(4242, 'gone-host', 1764300000.5)})"
    )
    assert (run_dir / "run.lock").read_text() == ""
