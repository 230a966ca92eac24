"""The learning rate over a run's steps: scaled to the global batch, its schedule in steps.

Pure. The schedule's config is in epochs (warmup, decay boundaries, its length); the
plan needs training steps, as Keras's ``optimizer.iterations`` counts them. Each check
names the key and a value that works.
"""

from __future__ import annotations

import math

from tntrun.config.schema import ScheduleConfig, ScheduleName
from tntrun.errors import PlanError
from tntrun.planning.schedules import ScheduleParams

LR_SCALINGS = ("linear", "sqrt", "none")


def scale_learning_rate(base_lr: float, global_batch: int, base_batch: int, scaling: str) -> float:
    """Scale ``base_lr`` stated at ``base_batch`` to ``global_batch`` (linear, sqrt or none)."""
    ratio = global_batch / base_batch
    if scaling == "linear":
        return base_lr * ratio
    if scaling == "sqrt":
        return base_lr * math.sqrt(ratio)
    if scaling == "none":
        return base_lr
    raise PlanError(f"schedule.scaling={scaling!r}: choose one of {', '.join(LR_SCALINGS)}")


def schedule_length(sched: ScheduleConfig, train_epochs: int) -> tuple[int, str]:
    """The schedule's length in epochs and the key that sets it, for messages."""
    if sched.epochs is None:
        return train_epochs, f"train.epochs={train_epochs}"
    epochs = sched.epochs
    if epochs < 1:
        raise PlanError(f"schedule.epochs={epochs}: use 1 or more, or null to follow train.epochs")
    if train_epochs > epochs:
        raise PlanError(
            f"train.epochs={train_epochs} runs past the end of the schedule "
            f"(schedule.epochs={epochs}): raise schedule.epochs to {train_epochs} "
            "or set schedule.epochs=null to follow train.epochs"
        )
    return epochs, f"schedule.epochs={epochs}"


def schedule_params(
    sched: ScheduleConfig,
    *,
    peak_lr: float,
    world: int,
    updates_per_epoch: float,
    epochs: int,
    length_key: str,
) -> ScheduleParams:
    """Convert the epoch-denominated schedule config into training steps, checking it.

    ``epochs`` is the schedule's length (``schedule.epochs``, else ``train.epochs``),
    named by ``length_key`` in messages.
    """
    optimizer_steps = round(updates_per_epoch * epochs)
    name = sched.name.value
    if sched.name is ScheduleName.constant:
        if sched.warmup_epochs or sched.warmup_steps:
            raise PlanError(
                "schedule.warmup_epochs has no effect with schedule.name=constant: "
                "use schedule=warmup_piecewise, warmup_cosine or warmup_poly"
            )
        return ScheduleParams(name=name, peak_lr=peak_lr, total_steps=optimizer_steps)
    warmup = warmup_steps(sched, updates_per_epoch, optimizer_steps, length_key)
    boundaries = decay_boundaries(sched, epochs, length_key)
    start = sched.warmup_start_lr
    return ScheduleParams(
        name=name,
        peak_lr=peak_lr,
        total_steps=optimizer_steps,
        warmup_steps=warmup,
        warmup_start_lr=peak_lr / world if start is None else start,
        boundaries=tuple(round(e * updates_per_epoch) for e in boundaries),
        decay_rate=sched.decay_rate,
        final_lr=peak_lr * sched.final_lr_fraction,
        d_model=sched.d_model,
        power=sched.decay_power,
    )


def warmup_steps(
    sched: ScheduleConfig, updates_per_epoch: float, optimizer_steps: int, length_key: str
) -> int:
    """The warmup in steps (``warmup_steps``, else ``warmup_epochs``), inside the schedule."""
    explicit = sched.warmup_steps
    warmup = explicit if explicit is not None else round(sched.warmup_epochs * updates_per_epoch)
    # inverse_sqrt has no end (it decays as 1/sqrt(step) forever), so no length can end inside
    # its warmup; a run shorter than the warmup is noted by Plan.notes(), not refused.
    if sched.name is not ScheduleName.inverse_sqrt and warmup > optimizer_steps:
        given = (
            f"warmup_steps={explicit}"
            if explicit is not None
            else f"warmup_epochs={sched.warmup_epochs:g}"
        )
        raise PlanError(
            f"schedule.{given} ({warmup} steps) is longer than the schedule ({optimizer_steps} "
            f"steps, {length_key}), which would end inside its warmup: shorten the warmup or "
            f"raise {length_key.split('=')[0]}"
        )
    return warmup


def decay_boundaries(sched: ScheduleConfig, epochs: int, length_key: str) -> list[float]:
    """The piecewise schedule's decay epochs (none for the other schedules), checked."""
    if sched.name is not ScheduleName.warmup_piecewise:
        return []
    boundaries = list(sched.boundaries_epochs)
    for epoch in boundaries:
        if epoch >= epochs:
            raise PlanError(
                f"schedule.boundaries_epochs has {epoch:g}, beyond the last epoch "
                f"({length_key}): drop it or raise {length_key.split('=')[0]} above {epoch:g}"
            )
    if sorted(boundaries) != boundaries:
        raise PlanError(f"schedule.boundaries_epochs={boundaries} must be increasing")
    return boundaries
