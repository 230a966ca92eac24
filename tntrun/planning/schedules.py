"""Learning-rate schedules as step-based formulas, written once for NumPy and TensorFlow.

The planner evaluates them with NumPy (the dry-run table and plot); the ranks
evaluate the very same code on TensorFlow tensors inside a Keras
``LearningRateSchedule``. Every length is in training steps (the optimizer's
iteration counter, which counts every step, also under gradient accumulation),
derived from the real steps per epoch, so a resumed run continues the schedule
where it stopped.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import numpy as np

NUMPY_OPS = SimpleNamespace(
    where=np.where,
    minimum=np.minimum,
    maximum=np.maximum,
    cos=np.cos,
    sqrt=np.sqrt,
    power=np.power,
    float=lambda x: np.asarray(x, np.float64),
)


@dataclass(frozen=True)
class ScheduleParams:
    """A schedule with every length in training steps."""

    name: str
    peak_lr: float
    total_steps: int
    warmup_steps: int = 0
    warmup_start_lr: float = 0.0
    boundaries: tuple[int, ...] = ()
    decay_rate: float = 0.1
    final_lr: float = 0.0
    d_model: int = 512
    power: float = 2.0  # warmup_poly's decay power

    def key_steps(self) -> list[int]:
        """Steps worth showing in a plan table: start, warmup end, boundaries, end."""
        steps = {0, self.warmup_steps, self.total_steps - 1, *self.boundaries}
        if self.name in ("warmup_cosine", "warmup_poly"):
            steps.add(self.warmup_steps + (self.total_steps - self.warmup_steps) // 2)
        return sorted(s for s in steps if 0 <= s < self.total_steps)


def learning_rate(step: Any, p: ScheduleParams, ops: Any = NUMPY_OPS) -> Any:
    """The learning rate at training step ``step`` (0-based), elementwise."""
    step = ops.float(step)
    if p.name == "constant":
        return step * 0.0 + p.peak_lr
    if p.name == "inverse_sqrt":
        # Vaswani et al.: lr = d_model^-0.5 * min(n^-0.5, n * warmup^-1.5), n = step + 1.
        n = step + 1.0
        warmup = float(max(p.warmup_steps, 1))
        return p.peak_lr * p.d_model**-0.5 * ops.minimum(1.0 / ops.sqrt(n), n * warmup**-1.5)
    warming = p.warmup_start_lr + (p.peak_lr - p.warmup_start_lr) * step / max(p.warmup_steps, 1)
    if p.name == "warmup_piecewise":
        decays = step * 0.0
        for boundary in p.boundaries:
            decays = decays + ops.where(step >= boundary, 1.0, 0.0)
        after = p.peak_lr * ops.power(p.decay_rate, decays)
    elif p.name == "warmup_cosine":
        progress = _decay_progress(step, p, ops)
        after = p.final_lr + (p.peak_lr - p.final_lr) * 0.5 * (1.0 + ops.cos(math.pi * progress))
    elif p.name == "warmup_poly":  # You et al. 2017's LARS schedule: poly(power) to final_lr
        remaining = 1.0 - _decay_progress(step, p, ops)
        after = p.final_lr + (p.peak_lr - p.final_lr) * ops.power(remaining, p.power)
    else:
        raise ValueError(f"schedule.name={p.name!r} is not a known schedule")
    return ops.where(step < p.warmup_steps, warming, after)


def _decay_progress(step: Any, p: ScheduleParams, ops: Any) -> Any:
    """How far ``step`` is from the warmup's end (0) to the schedule's end (1)."""
    span = float(max(p.total_steps - p.warmup_steps, 1))
    return ops.minimum(ops.maximum(step - p.warmup_steps, 0.0) / span, 1.0)
