"""A failed attempt's logs moved aside before the ranks restart, and the one line that says
why it failed (real run-directory files in tmp_path)."""

from __future__ import annotations

from pathlib import Path

from tntrun.contract import run_files
from tntrun.launch.attempt_logs import archive_attempt

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 3, in <module>\n'
    "ValueError: the loss is nan\n"
)


def failed_attempt(run_dir: Path, rank_1_log: str) -> None:
    """The files a failed attempt leaves: the rank logs, the combined log, heartbeats."""
    logs = run_dir / run_files.LOGS
    logs.mkdir(parents=True)
    (logs / "launcher.log").write_text("")
    (logs / "rank.0.log").write_text(f"epoch 1\n{run_files.RANK_DONE}\n")
    (logs / "rank.1.log").write_text(rank_1_log)
    (run_dir / run_files.RANKS_LOG).write_text("[1]<stderr>:ValueError: the loss is nan\n")
    (run_dir / run_files.HEARTBEATS).mkdir()
    (run_dir / run_files.HEARTBEATS / "rank.0").write_text("12")


def test_the_logs_move_to_the_attempts_folder_with_the_failing_ranks_traceback(tmp_path):
    failed_attempt(tmp_path, f"epoch 1\n{TRACEBACK}")
    why = archive_attempt(tmp_path, 1, stalled=None)
    assert why == "rank 1 failed: ValueError: the loss is nan"
    folder = tmp_path / run_files.RESTARTS / "attempt-1"
    assert (folder / run_files.traceback_file(1)).read_text() == TRACEBACK
    assert (folder / run_files.LOGS / "rank.1.log").read_text().endswith(TRACEBACK)
    assert (folder / run_files.HEARTBEATS / "rank.0").read_text() == "12"
    assert (folder / run_files.RANKS_LOG).is_file()
    for name in (run_files.LOGS, run_files.RANKS_LOG, run_files.HEARTBEATS):
        assert not (tmp_path / name).exists(), f"{name} left for the next attempt"


def test_a_second_failure_has_its_own_folder_and_a_stall_is_its_own_reason(tmp_path):
    failed_attempt(tmp_path, f"epoch 1\n{TRACEBACK}")
    archive_attempt(tmp_path, 1, stalled=None)
    failed_attempt(tmp_path, "epoch 2\n")
    why = archive_attempt(tmp_path, 2, stalled="rank 1 made no progress for 60 s")
    assert why == "rank 1 made no progress for 60 s"
    second = tmp_path / run_files.RESTARTS / "attempt-2"
    assert (second / run_files.LOGS / "rank.1.log").read_text() == "epoch 2\n"
    assert (tmp_path / run_files.RESTARTS / "attempt-1" / run_files.traceback_file(1)).exists()


def test_a_rank_gone_without_a_traceback_is_named_by_its_last_line(tmp_path):
    failed_attempt(tmp_path, "epoch 1\nstep 7 of 20\n")
    assert archive_attempt(tmp_path, 1, stalled=None) == "rank 1 failed: step 7 of 20"


def test_an_attempt_that_left_no_logs_failed_as_the_ranks(tmp_path):
    assert archive_attempt(tmp_path, 3, stalled=None) == "the ranks failed"
    assert (tmp_path / run_files.RESTARTS / "attempt-3").is_dir()
