"""Rank 0 marks the end of the run's last training step (``trained``), and no step before
it, also in a resumed epoch: after it the driver lets a stop signal end nothing
(tntrun.launch.preemption). In-process: the guard's own bookkeeping, no ranks."""

from __future__ import annotations

from types import SimpleNamespace

from tntrun.contract import run_files
from tntrun.contract.stop_requests import StopRequests
from tntrun.engine.preemption import PreemptionGuard


def test_the_trained_marker_follows_the_run_s_last_step_only(tmp_path):
    marker = tmp_path / run_files.TRAINED
    agreement = SimpleNamespace(stop=False)
    guard = PreemptionGuard(StopRequests([], tmp_path), agreement, 3, 2, marker)
    seen = []
    guard.on_epoch_begin(0)
    guard.start_at_batch(1)  # resumed after one batch of the first epoch
    for batch in range(2):
        guard.on_train_batch_end(batch)
        seen.append(marker.exists())
    guard.on_epoch_end(0)
    guard.on_epoch_begin(1)
    for batch in range(3):
        guard.on_train_batch_end(batch)
        seen.append(marker.exists())
    assert seen == [False, False, False, False, True]
    assert marker.read_text() == "2 epochs\n"
