"""The driver's side of each host's system metrics (files: :mod:`tntrun.contract.node_metrics`).

The relay of rank 0's metrics (:class:`tntrun.tracking.metrics_stream.MetricsRelay`)
drains these files with its own, every host's new samples in one request to the store
(up to ``max_points``), so the samples reach the run as its metrics do:
about once a second, once more when the ranks end, through an outage of the
store, and by ``tntrun sync``. Each sample becomes MLflow's system metrics under
the node's id, named as MLflow's ``SystemMetricsMonitor`` names them
(``system/<node>/cpu_utilization_percentage``; ``system/cpu_utilization_percentage``
on a one-node run, as MLflow names a monitor without a node id), so the UI's
System metrics tab shows one section per host.

What the run received of each file is kept in ``system/relayed.json`` after every
accepted send, so a relay started again on the same directory (``tntrun sync``, or
the end of a run after an outage) sends each sample once.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

from tntrun.contract.metrics import MetricPoint
from tntrun.contract.node_metrics import Relayed, Sample, parse_samples, sample_files

SYSTEM_PREFIX = "system/"  # MLflow's prefix for system metrics (its UI's System metrics tab)


def system_metric_key(name: str, node: str | None) -> str:
    """MLflow's key for a system metric of a node (``node`` None: a one-node run)."""
    return f"{SYSTEM_PREFIX}{node}/{name}" if node else f"{SYSTEM_PREFIX}{name}"


def points_of(samples: list[Sample], node: str | None) -> list[MetricPoint]:
    return [
        (system_metric_key(name, node), value, sample.t, sample.step)
        for sample in samples
        for name, value in sample.metrics.items()
    ]


class NodeMetricsRelay:
    """Send new samples of every ``system/<node>.jsonl`` to ``send`` (see the module doc).

    ``run_id`` tells the run the points go to (offsets recorded for another run do not
    count); ``per_node``: name them by node (a run on more than one host).
    """

    def __init__(
        self,
        run_dir: Path,
        send: Callable[[list[MetricPoint]], None],
        run_id: Callable[[], str | None],
        per_node: bool,
        max_points: int = 1000,
    ) -> None:
        self.run_dir, self.send, self.run_id = run_dir, send, run_id
        self.per_node, self.max_points = per_node, max_points
        self.relayed = Relayed.load(run_dir)
        self.samples_sent = 0

    def drain(self) -> int:
        """Send every complete sample not yet in the run; the samples sent. Raises what
        ``send`` raised; the samples not accepted stay for the next call."""
        current = self.run_id()
        if current is not None and self.relayed.run_id not in (None, current):
            self.relayed = Relayed(current, {})  # a run made anew receives every sample
        sent = 0
        for advances, samples, points in self._batches(self._new_lines()):
            if points:
                self.send(points)
            self.relayed.run_id = self.run_id()
            for name, size in advances.items():
                self.relayed.offsets[name] = self.relayed.offsets.get(name, 0) + size
            self.relayed.save(self.run_dir)
            sent += samples
        self.samples_sent += sent
        return sent

    def _new_lines(self) -> Iterator[tuple[str, str | None, bytes]]:
        """(file name, node, line) of each complete line not yet relayed, file by file."""
        for path in sample_files(self.run_dir):
            with path.open("rb") as stream:
                stream.seek(self.relayed.offsets.get(path.name, 0))
                chunk = stream.read()
            complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits
            node = path.stem if self.per_node else None
            for line in complete.splitlines(keepends=True):
                yield path.name, node, line

    def _batches(
        self, lines: Iterator[tuple[str, str | None, bytes]]
    ) -> Iterator[tuple[dict[str, int], int, list[MetricPoint]]]:
        """(bytes per file, samples, points) of consecutive lines of every host, up to
        ``max_points`` points each: one store request per drain whatever the host count
        (a request per host would grow the store's write rate with the hosts)."""
        advances: dict[str, int] = {}
        samples, points = 0, []
        for name, node, line in lines:
            new = parse_samples([line])
            batch = points_of(new, node)
            if points and len(points) + len(batch) > self.max_points:
                yield advances, samples, points
                advances, samples, points = {}, 0, []
            advances[name] = advances.get(name, 0) + len(line)
            samples, points = samples + len(new), points + batch
        if advances:
            yield advances, samples, points
