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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tntrun.config.values import value_problems
from tntrun.config.zoo import distributes_automatically
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
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        raw = json.loads(text)
        raw["hosts"] = tuple(tuple(h) for h in raw["hosts"])
        raw["placements"] = tuple(RankPlacement(**p) for p in raw["placements"])
        raw["schedule"] = ScheduleParams(
            **{**raw["schedule"], "boundaries": tuple(raw["schedule"]["boundaries"])}
        )
        raw["horovod"] = tuple(HorovodKnob.from_dict(k) for k in raw["horovod"])
        raw["worker"] = tuple(raw.get("worker", ()))
        raw["launch_command"] = tuple(raw["launch_command"])
        raw["launch_env"] = tuple(tuple(kv) for kv in raw["launch_env"])
        return cls(**raw)

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls.from_json(path.read_text())

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


def batch_sizes(cfg: Mapping[str, Any], world: int, sequence_length: int) -> tuple[int, int]:
    """(global, micro) batch from ``global_batch_size``, ``micro_batch_size``, ``batch_tokens``."""
    global_batch, micro = cfg["global_batch_size"], cfg["micro_batch_size"]
    tokens = cfg["batch_tokens"]
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


def schedule_length(sched: Mapping[str, Any], train_epochs: int) -> tuple[int, str]:
    """The schedule's length in epochs and the key that sets it, for messages."""
    if sched["epochs"] is None:
        return train_epochs, f"train.epochs={train_epochs}"
    epochs = int(sched["epochs"])
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
    sched: Mapping[str, Any],
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
    name = str(sched["name"])
    warmup_epochs = float(sched["warmup_epochs"])
    if name == "constant":
        if warmup_epochs or sched["warmup_steps"]:
            raise PlanError(
                "schedule.warmup_epochs has no effect with schedule.name=constant: "
                "use schedule=warmup_piecewise or schedule=warmup_cosine"
            )
        return ScheduleParams(name=name, peak_lr=peak_lr, total_steps=optimizer_steps)
    explicit = sched["warmup_steps"]
    warmup = int(explicit) if explicit is not None else round(warmup_epochs * updates_per_epoch)
    # inverse_sqrt has no end (it decays as 1/sqrt(step) forever), so no length can end inside
    # its warmup; a run shorter than the warmup is noted by Plan.notes(), not refused.
    if name != "inverse_sqrt" and warmup > optimizer_steps:
        given = (
            f"warmup_steps={explicit}"
            if explicit is not None
            else (f"warmup_epochs={warmup_epochs:g}")
        )
        raise PlanError(
            f"schedule.{given} ({warmup} steps) is longer than the schedule ({optimizer_steps} "
            f"steps, {length_key}), which would end inside its warmup: shorten the warmup or "
            f"raise {length_key.split('=')[0]}"
        )
    boundaries_epochs = list(sched["boundaries_epochs"])
    if name != "warmup_piecewise":
        boundaries_epochs = []
    for epoch in boundaries_epochs:
        if epoch >= epochs:
            raise PlanError(
                f"schedule.boundaries_epochs has {epoch:g}, beyond the last epoch "
                f"({length_key}): drop it or raise {length_key.split('=')[0]} above {epoch:g}"
            )
    if sorted(boundaries_epochs) != boundaries_epochs:
        raise PlanError(f"schedule.boundaries_epochs={boundaries_epochs} must be increasing")
    start = sched["warmup_start_lr"]
    return ScheduleParams(
        name=name,
        peak_lr=peak_lr,
        total_steps=optimizer_steps,
        warmup_steps=warmup,
        warmup_start_lr=peak_lr / world if start is None else float(start),
        boundaries=tuple(round(e * updates_per_epoch) for e in boundaries_epochs),
        decay_rate=float(sched["decay_rate"]),
        final_lr=peak_lr * float(sched["final_lr_fraction"]),
        d_model=int(sched["d_model"]),
    )


def predict_scaling_problems(cfg: Mapping[str, Any], world: int | None, epochs: int) -> list[str]:
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


def resumed_at(
    cfg: Mapping[str, Any], resume: ResumePoint | None, world: int, global_batch: int, steps: int
) -> tuple[int, int, int]:
    """(epoch, step, batch) the run starts at: the beginning, or where ``resume`` continues."""
    if resume is None:
        return 0, 0, 0
    return resume_position(
        resume,
        world=world,
        global_batch=global_batch,
        updates_per_epoch=steps,
        epochs=int(cfg["train"]["epochs"]),
        samples_follow_steps=distributes_automatically(cfg["dataset"]),
    )


