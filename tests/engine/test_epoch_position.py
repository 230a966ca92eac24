"""Where a step falls in the run, across a resumed epoch and the run's last step, and the
rank's heartbeat file the driver's watchdog reads, from a real ``fit`` (one process)."""

from __future__ import annotations

from tests.engine.one_rank import X, Y, classifier, fit
from tntrun.engine.epoch_position import EpochPosition
from tntrun.engine.heartbeat import Heartbeat


class Positions(EpochPosition):
    def __init__(self, steps_per_epoch: int, epochs: int) -> None:
        super().__init__(steps_per_epoch, epochs)
        self.seen: list = []

    def on_train_batch_end(self, batch, logs=None):
        self.seen.append(self.position(batch))


def test_each_step_is_the_next_epochs_start_at_an_epochs_end_and_none_at_the_runs():
    positions = Positions(steps_per_epoch=4, epochs=2)
    fit(classifier(), [positions], epochs=2)
    assert positions.seen == [(0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3), None]


def test_a_resumed_epoch_counts_the_batches_trained_before():
    positions = Positions(steps_per_epoch=4, epochs=2)
    positions.start_at_batch(2)
    model = classifier()
    fit(model, [positions], epochs=1, steps_per_epoch=2)  # the epoch's 2 remaining steps
    fit(model, [positions], epochs=2, initial_epoch=1)
    assert positions.seen[:2] == [(0, 3), (1, 0)]  # then counted from 0 again
    assert positions.seen[2:] == [(1, 1), (1, 2), (1, 3), None]


def test_the_heartbeat_holds_the_optimizer_step_and_phase(tmp_path):
    model = classifier()
    fit(model, [], epochs=1, batch_size=8)  # 2 steps before
    folder = tmp_path / "heartbeats"
    fit(model, [Heartbeat(folder, rank=3)], epochs=1, validation_data=(X[:4], Y[:4]))
    record = (folder / "rank.3").read_bytes()
    assert len(record) == Heartbeat.RECORD
    assert record.decode().split() == ["6", "eval"]  # 2 + 4 steps; validation came last
