"""The training plan: every number and command derived from the config, before launch.

Pure: a resolved config and the machine facts go in, an immutable :class:`Plan`
comes out. No TensorFlow, no processes, no launcher: the launcher the plan names
renders its own command from it (:func:`tntrun.launch.with_launch_command`). The
plan serialises to JSON so the ranks train with exactly the numbers the driver showed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tntrun.config.schema import ScheduleConfig, ScheduleName
from tntrun.config.settings import Settings, plain_settings, recorded_settings, settings_of
from tntrun.config.values import value_problems
from tntrun.config.zoo import distributes_automatically
from tntrun.contract import run_files
from tntrun.datasets.base import DatasetInfo
from tntrun.errors import PlanError
from tntrun.planning.knobs import HorovodKnob, horovod_knobs
from tntrun.planning.layout import (
    LayoutError,
    RankPlacement,
    place_ranks,
    ranks_per_node,
    resolve_hosts,
)
from tntrun.planning.machine import MachineFacts
from tntrun.planning.resume import ResumePoint, resume_position
from tntrun.planning.schedules import ScheduleParams

LR_SCALINGS = ("linear", "sqrt", "none")
WORKER_MODULE = "tntrun.engine.worker"

__all__ = ["DatasetInfo", "MachineFacts", "Plan", "PlanError", "ResumePoint", "build_plan"]


@dataclass(frozen=True)
class Plan:
    """Immutable derived plan of one training run."""

    nodes: int
    ranks_per_node: int
    world_size: int
    gpus_per_node: int
    hosts: tuple[tuple[str, int], ...]
    placements: tuple[RankPlacement, ...]
    pin_to_socket: bool
    threads_per_rank: int
    global_batch_size: int
    micro_batch_size: int
    val_micro_batch_size: int
    backward_passes_per_step: int
    effective_batch_size: int
    num_train: int
    num_val: int
    steps_per_epoch: int
    epochs: int  # trained by this run (train.epochs)
    schedule_epochs: int  # the LR schedule's length (schedule.epochs, else train.epochs)
    total_steps: int
    optimizer_steps: int
    base_lr: float
    base_batch_size: int
    lr_scaling: str
    scaled_lr: float
    schedule: ScheduleParams
    fusion_threshold_bytes: int | None
    horovod: tuple[HorovodKnob, ...]
    launcher: str
    # The typed settings the plan was derived from: all a rank reads besides the plan's own
    # numbers (its policies: restarts, checkpoints, preemption, tracking, evaluation).
    settings: Settings
    config_hash: str  # the training problem's (checkpoints, resume=auto): see config_hash()
    resume_from: str | None = None
    initial_epoch: int = 0
    initial_step: int = 0
    initial_batch: int = 0  # batches of initial_epoch trained before (a preempted run's)
    precision: str = "float32"  # train.precision: the ranks' Keras dtype policy
    jit_compile: bool = False  # train.jit_compile: forward and backward pass compiled by XLA
    worker: tuple[str, ...] = ()  # each rank's command: python -m tntrun.engine.worker <run dir>
    # Rendered by the launcher from the plan (tntrun.launch.with_launch_command), recorded here.
    launch_command: tuple[str, ...] = ()
    launch_env: tuple[tuple[str, str], ...] = ()

    def to_json(self) -> str:
        raw = dataclasses.asdict(replace(self, settings=None))
        raw["settings"] = plain_settings(self.settings)  # its enums by value
        return json.dumps(raw, indent=2)

    @classmethod
    def from_json(cls, text: str, config_file: Path | None = None) -> Plan:
        """The plan ``to_json`` wrote; one written before plans carried their settings takes
        them from its run directory's ``config_file``."""
        raw = json.loads(text)
        if config_file is not None:
            raw["settings"], raw["config_hash"] = recorded_settings(config_file)
        raw["hosts"] = tuple(tuple(h) for h in raw["hosts"])
        raw["placements"] = tuple(RankPlacement(**p) for p in raw["placements"])
        raw["schedule"] = ScheduleParams(
            **{**raw["schedule"], "boundaries": tuple(raw["schedule"]["boundaries"])}
        )
        raw["horovod"] = tuple(HorovodKnob.from_dict(k) for k in raw["horovod"])
        raw["worker"] = tuple(raw.get("worker", ()))
        raw["launch_command"] = tuple(raw["launch_command"])
        raw["launch_env"] = tuple(tuple(kv) for kv in raw["launch_env"])
        if config_file is None:
            raw["settings"] = settings_of(raw["settings"])
        return cls(**raw)

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> Plan:
        text = path.read_text()
        if '"settings"' not in text:  # written before plans carried their settings
            return cls.from_json(text, path.parent / run_files.CONFIG)
        return cls.from_json(text)

    @property
    def stops_early(self) -> bool:
        """True when this run trains only the first epochs of a longer schedule."""
        return self.epochs < self.schedule_epochs

    def notes(self) -> list[str]:
        """Legitimate but surprising things about this run, told before it starts: a smoke run
        of a long recipe stops early, possibly inside the warmup; a knob that cannot act."""
        parts = []
        if self.stops_early:
            parts.append(
                f"train.epochs={self.epochs} trains the first {self.epochs} of the schedule's "
                f"{self.schedule_epochs} epochs (schedule.epochs); the LR follows the full "
                "schedule and the run stops early"
            )
        warmup = self.schedule.warmup_steps
        if self.total_steps < warmup:
            parts.append(
                f"the run's {self.total_steps} steps end inside the {warmup}-step warmup "
                f"(train.epochs={self.epochs}), so the LR never reaches its peak "
                f"{self.scaled_lr:g}"
            )
        notes = ["; ".join(parts)] if parts else []
        if self.gpus_per_node == 0 and any(k.key == "hierarchical_allreduce" for k in self.horovod):
            notes.append(
                "horovod.hierarchical_allreduce=true has no effect on CPU ranks (gpus=0): "
                "Horovod's hierarchical allreduce is NCCL's, so the allreduce stays flat"
            )
        return notes

    def summary_params(self) -> dict[str, Any]:
        """Plan values worth logging as run parameters (prefixed ``plan.``)."""
        keys = (
            "world_size",
            "nodes",
            "ranks_per_node",
            "threads_per_rank",
            "global_batch_size",
            "micro_batch_size",
            "val_micro_batch_size",
            "effective_batch_size",
            "steps_per_epoch",
            "schedule_epochs",
            "total_steps",
            "optimizer_steps",
            "scaled_lr",
            "fusion_threshold_bytes",
        )
        params = {f"plan.{k}": getattr(self, k) for k in keys}
        params["plan.warmup_steps"] = self.schedule.warmup_steps
        params["plan.decay_steps"] = ",".join(map(str, self.schedule.boundaries))
        return params


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