def build_plan(
    cfg: Mapping[str, Any],
    data: DatasetInfo,
    facts: MachineFacts,
    run_dir: Path,
    resume: ResumePoint | None = None,
) -> Plan:
    """Derive the plan from a resolved config (a plain nested mapping).

    Raises :class:`PlanError` listing every problem found, one line each.
    """
    problems: list[str] = []
    gpus = int(cfg["gpus"])
    per_node = _collect(problems, lambda: ranks_per_node(gpus, int(cfg["ranks_per_node"])))
    hosts = per_node and _collect(problems, lambda: resolve_hosts(cfg, per_node, facts.allocation))
    world = int(cfg["nodes"]) * per_node if hosts else None
    batches = world and _collect(problems, lambda: batch_sizes(cfg, world, data.input_shape[0]))
    knobs = _collect(problems, lambda: horovod_knobs(cfg["horovod"], run_dir))
    epochs = int(cfg["train"]["epochs"])
    if epochs < 1:
        problems.append(f"train.epochs={epochs}: train for at least 1 epoch")
    pin = bool(cfg["pin_to_socket"])
    if pin and facts.numactl is None:
        problems.append(
            "pin_to_socket=true needs numactl, which is not installed: "
            "install it (apt-get install numactl) or set pin_to_socket=false"
        )
    problems.extend(value_problems(cfg))
    if cfg["predict_scaling"]:
        problems.extend(predict_scaling_problems(cfg, world, epochs))
    threads = cfg["threads_per_rank"]
    if threads is not None and threads < 1:
        problems.append(f"threads_per_rank={threads}: use 1 or more, or null for cores/ranks")
    if problems or not batches or not hosts or knobs is None:
        raise PlanError(problems)

    global_batch, micro = batches
    passes = next(k.value for k in knobs if k.key == "backward_passes_per_step")
    drop = bool(cfg["train"]["drop_remainder"])
    steps = data.num_train // global_batch if drop else math.ceil(data.num_train / global_batch)
    if steps < 1:
        raise PlanError(
            f"global_batch_size={global_batch} exceeds the {data.num_train} training samples: "
            "lower global_batch_size"
        )
    if steps < passes:
        raise PlanError(
            f"horovod.backward_passes_per_step={passes} exceeds the {steps} steps of an epoch: "
            "lower it or the global batch"
        )
    opt, sched = cfg["optimizer"], cfg["schedule"]
    scaling = str(sched["scaling"])
    base_lr, base_batch = float(opt["base_lr"]), int(opt["base_batch_size"])
    effective = global_batch * passes
    scaled = scale_learning_rate(base_lr, effective, base_batch, scaling)
    # Schedules count training steps (micro-batch steps), as Keras's optimizer.iterations
    # does, also under gradient accumulation.
    schedule_epochs, length_key = schedule_length(sched, epochs)
    schedule = schedule_params(
        sched,
        peak_lr=scaled,
        world=world,
        updates_per_epoch=steps,
        epochs=schedule_epochs,
        length_key=length_key,
    )

    initial_epoch, initial_step, initial_batch = resumed_at(cfg, resume, world, global_batch, steps)
    sockets = int(cfg["sockets_per_node"] or facts.sockets_per_node)
    fusion = next((k.value * 1024 for k in knobs if k.key == "fusion_threshold_kb"), None)
    return Plan(
        nodes=int(cfg["nodes"]),
        ranks_per_node=per_node,
        world_size=world,
        gpus_per_node=gpus,
        hosts=hosts,
        placements=place_ranks(hosts, gpus, sockets if pin else None),
        pin_to_socket=pin,
        threads_per_rank=int(threads or max(1, facts.cores_per_node // per_node)),
        global_batch_size=global_batch,
        micro_batch_size=micro,
        val_micro_batch_size=int(cfg["val_micro_batch_size"] or micro),
        backward_passes_per_step=passes,
        effective_batch_size=effective,
        num_train=data.num_train,
        num_val=data.num_val,
        steps_per_epoch=steps,
        epochs=epochs,
        schedule_epochs=schedule_epochs,
        total_steps=steps * epochs,
        optimizer_steps=steps * epochs // passes,
        base_lr=base_lr,
        base_batch_size=base_batch,
        lr_scaling=scaling,
        scaled_lr=scaled,
        schedule=schedule,
        fusion_threshold_bytes=fusion,
        horovod=knobs,
        launcher=str(cfg["launcher"]),
        resume_from=None if resume is None else resume.checkpoint,
        initial_epoch=initial_epoch,
        initial_step=initial_step,
        initial_batch=initial_batch,
        precision=str(cfg["train"]["precision"]),
        jit_compile=bool(cfg["train"]["jit_compile"]),
        worker=(facts.python, "-m", WORKER_MODULE, str(run_dir)),
    )
