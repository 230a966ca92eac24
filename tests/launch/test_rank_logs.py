"""Which rank caused a failed job, read from the per-rank logs as horovodrun leaves them."""

from __future__ import annotations

from pathlib import Path

from tntrun.contract.rank_logs import find_failure

FIRST_RANK_0 = (
    "Process 0 exit with status code 255.\nThe first process to do so was:\nProcess name: 0\n"
)
CUT_OFF = """rank 0/2: local rank 0, host tnt-h1
[0]: Horovod background loop uncaught exception: Read error: Connection reset by peer
Traceback (most recent call last):
  File "<frozen runpy>", line 198, in _run_module_as_main
  File "/x/tntrun/engine/trainer.py", line 283, in fit_from
    history = model.fit(train_ds, epochs=plan.epochs, initial_epoch=epoch,
"""
WHOLE = CUT_OFF + "RuntimeError: injected failure on rank 0 at step 30\n"
KILLED = "rank 1/2: local rank 0, host tnt-h2\nrank 1: injecting fault 'kill' at step 30\n"


def logs(tmp_path: Path, rank_0: str, rank_1: str) -> Path:
    (tmp_path / "launcher.log").write_text(FIRST_RANK_0)
    (tmp_path / "rank.0.log").write_text(rank_0)
    (tmp_path / "rank.1.log").write_text(rank_1)
    return tmp_path


def test_a_traceback_cut_off_by_the_launcher_is_not_the_cause(tmp_path):
    """Rank 1 was SIGKILLed on another host; rank 0, reporting the lost peer, was killed
    mid-traceback by horovodrun, which names it first: the cause is rank 1."""
    failure = find_failure(logs(tmp_path, CUT_OFF, KILLED))
    assert failure is not None and failure.rank == 1
    assert "rank 1 ended without a traceback" in failure.traceback


def test_a_whole_traceback_of_its_own_is_the_cause(tmp_path):
    failure = find_failure(logs(tmp_path, WHOLE, KILLED))
    assert failure is not None and failure.rank == 0
    assert failure.traceback.endswith("RuntimeError: injected failure on rank 0 at step 30\n")


def test_a_failure_reads_as_one_line_naming_the_rank(tmp_path):
    whole = find_failure(logs(tmp_path, WHOLE, KILLED))
    assert whole is not None
    assert whole.reason == "rank 0: RuntimeError: injected failure on rank 0 at step 30"
    killed = find_failure(logs(tmp_path, CUT_OFF, KILLED))
    assert killed is not None
    assert killed.reason == "rank 1 ended without a traceback"
