"""The metrics stream's format: rank 0 appends JSON lines to ``<run dir>/metrics.jsonl``.

No rank imports MLflow (its import alone costs seconds before the first step):
rank 0 writes one line per ``log`` call, ``{"t": ms, "step": n, "metrics": {...}}``,
and the driver relays the lines into the tracked run
(:class:`tntrun.tracking.metrics_stream.MetricsRelay`). Both sides read the
format here.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path

from tntrun.contract.run_files import METRICS as METRICS_FILE

# (key, value, timestamp in ms, step): one metric point
MetricPoint = tuple[str, float, int, int]


def lowest_is_best(metric: str) -> bool:
    """Which way a metric improves when nothing says: a loss downwards, the rest upwards
    (checkpoint.mode=auto on the ranks, a sweep's best job without a sweeper direction)."""
    return "loss" in metric


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


def last_values(path: Path) -> dict[str, float]:
    """Each metric's last value in a metrics file (the run's final metrics, read locally)."""
    if not path.exists():
        return {}
    complete = path.read_bytes()
    complete = complete[: complete.rfind(b"\n") + 1]
    return {key: value for key, value, _, _ in parse_lines(complete.decode().splitlines())}
