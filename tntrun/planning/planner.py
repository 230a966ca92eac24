"""The pure planner: typed settings, the dataset's sizes and the machine facts in, a Plan out.

In stages: the layout and batch, checked with every other setting so that all problems
are reported at once (:func:`checked_layout`); the steps and the learning rate
(:func:`planned_steps`); where the run starts (:func:`starting_point`). No TensorFlow, no
processes, no launcher: the launcher the plan names renders its own command from it
(:func:`tntrun.launch.with_launch_command`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tntrun.config.settings import Settings
from tntrun.config.values import class_weight_problems, value_problems
from tntrun.config.zoo import distributes_automatically
from tntrun.datasets.base import DatasetInfo, sequence_length_of
from tntrun.errors import PlanError
from tntrun.planning.elastic import elastic_problems, node_range
from tntrun.planning.knobs import HorovodKnob, horovod_knobs
from tntrun.planning.layout import LayoutError, place_ranks, ranks_per_node, resolve_hosts
from tntrun.planning.machine import MachineFacts
from tntrun.planning.plan import Plan
from tntrun.planning.resume import ResumePoint, resume_position
from tntrun.planning.schedule_steps import scale_learning_rate, schedule_length, schedule_params
from tntrun.planning.schedules import ScheduleParams

WORKER_MODULE = "tntrun.engine.worker"


# A plan's bound on its training steps: more is a typo (train.epochs=1000000000), not a run.
MAX_TOTAL_STEPS = 10**7


def batch_sizes(settings: Settings, world: int, sequence_length: int | None) -> tuple[int, int]:
    """(global, micro) batch from ``global_batch_size``, ``micro_batch_size``, ``batch_tokens``."""
    global_batch, micro = settings.global_batch_size, settings.micro_batch_size
    tokens = settings.batch_tokens
    if tokens is not None and sequence_length is None:
        raise PlanError(
            f"batch_tokens={tokens} needs a dataset of token sequences: give global_batch_size"
        )
    if tokens is not None:
        sentences = tokens // sequence_length
        if global_batch is not None and global_batch != sentences:
            raise PlanError(
                f"batch_tokens={tokens} gives {sentences} sentences of length {sequence_length} "
                f"but global_batch_size={global_batch}: give only one of them"
            )
        global_batch = sentences
    if micro is not None:
        if micro < 1:
            raise PlanError(f"micro_batch_size={micro}: a rank needs at least 1 sample per step")
        if global_batch is not None and global_batch != micro * world:
            raise PlanError(
                f"global_batch_size={global_batch} and micro_batch_size={micro} disagree on "
                f"{world} ranks ({micro} x {world} = {micro * world}): give only one of them"
            )
        return micro * world, micro
    return global_batch_per_rank(global_batch, world)


def global_batch_per_rank(global_batch: int | None, world: int) -> tuple[int, int]:
    """(global, micro) batch from a global batch the world size must divide."""
    if global_batch is None:
        raise PlanError("global_batch_size is not set: give global_batch_size or micro_batch_size")
    if global_batch < world:
        raise PlanError(
            f"global_batch_size={global_batch} gives a micro-batch < 1 on {world} ranks: "
            f"use global_batch_size={world} or more"
        )
    if global_batch % world:
        lower = global_batch - global_batch % world
        raise PlanError(
            f"global_batch_size={global_batch} is not divisible by the world size {world}: "
            f"use global_batch_size={lower} or {lower + world}"
        )
    return global_batch, global_batch // world


def predict_scaling_problems(world: int | None, epochs: int) -> list[str]:
    """What keeps ``predict_scaling=true`` from measuring its inputs in this run."""
    problems = []
    if world is not None and world < 2:
        problems.append(
            f"predict_scaling=true needs 2 or more ranks to measure the allreduce, this run has "
            f"{world}: use ranks_per_node=2 (or more nodes)"
        )
    if epochs < 2:
        problems.append(
            f"predict_scaling=true validates against the steady step time of the epochs after "
            f"the first, train.epochs={epochs}: use train.epochs=2 or more"
        )
    return problems


def _collect(problems: list[str], build: Callable[[], Any]) -> Any:
    """Run one planning section, recording its problem instead of stopping."""
    try:
        return build()
    except (PlanError, LayoutError) as err:
        problems.extend(getattr(err, "problems", [str(err)]))
        return None


@dataclass(frozen=True)
class Layout:
    """The checked layout and batch: where the ranks run and what each steps on."""

    ranks_per_node: int
    hosts: tuple[tuple[str, int], ...]
    world_size: int
    global_batch_size: int
    micro_batch_size: int
    knobs: tuple[HorovodKnob, ...]


def checked_layout(
    settings: Settings, data: DatasetInfo, facts: MachineFacts, run_dir: Path
) -> Layout:
    """The layout, batch and knobs, with every problem of the settings found on the way.

    Raises :class:`PlanError` listing them all, one line each.
    """
    problems: list[str] = []
    per_node = _collect(problems, lambda: ranks_per_node(settings.gpus, settings.ranks_per_node))
    requested = {"hosts": settings.hosts, "hostfile": settings.hostfile}
    hosts = per_node and _collect(
        problems, lambda: resolve_hosts(settings.nodes, requested, per_node, facts.allocation)
    )
    world = settings.nodes * per_node if hosts else None
    batches = world and _collect(
        problems, lambda: batch_sizes(settings, world, sequence_length_of(data))
    )
    knobs = _collect(problems, lambda: horovod_knobs(settings.horovod, run_dir))
    problems.extend(setting_problems(settings, world))
    problems.extend(class_weight_problems(settings.train.class_weight, data))
    problems.extend(elastic_problems(settings, per_node))
    if problems or not batches or not hosts or knobs is None:
        raise PlanError(problems)
    return Layout(per_node, hosts, world, *batches, knobs)


def setting_problems(settings: Settings, world: int | None) -> list[str]:
    """Values out of range, and settings this machine or layout cannot honour."""
    problems = value_problems(settings)
    epochs = settings.train.epochs
    if epochs < 1:
        problems.append(f"train.epochs={epochs}: train for at least 1 epoch")
    if settings.predict_scaling:
        problems.extend(predict_scaling_problems(world, epochs))
    threads = settings.threads_per_rank
    if threads is not None and threads < 1:
        problems.append(f"threads_per_rank={threads}: use 1 or more, or null for cores/ranks")
    return problems


@dataclass(frozen=True)
class Steps:
    """An epoch's steps and the learning rate over them."""

    per_epoch: int
    scaled_lr: float
    schedule_epochs: int
    schedule: ScheduleParams


