"""Each host's system metrics: one JSON-lines file per node in ``<run dir>/system/``.

No rank imports MLflow, so MLflow's own monitor cannot run beside the ranks: on
every host the rank with local rank 0 samples CPU, memory, disk, network (and
GPUs) with MLflow's metric names and units (:mod:`tntrun.engine.node_sampler`)
and appends ``{"t": ms, "step": n, "metrics": {...}}`` lines, the metrics
stream's format (:mod:`tntrun.contract.metrics`), to ``system/<node>.jsonl``.
The driver relays them into the run, per node
(:class:`tntrun.tracking.node_metrics.NodeMetricsRelay`), and records what the
run has received in ``system/relayed.json``.

A node's steps go on from its file's last line (a restart of the ranks) or, in
a resumed run's new directory, from ``system/<node>.resumed``: the last sample
of the directory it resumes (:func:`carry_over`). Network totals go on with them.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from tntrun.contract.run_files import SYSTEM_METRICS

SAMPLES = ".jsonl"  # <node>.jsonl: the node's samples, appended by its sampler
RESUMED = ".resumed"  # <node>.resumed: the last sample of the run directory resumed
RELAYED = "relayed.json"  # the driver's: bytes of each file the tracked run has received
# MLflow's names for network traffic: totals since sampling began, carried over restarts.
NETWORK_TOTALS = ("network_receive_megabytes", "network_transmit_megabytes")


@dataclass(frozen=True)
class Sample:
    """One sample of a node: wall time (ms), the node's step, MLflow-named values."""

    t: int
    step: int
    metrics: Mapping[str, float]

    def line(self) -> str:
        values = {key: float(value) for key, value in sorted(self.metrics.items())}
        return json.dumps({"t": int(self.t), "step": int(self.step), "metrics": values}) + "\n"


def node_name(host: str) -> str:
    """A host as a file name and an MLflow metric-key part (letters, digits, ``._-``)."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", host).strip(".") or "node"


def folder(run_dir: Path) -> Path:
    return run_dir / SYSTEM_METRICS


def samples_file(run_dir: Path, node: str) -> Path:
    return folder(run_dir) / f"{node_name(node)}{SAMPLES}"


def sample_files(run_dir: Path) -> list[Path]:
    """The nodes' sample files, in name order."""
    found = folder(run_dir)
    return sorted(found.glob(f"*{SAMPLES}")) if found.is_dir() else []


def parse_samples(lines: Iterable[bytes | str]) -> list[Sample]:
    """The samples of complete lines; a line that is not one (cut by a killed rank) is
    skipped, so it can never stop the relay."""
    samples = []
    for line in lines:
        try:
            record = json.loads(line)
            samples.append(
                Sample(
                    int(record["t"]),
                    int(record["step"]),
                    {str(k): float(v) for k, v in record["metrics"].items()},
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError):
            continue
    return samples


def _last_line_sample(path: Path) -> Sample | None:
    if not path.is_file():
        return None
    with path.open("rb") as stream:
        stream.seek(max(0, stream.seek(0, os.SEEK_END) - 64 * 1024))  # a line is ~0.5 KB
        tail = stream.read()
    found = parse_samples(tail[: tail.rfind(b"\n") + 1].splitlines()[-8:])
    return found[-1] if found else None


def last_sample(run_dir: Path, node: str) -> Sample | None:
    """The node's last sample in this run: its file's last line, else the one carried over
    from the run directory this one resumes (None: the node's first sample is step 0)."""
    path = samples_file(run_dir, node)
    return _last_line_sample(path) or _last_line_sample(path.with_suffix(RESUMED))


def carry_over(previous: Path, run_dir: Path) -> list[str]:
    """Resuming ``previous`` in ``run_dir``: each node's last sample to go on from; the
    nodes."""
    nodes = {p.stem for p in folder(previous).glob(f"*{SAMPLES}")}
    nodes |= {p.stem for p in folder(previous).glob(f"*{RESUMED}")}
    carried = []
    for node in sorted(nodes):
        sample = last_sample(previous, node)
        if sample is not None:
            folder(run_dir).mkdir(parents=True, exist_ok=True)
            samples_file(run_dir, node).with_suffix(RESUMED).write_text(sample.line())
            carried.append(node)
    return carried


class SampleWriter:
    """A sampler's side: append whole lines to ``system/<node>.jsonl``, one ``write`` each
    (a killed rank leaves no half line before the next one's)."""

    def __init__(self, run_dir: Path, node: str) -> None:
        self.path = samples_file(run_dir, node)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, sample: Sample) -> None:
        os.write(self._fd, sample.line().encode())

    def close(self) -> None:
        os.close(self._fd)


@dataclass
class Relayed:
    """What a tracked run received of each node's file (``system/relayed.json``): a run
    other than ``run_id`` (``tntrun sync`` made it anew) has received nothing."""

    run_id: str | None
    offsets: dict[str, int]

    @classmethod
    def load(cls, run_dir: Path) -> Relayed:
        path = folder(run_dir) / RELAYED
        try:
            raw = json.loads(path.read_text())
            return cls(raw.get("run_id"), {str(k): int(v) for k, v in raw["offsets"].items()})
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return cls(None, {})

    def save(self, run_dir: Path) -> None:
        path = folder(run_dir) / RELAYED
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps({"run_id": self.run_id, "offsets": self.offsets}) + "\n")
        partial.replace(path)
