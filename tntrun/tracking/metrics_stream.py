"""The driver's side of the metrics stream (its format: :mod:`tntrun.contract.metrics`).

The driver, which has MLflow loaded anyway, relays rank 0's new lines into the
run about once a second and once more when the ranks have ended, so nothing
written is lost even when a rank dies. While the tracking store is down the
lines wait in the file; the relay sends them, in order and once, when it
answers again. Each host's system metrics travel with them
(:class:`~tntrun.tracking.node_metrics.NodeMetricsRelay`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.metrics import MetricPoint, parse_lines
from tntrun.tracking.node_metrics import NodeMetricsRelay


class MetricsRelay:
    """Driver's side: forward new lines of the metrics file to ``send`` while the job runs.

    Use as a context manager around the job; leaving it sends what is left (unless the
    store is down: then the caller retries with :meth:`drain`). A failed send (the store
    is down) keeps its lines: ``offset``, the bytes delivered, only moves past lines
    ``send`` accepted, so they go again with the next attempt, in order and once. Sends
    carry whole lines of at most ``max_points`` points (one MLflow request), so a failure
    never leaves half a batch delivered. Failures never end the relay: ``on_failure(error)``
    is called when sending starts failing and ``on_recovery(lines)`` when it works again,
    with the number of lines caught up. ``nodes``: the hosts' system metrics, drained after
    rank 0's lines by every drain.
    """

    def __init__(
        self,
        path: Path,
        send: Callable[[list[MetricPoint]], None],
        interval_s: float = 1.0,
        *,
        offset: int = 0,
        max_points: int = 1000,
        on_failure: Callable[[BaseException], None] | None = None,
        on_recovery: Callable[[int], None] | None = None,
        nodes: NodeMetricsRelay | None = None,
    ) -> None:
        self.path, self.send, self.interval_s = path, send, interval_s
        self.offset = offset  # bytes of the file delivered
        self.lines_sent = 0
        self.max_points = max_points
        self.failure: BaseException | None = None  # the last failed send, until one succeeds
        self._on_failure, self._on_recovery = on_failure, on_recovery
        self.nodes = nodes
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tntrun-metrics", daemon=True)

    @classmethod
    def of_run(
        cls,
        run_dir: Path,
        send: Callable[[list[MetricPoint]], None],
        run_id: Callable[[], str | None],
        per_node: bool,
        *,
        offset: int = 0,
        on_failure: Callable[[BaseException], None] | None = None,
        on_recovery: Callable[[int], None] | None = None,
    ) -> MetricsRelay:
        """The relay of a run directory: rank 0's metrics file and each host's system
        metrics (named by node when ``per_node``), into the run ``run_id()`` names."""
        return cls(
            run_dir / run_files.METRICS,
            send,
            offset=offset,
            on_failure=on_failure,
            on_recovery=on_recovery,
            nodes=NodeMetricsRelay(run_dir, send, run_id, per_node),
        )

    def drain(self) -> int:
        """Send every complete line written since the last delivered one; the lines sent.

        Raises what ``send`` raised; the lines not accepted stay for the next call.
        """
        sent = self._drain_metrics()
        if self.nodes is not None:
            self.nodes.drain()
        return sent

    def _drain_metrics(self) -> int:
        if not self.path.exists():
            return 0
        with self.path.open("rb") as stream:
            stream.seek(self.offset)
            chunk = stream.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits for the next call
        sent = 0
        for size, lines, points in self._batches(complete):
            if points:
                self.send(points)
            self.offset += size
            sent += lines
        self.lines_sent += sent
        return sent

    def _batches(self, complete: bytes) -> Iterator[tuple[int, int, list[MetricPoint]]]:
        """(bytes, lines, points) of consecutive whole lines, up to ``max_points`` points each."""
        size, lines, points = 0, 0, []
        for line in complete.splitlines(keepends=True):
            new = parse_lines([line.decode()]) if line.strip() else []
            if points and len(points) + len(new) > self.max_points:
                yield size, lines, points
                size, lines, points = 0, 0, []
            size, lines, points = size + len(line), lines + 1, points + new
        if size:
            yield size, lines, points

    def try_drain(self) -> bool:
        """:meth:`drain`, reporting instead of raising a failure; True when it worked."""
        try:
            sent = self.drain()
        except Exception as err:  # the store is down: the lines wait in the file
            if self.failure is None and self._on_failure is not None:
                self._on_failure(err)
            self.failure = err
            return False
        if self.failure is not None:
            self.failure = None
            if self._on_recovery is not None:
                self._on_recovery(sent)
        return True

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.try_drain()

    def __enter__(self) -> MetricsRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        if self.failure is None:  # else the store is down: the caller retries (delivery.Delivery)
            self.try_drain()