def batch_sizes(settings: Settings, world: int, sequence_length: int) -> tuple[int, int]:
    """(global, micro) batch from ``global_batch_size``, ``micro_batch_size``, ``batch_tokens``."""
    global_batch, micro = settings.global_batch_size, settings.micro_batch_size
    tokens = settings.batch_tokens
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
                "use schedule=warmup_piecewise or schedule=warmup_cosine"
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
        problems, lambda: batch_sizes(settings, world, data.input_shape[0])
    )
    knobs = _collect(problems, lambda: horovod_knobs(settings.horovod, run_dir))
    problems.extend(setting_problems(settings, facts, world))
    if problems or not batches or not hosts or knobs is None:
        raise PlanError(problems)
    return Layout(per_node, hosts, world, *batches, knobs)


def setting_problems(settings: Settings, facts: MachineFacts, world: int | None) -> list[str]:
    """Values out of range, and settings this machine or layout cannot honour."""
    problems = value_problems(settings)
    epochs = settings.train.epochs
    if epochs < 1:
        problems.append(f"train.epochs={epochs}: train for at least 1 epoch")
    if settings.pin_to_socket and facts.numactl is None:
        problems.append(
            "pin_to_socket=true needs numactl, which is not installed: "
            "install it (apt-get install numactl) or set pin_to_socket=false"
        )
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
    backward_passes: int
    effective_batch_size: int
    scaled_lr: float
    schedule_epochs: int
    schedule: ScheduleParams


