"""Metrics from rank 0 to the driver through ``<run dir>/metrics.jsonl``.

No rank imports MLflow (its import alone costs seconds before the first
step): rank 0 appends one JSON line per ``log`` call, and the driver, which has
MLflow loaded anyway, relays new lines into the run about once a second and
once more when the ranks have ended, so nothing written is lost even when a
rank dies.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from tntrun.run_files import METRICS as METRICS_FILE
from tntrun.tracking import MetricPoint


class MetricsWriter:
    """Rank 0's side: append ``{"t": ms, "step": n, "metrics": {...}}`` lines."""

    def __init__(self, run_dir: Path) -> None:
        self._file = (run_dir / METRICS_FILE).open("a", buffering=1)  # line-buffered

    def log(self, metrics: dict[str, float], step: int) -> None:
        values = {k: float(v) for k, v in sorted(metrics.items())}
        line = json.dumps({"t": int(time.time() * 1000), "step": int(step), "metrics": values})
        self._file.write(line + "\n")

    def close(self) -> None:
        self._file.close()


def parse_lines(lines: Iterable[str]) -> list[MetricPoint]:
    """The metric points of complete JSON lines."""
    points = []
    for line in lines:
        record = json.loads(line)
        t, step = int(record["t"]), int(record["step"])
        points += [(key, value, t, step) for key, value in record["metrics"].items()]
    return points


class MetricsRelay:
    """Driver's side: forward new lines of the metrics file to ``send`` while the job runs.

    Use as a context manager around the job; leaving it sends what is left.
    """

    def __init__(self, path: Path, send: Callable[[list[MetricPoint]], None],
                 interval_s: float = 1.0) -> None:  # fmt: skip
        self.path, self.send, self.interval_s = path, send, interval_s
        self._offset = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tntrun-metrics", daemon=True)

    def drain(self) -> None:
        """Send every complete line written since the last call."""
        if not self.path.exists():
            return
        with self.path.open("rb") as stream:
            stream.seek(self._offset)
            chunk = stream.read()
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line being written waits for the next call
        if not complete:
            return
        self._offset += len(complete)
        points = parse_lines(complete.decode().splitlines())
        if points:
            self.send(points)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.drain()

    def __enter__(self) -> MetricsRelay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.drain()
