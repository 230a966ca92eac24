"""Preemption's pure parts: mid-epoch checkpoints, where a resumed run continues, which
run resume=auto picks, and the driver's handling of stop signals (no ranks, no TF)."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from tests.helpers.plans import settings_for
from tntrun.config.values import value_problems
from tntrun.contract.checkpoints import (
    CheckpointMeta,
    latest_checkpoint,
    list_checkpoints,
    publish,
    read_meta,
)
from tntrun.contract.stop_signals import signal_number
from tntrun.environments.slurm import SlurmEnvironment
from tntrun.errors import PlanError
from tntrun.launch.preemption import StopOnSignals
from tntrun.launch.supervisor import Outcome
from tntrun.planning.resume import ResumePoint, first_resumable, resume_position
from tntrun.tracking.run_record import preemption_tags


def write(run_dir: Path, epoch: int, batch: int = 0, keep: int = 5) -> Path:
    meta = CheckpointMeta(epoch, epoch * 10 + batch, 2, 64, "h", batch)
    return publish(run_dir, meta, lambda prefix: Path(prefix).write_text("state"), keep)


def test_mid_epoch_checkpoints_sort_in_training_order(tmp_path):
    for epoch, batch in ((2, 0), (1, 0), (2, 7), (1, 9)):
        write(tmp_path, epoch, batch)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["epoch-0001", "epoch-0001.batch-00009", "epoch-0002", "epoch-0002.batch-00007"]
    assert read_meta(latest_checkpoint(tmp_path)).batch == 7
    write(tmp_path, 3, keep=2)  # retention counts mid-epoch checkpoints alike
    assert [p.name for p in list_checkpoints(tmp_path)] == ["epoch-0002.batch-00007", "epoch-0003"]


def test_a_checkpoint_without_a_batch_is_an_epoch_boundary(tmp_path):
    folder = write(tmp_path, 2)
    meta = json.loads((folder / "meta.json").read_text())
    del meta["batch"]  # written before mid-epoch checkpoints existed
    (folder / "meta.json").write_text(json.dumps(meta))
    assert read_meta(folder).batch == 0


def point(epoch: int, batch: int, step: int, allow: bool = False) -> ResumePoint:
    return ResumePoint("c", CheckpointMeta(epoch, step, 2, 64, "h", batch), allow)


def test_a_resumed_run_continues_at_the_checkpoints_batch():
    at = resume_position(point(1, 9, 31), world=2, global_batch=64, updates_per_epoch=22, epochs=4)
    assert at == (1, 31, 9)


def test_a_new_layout_continues_at_the_start_of_the_checkpoints_epoch():
    at = resume_position(
        point(1, 9, 31, allow=True), world=1, global_batch=32, updates_per_epoch=44, epochs=4
    )
    assert at == (1, 44, 0)
    with pytest.raises(PlanError, match="resume_allow_layout_change=true"):
        resume_position(point(1, 9, 31), world=1, global_batch=32, updates_per_epoch=44, epochs=4)


def test_resume_auto_picks_the_newest_unfinished_run_with_a_checkpoint(tmp_path):
    empty, older = tmp_path / "empty", tmp_path / "older"
    empty.mkdir()
    write(older, 1)
    candidates = [
        ("gone", str(tmp_path / "gone")),
        ("empty", str(empty)),
        ("none", None),
        ("older", str(older)),
    ]
    assert first_resumable(candidates) == "older"
    assert first_resumable(candidates[:3]) is None


def test_signal_names_in_the_config(compose_cfg):
    assert signal_number("SIGUSR1") == signal_number("usr1") == signal.SIGUSR1
    assert signal_number("15") == signal.SIGTERM
    with pytest.raises(ValueError, match="no such signal 'SIGNOPE'"):
        signal_number("SIGNOPE")
    ok = settings_for(compose_cfg, "faults.preempt_signals=[TERM,SIGUSR2]")
    assert value_problems(ok) == []
    for bad in (["SIGNOPE"], ["SIGKILL"], ["SIGINT"]):
        given = settings_for(compose_cfg, f"faults.preempt_signals=[{bad[0]}]")
        problems = value_problems(given)
        assert problems == [
            f"faults.preempt_signals={bad}: name signals, e.g. [SIGTERM,SIGUSR1], or []"
        ]


def test_the_first_stop_signal_asks_the_ranks_the_second_interrupts(tmp_path, caplog):
    stopped = []
    stopping = StopOnSignals(
        tmp_path, ["SIGUSR1"], 30.0, lambda: True, lambda: stopped.append(True)
    )
    with stopping.installed():
        os.kill(os.getpid(), signal.SIGUSR1)
        assert (tmp_path / "stop.request").read_text() == "SIGUSR1"
        assert stopping.received == signal.SIGUSR1
        (said,) = [r for r in caplog.records if r.name == "tntrun.launch.preemption"]
        assert said.levelname == "WARNING"  # stderr on the console
        assert "the ranks stop at the next step they agree on" in said.getMessage()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGUSR1)
    assert not stopped


def test_sigterm_interrupts_when_not_a_stop_signal_or_before_any_rank(tmp_path):
    for signals, running in ((["SIGUSR1"], True), (["SIGTERM"], False)):
        stopping = StopOnSignals(tmp_path, signals, 30.0, lambda r=running: r, lambda: None)
        with stopping.installed(), pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGTERM)
        assert stopping.received is None and not (tmp_path / "stop.request").exists()
        assert stopping.interrupted_by == signal.SIGTERM


@pytest.mark.parametrize(
    ("status", "ended_by", "code"),
    [
        ("FINISHED", None, 0),
        ("FAILED", None, 1),
        ("KILLED", None, 130),  # Ctrl-C: Python's own SIGINT handler
        ("KILLED", signal.SIGTERM, 143),  # preempted, after the checkpoint
        ("KILLED", signal.SIGUSR1, 128 + signal.SIGUSR1),
    ],
)
def test_a_run_a_signal_ended_exits_128_plus_its_number(status, ended_by, code):
    assert Outcome(status, plan=None, ended_by=ended_by).exit_code == code


def test_ranks_that_do_not_stop_in_time_are_stopped(tmp_path):
    stopped = []
    stopping = StopOnSignals(
        tmp_path, ["SIGTERM"], 0.05, lambda: True, lambda: stopped.append(True)
    )
    with stopping.installed():
        os.kill(os.getpid(), signal.SIGTERM)
        for _ in range(100):
            if stopped:
                break
            time.sleep(0.02)
    assert stopped == [True]


def test_a_requeued_slurm_job_is_known_by_its_restart_count():
    assert (
        SlurmEnvironment({"SLURM_JOB_ID": "12", "SLURM_RESTART_COUNT": "1"}).requeued_job() == "12"
    )
    assert (
        SlurmEnvironment({"SLURM_JOB_ID": "12", "SLURM_RESTART_COUNT": "0"}).requeued_job() is None
    )
    assert SlurmEnvironment({"SLURM_JOB_ID": "12"}).requeued_job() is None
    assert SlurmEnvironment({"SLURM_JOB_ID": "12"}).tags() == {"slurm_job_id": "12"}
    assert SlurmEnvironment({}).tags() == {}


def test_the_preempted_tag_says_why_where_and_which_checkpoint(tmp_path):
    assert preemption_tags(tmp_path) == {}
    record = {
        "why": "SIGTERM on the driver",
        "epoch": 1,
        "batch": 9,
        "step": 31,
        "checkpoint": "epoch-0001.batch-00009",
        "t": 0,
    }
    (tmp_path / "preempted.json").write_text(json.dumps(record))
    assert preemption_tags(tmp_path) == {
        "preempted": (
            "SIGTERM on the driver: stopped after step 31 (epoch 2, batch 9); "
            "checkpoint epoch-0001.batch-00009"
        )
    }


def test_signals_after_the_last_training_step_stop_nothing(tmp_path, caplog):
    stopped = []
    stopping = StopOnSignals(
        tmp_path, ["SIGTERM"], 30.0, lambda: True, lambda: stopped.append(True)
    )
    (tmp_path / "trained").write_text("2 epochs\n")  # rank 0, after the run's last step
    with stopping.installed():
        for sig in (signal.SIGTERM, signal.SIGTERM, signal.SIGINT):  # no KeyboardInterrupt
            os.kill(os.getpid(), sig)
        assert stopping.after_training == signal.SIGINT and stopping.received is None
        assert not (tmp_path / "stop.request").exists()
    (said,) = [r.getMessage() for r in caplog.records if r.name == "tntrun.launch.preemption"]
    assert said.startswith("tntrun: SIGTERM after the last training step: the ranks save")
    assert "checkpoint" not in said and "go on" not in said
    assert not stopped  # the grace period's timer was cancelled with the handlers
    assert Outcome("FINISHED", plan=None, ended_by=signal.SIGTERM).exit_code == 0


def test_while_the_record_is_written_a_signal_waits_for_it(caplog):
    from tntrun.launch.preemption import record_first

    with record_first() as noted:
        os.kill(os.getpid(), signal.SIGTERM)  # the default would end this process
        os.kill(os.getpid(), signal.SIGINT)  # and this one raise KeyboardInterrupt
    assert noted == [signal.SIGTERM, signal.SIGINT]
    said = [r.getMessage() for r in caplog.records if r.name == "tntrun.launch.preemption"]
    assert said == ["tntrun: SIGTERM: the run has ended; its record is written first"]
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_DFL  # restored