def planned_steps(settings: Settings, data: DatasetInfo, layout: Layout) -> Steps:
    """Steps per epoch from the samples and the global batch; the LR scaled to the batch and
    the schedule in steps (training steps, as Keras's ``optimizer.iterations`` counts them,
    also under gradient accumulation)."""
    global_batch = layout.global_batch_size
    passes = next(k.value for k in layout.knobs if k.key == "backward_passes_per_step")
    samples = data.num_train
    drop = settings.train.drop_remainder
    steps = samples // global_batch if drop else math.ceil(samples / global_batch)
    if steps < 1:
        raise PlanError(
            f"global_batch_size={global_batch} exceeds the {samples} training samples: "
            "lower global_batch_size"
        )
    if steps < passes:
        raise PlanError(
            f"horovod.backward_passes_per_step={passes} exceeds the {steps} steps of an epoch: "
            "lower it or the global batch"
        )
    opt, sched = settings.optimizer, settings.schedule
    effective = global_batch * passes
    scaled = scale_learning_rate(
        opt["base_lr"], effective, opt["base_batch_size"], sched.scaling.value
    )
    schedule_epochs, length_key = schedule_length(sched, settings.train.epochs)
    schedule = schedule_params(
        sched,
        peak_lr=scaled,
        world=layout.world_size,
        updates_per_epoch=steps,
        epochs=schedule_epochs,
        length_key=length_key,
    )
    return Steps(steps, passes, effective, scaled, schedule_epochs, schedule)


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
    epochs = settings.train.epochs
    start = starting_point(settings, resume, layout, steps)
    pin, per_node = settings.pin_to_socket, layout.ranks_per_node
    sockets = settings.sockets_per_node or facts.sockets_per_node
    fusion = next((k.value * 1024 for k in layout.knobs if k.key == "fusion_threshold_kb"), None)
    return Plan(
        nodes=settings.nodes,
        ranks_per_node=per_node,
        world_size=layout.world_size,
        gpus_per_node=settings.gpus,
        hosts=layout.hosts,
        placements=place_ranks(layout.hosts, settings.gpus, sockets if pin else None),
        pin_to_socket=pin,
        threads_per_rank=settings.threads_per_rank or max(1, facts.cores_per_node // per_node),
        global_batch_size=layout.global_batch_size,
        micro_batch_size=layout.micro_batch_size,
        val_micro_batch_size=settings.val_micro_batch_size or layout.micro_batch_size,
        backward_passes_per_step=steps.backward_passes,
        effective_batch_size=steps.effective_batch_size,
        num_train=data.num_train,
        num_val=data.num_val,
        steps_per_epoch=steps.per_epoch,
        epochs=epochs,
        schedule_epochs=steps.schedule_epochs,
        total_steps=steps.per_epoch * epochs,
        optimizer_steps=steps.per_epoch * epochs // steps.backward_passes,
        base_lr=settings.optimizer["base_lr"],
        base_batch_size=settings.optimizer["base_batch_size"],
        lr_scaling=settings.schedule.scaling.value,
        scaled_lr=steps.scaled_lr,
        schedule=steps.schedule,
        fusion_threshold_bytes=fusion,
        horovod=layout.knobs,
        launcher=settings.launcher,
        settings=settings,
        config_hash=config_hash,
        resume_from=None if resume is None else resume.checkpoint,
        initial_epoch=start[0],
        initial_step=start[1],
        initial_batch=start[2],
        precision=settings.train.precision.value,
        jit_compile=settings.train.jit_compile,
        worker=(facts.python, "-m", WORKER_MODULE, str(run_dir)),
    )
