"""Arithmetic of benchmarks on a shaped link: rates, the ring allreduce bound, ratios.

Pure (tested in tests/cluster/test_link_shaping.py); the benchmarks that measure live
beside it (bench/allreduce_wire.py).
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence

UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9}  # tc's: decimal, bits


def parse_rate(text: str) -> float:
    """tc's rate syntax (``1gbit``, ``500mbit``, ``100kbit``) in bits per second."""
    match = re.fullmatch(r"([0-9]*\.?[0-9]+)([kmg]?)bit", text.strip().lower())
    if match is None:
        raise ValueError(f"rate {text!r}: use e.g. 1gbit, 500mbit")
    return float(match[1]) * UNITS[match[2]]


def ring_bound_s(nbytes: float, ranks: int, bits_per_s: float) -> float:
    """The least time a ring allreduce of ``nbytes`` on ``ranks`` ranks needs on links of
    ``bits_per_s`` per direction: each rank sends (and receives) 2 (N-1)/N of the data."""
    if ranks < 2:
        return 0.0
    return 2 * (ranks - 1) / ranks * nbytes * 8 / bits_per_s


def median_and_spread(values: Sequence[float]) -> tuple[float, float]:
    """(median, (max - min) / median) of repeated measurements."""
    middle = statistics.median(values)
    return middle, (max(values) - min(values)) / middle if middle else float("nan")


def within(measured: float, asked: float, tolerance: float) -> bool:
    """Whether ``measured`` is within ``tolerance`` (a fraction) of ``asked``."""
    return abs(measured - asked) <= tolerance * asked


def relative_errors(predicted: Sequence[float], measured: Sequence[float]) -> list[float]:
    """``predicted / measured - 1`` of paired repeats (positive: the prediction is slower)."""
    return [p / m - 1 for p, m in zip(predicted, measured, strict=True)]


def weak_scaling_efficiency(step_ms: Mapping[int, float]) -> dict[int, float]:
    """Efficiency by world size at a fixed micro-batch: step(1) / step(N), the same number
    as a sweep report's throughput(N) / (N x throughput(1))."""
    return {n: step_ms[1] / step for n, step in step_ms.items()}
