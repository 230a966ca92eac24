"""The end-of-run delivery both the driver and ``tntrun sync`` use: through a store that
does not answer it leaves the rest in ``tracking_pending.json`` with its progress; once
the store answers, everything goes, the status last, and nothing is left pending.
In-process, with a tracker that records what it is sent (the real store and ranks:
test_tracking_outage)."""

from __future__ import annotations

from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.metrics import MetricsWriter
from tntrun.contract.run_status import RunStatus
from tntrun.tracking.delivery import Delivery, deliver_or_leave_pending
from tntrun.tracking.metrics_stream import MetricsRelay
from tntrun.tracking.outage import Pending

DOWN_STORE = "http://127.0.0.1:9"  # nothing listens there: a failure is an outage


class RecordingTracker:
    """A tracker whose store refuses every request while ``down``."""

    label = "Recording"
    store = DOWN_STORE

    def __init__(self) -> None:
        self.run_id: str | None = "run-1"
        self.down = True
        self.calls: list[tuple[str, object]] = []

    def _call(self, name: str, value: object) -> None:
        if self.down:
            raise ConnectionRefusedError(111, "Connection refused")
        self.calls.append((name, value))

    def log_metrics(self, points) -> None:
        self._call("metrics", len(points))

    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        self._call("artifact", path.name)

    def set_tag(self, key: str, value: str) -> None:
        self._call("tag", key)

    def finish(self, status: RunStatus) -> None:
        self._call("finish", status)


def delivery_of(run_dir: Path, tracker: RecordingTracker) -> Delivery:
    writer = MetricsWriter(run_dir)
    for step in range(3):
        writer.log({"loss": 1.0 / (step + 1)}, step)
    writer.close()
    (run_dir / run_files.CONFIG).write_text("seed: 1\n")  # an output to attach
    relay = MetricsRelay(run_dir / run_files.METRICS, tracker.log_metrics)
    return Delivery(tracker, run_dir, relay, RunStatus.FINISHED)


def test_a_store_that_stays_away_leaves_the_rest_pending_with_the_progress(tmp_path):
    tracker = RecordingTracker()
    delivery = delivery_of(tmp_path, tracker)
    left = deliver_or_leave_pending(
        delivery, 0.0, lambda: Pending(DOWN_STORE, RunStatus.FINISHED, "run-1", 7)
    )
    assert left is not None and left.reason == "[Errno 111] Connection refused"
    assert (left.metrics_offset, left.outputs_logged) == (0, False)  # nothing got through
    loaded = Pending.load(tmp_path)
    assert loaded == left and loaded.status is RunStatus.FINISHED
    assert '"status": "FINISHED"' in (tmp_path / run_files.TRACKING_PENDING).read_text()
    assert tracker.calls == []


def test_a_store_that_answers_takes_everything_and_the_status_last(tmp_path):
    tracker = RecordingTracker()
    tracker.down = False
    delivery = delivery_of(tmp_path, tracker)
    assert deliver_or_leave_pending(delivery, 0.0, lambda: Pending(DOWN_STORE, "FAILED")) is None
    assert tracker.calls[0] == ("metrics", 3)
    assert ("artifact", run_files.CONFIG) in tracker.calls
    assert tracker.calls[-1] == ("finish", RunStatus.FINISHED)
    assert delivery.outputs_logged and delivery.relay.lines_sent == 3
    assert Pending.load(tmp_path) is None
