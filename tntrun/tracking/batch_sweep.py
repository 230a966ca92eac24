"""A sweep over the global batch: each run's measured steps to a common training loss, next
to what the gradient noise scale predicts.

The target is the highest of the runs' lowest epoch losses, so every run reached it; a
run's steps to it are the optimizer steps until the end of the first epoch whose training
loss (rank 0's per-epoch ``loss``, the mean over the epoch) is at or below it: exact to
an epoch. The prediction is McCandlish et al.'s S(B) = S_min (1 + B_noise / B) with
B_noise the median of the runs' final ``gradient_noise_scale`` and S_min the one number
fitted to all runs (the geometric mean of S_i / (1 + B_noise / B_i)): the noise scale
alone decides how the steps fall with the batch. The losses are read from each run's
``metrics.jsonl`` (its ``run_dir`` tag), so the report is made where the runs ran.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.metrics import parse_lines
from tntrun.planning.batch_advice import final_noise_scale, noise_scale_problem
from tntrun.tracking import RunSummary

LOSS = "loss"  # rank 0's per-epoch training loss, averaged over the epoch and the ranks

# (optimizer steps done, training loss then): one point per epoch
History = list[tuple[int, float]]


@dataclass(frozen=True)
class StepsToLoss:
    """The sweep's common target loss and, per run id, (measured, predicted) steps."""

    target: float
    noise_scale: float | None  # None: no run measured one that can be read
    steps: Mapping[str, tuple[int, float | None]]

    def note(self) -> str:
        """How the target and the prediction were chosen, for the report."""
        how = (
            f"Steps to a training loss of {self.target:.4g}: the highest of the runs' lowest "
            "epoch losses, so every run reached it; measured to the end of the first epoch at "
            "or below it (optimizer steps)."
        )
        if self.noise_scale is None:
            return how + " No run measured a gradient noise scale: nothing is predicted."
        return how + (
            f" Predicted: S_min (1 + B_noise / B) with B_noise = {self.noise_scale:.4g} "
            "samples (the median of the runs' final gradient_noise_scale) and S_min fitted "
            "to all runs."
        )


def epoch_losses(run_dir: Path, steps_per_epoch: int, passes: int) -> History:
    """A run's training loss after each epoch, against the optimizer steps done by then."""
    path = run_dir / run_files.METRICS
    if not path.is_file():
        return []
    points = parse_lines(path.read_text().splitlines())
    return [
        ((epoch + 1) * steps_per_epoch // passes, value)
        for key, value, _, epoch in points
        if key == LOSS and math.isfinite(value)
    ]


def steps_to(history: History, target: float) -> int | None:
    """The optimizer steps until the loss first was at or below ``target`` (None: never)."""
    return next((steps for steps, loss in history if loss <= target), None)


def fitted_steps(
    batches: Sequence[float], measured: Sequence[float], noise_scale: float
) -> list[float]:
    """S_min (1 + B_noise / B) at each batch, S_min fitted to the measured steps (least
    squares on their logarithms: the geometric mean of S / (1 + B_noise / B))."""
    shape = [1.0 + noise_scale / batch for batch in batches]
    s_min = math.exp(
        statistics.fmean(math.log(s / f) for s, f in zip(measured, shape, strict=True))
    )
    return [s_min * f for f in shape]


def steps_to_loss(children: Sequence[RunSummary]) -> StepsToLoss | None:
    """The sweep's steps to its common target loss; None unless two or more runs with a
    loss history trained at different global batches."""
    histories = {run.run_id: (run, history) for run in children if (history := history_of(run))}
    if len({batch_of(run) for run, _ in histories.values()}) < 2:
        return None
    target = max(min(loss for _, loss in history) for _, history in histories.values())
    reached = {
        run_id: (batch_of(run), steps)
        for run_id, (run, history) in histories.items()
        if (steps := steps_to(history, target)) is not None
    }
    noise_scale = sweep_noise_scale([run for run, _ in histories.values()])
    return StepsToLoss(target, noise_scale, predicted_table(reached, noise_scale))


def predicted_table(
    reached: Mapping[str, tuple[int, int]], noise_scale: float | None
) -> dict[str, tuple[int, float | None]]:
    """Per run id, (measured, predicted) steps from its (batch, measured steps)."""
    if noise_scale is None:
        return {run_id: (steps, None) for run_id, (_, steps) in reached.items()}
    batches = [batch for batch, _ in reached.values()]
    fitted = fitted_steps(batches, [steps for _, steps in reached.values()], noise_scale)
    return {
        run_id: (steps, predicted)
        for (run_id, (_, steps)), predicted in zip(reached.items(), fitted, strict=True)
    }


def sweep_noise_scale(runs: Sequence[RunSummary]) -> float | None:
    """The median of the runs' final noise scales that can be read (None: none can)."""
    values = [final_noise_scale(run.metrics) for run in runs]
    usable = [value for value in values if noise_scale_problem(value) is None]
    return statistics.median(usable) if usable else None


def batch_of(run: RunSummary) -> int:
    """Samples per optimizer update of a run (its plan's parameters)."""
    return int(run.params.get("plan.effective_batch_size", 0))


def history_of(run: RunSummary) -> History:
    """A run's epoch losses from its run directory (empty: not here, or not planned)."""
    run_dir, params = run.tags.get("run_dir"), run.params
    if not run_dir or "plan.steps_per_epoch" not in params:
        return []
    passes = batch_of(run) // int(params.get("plan.global_batch_size", 0) or 1) or 1
    return epoch_losses(Path(run_dir), int(params["plan.steps_per_epoch"]), passes)