def planned_steps(settings: Settings, data: DatasetInfo, layout: Layout) -> Steps:
    """Steps per epoch from the samples and the global batch; the LR scaled to the batch and
    the schedule in steps (training steps, as Keras's ``optimizer.iterations`` counts them,
    also under gradient accumulation)."""
    global_batch = layout.global_batch_size
    passes = settings.horovod.backward_passes_per_step
    samples = data.num_train
    drop = settings.train.drop_remainder
    steps = samples // global_batch if drop else math.ceil(samples / global_batch)
    if steps < 1:
        raise PlanError(
            f"global_batch_size={global_batch} exceeds the {samples} training samples: "
            "lower global_batch_size"
        )
    epochs = settings.train.epochs
    if steps * epochs > MAX_TOTAL_STEPS:
        raise PlanError(
            f"train.epochs={epochs}: {steps} steps/epoch x {epochs} epochs = "
            f"{steps * epochs:,} training steps, more than {MAX_TOTAL_STEPS:,}: lower "
            f"train.epochs (at most {MAX_TOTAL_STEPS // steps:,} at this batch)"
        )
    if steps < passes:
        raise PlanError(
            f"horovod.backward_passes_per_step={passes} exceeds the {steps} steps of an epoch: "
            "lower it or the global batch"
        )
    opt, sched = settings.optimizer, settings.schedule
    effective = global_batch * passes
    scaled = scale_learning_rate(opt.base_lr, effective, opt.base_batch_size, sched.scaling.value)
    schedule_epochs, length_key = schedule_length(sched, settings.train.epochs)
    schedule = schedule_params(
        sched,
        peak_lr=scaled,
        world=layout.world_size,
        updates_per_epoch=steps,
        epochs=schedule_epochs,
        length_key=length_key,
    )
    return Steps(steps, scaled, schedule_epochs, schedule)


def starting_point(
    settings: Settings, resume: ResumePoint | None, layout: Layout, steps: Steps
) -> tuple[int, int, int]:
    """(epoch, step, batch) the run starts at: the beginning, or where ``resume`` continues."""
    if resume is None:
        return 0, 0, 0
    return resume_position(
        resume,
        world=layout.world_size,
        global_batch=layout.global_batch_size,
        updates_per_epoch=steps.per_epoch,
        epochs=settings.train.epochs,
        samples_follow_steps=distributes_automatically(settings.dataset),
    )


def build_plan(
    settings: Settings,
    config_hash: str,
    data: DatasetInfo,
    facts: MachineFacts,
    run_dir: Path,
    resume: ResumePoint | None = None,
) -> Plan:
    """Derive the plan from the typed settings (``config_hash``: the training problem's).

    Raises :class:`PlanError` listing every problem found, one line each.
    """
    layout = checked_layout(settings, data, facts, run_dir)
    steps = planned_steps(settings, data, layout)
    start = starting_point(settings, resume, layout, steps)
    pin, per_node = settings.pin_to_socket, layout.ranks_per_node
    sockets = settings.sockets_per_node or facts.sockets_per_node
    return Plan(
        ranks_per_node=per_node,
        hosts=layout.hosts,
        placements=place_ranks(layout.hosts, settings.gpus, sockets if pin else None),
        threads_per_rank=settings.threads_per_rank or max(1, facts.cores_per_node // per_node),
        global_batch_size=layout.global_batch_size,
        micro_batch_size=layout.micro_batch_size,
        val_micro_batch_size=settings.val_micro_batch_size or layout.micro_batch_size,
        num_train=data.num_train,
        num_val=data.num_val,
        steps_per_epoch=steps.per_epoch,
        schedule_epochs=steps.schedule_epochs,
        scaled_lr=steps.scaled_lr,
        schedule=steps.schedule,
        horovod=layout.knobs,
        elastic_nodes=node_range(settings),
        settings=settings,
        config_hash=config_hash,
        resume_from=None if resume is None else resume.checkpoint,
        initial_epoch=start[0],
        initial_step=start[1],
        initial_batch=start[2],
        worker=(facts.python, "-m", WORKER_MODULE, str(run_dir)),
    )
