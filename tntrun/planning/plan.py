"""The training plan: every number and command of a run, derived before launch.

An immutable :class:`Plan` (derived by :func:`tntrun.planning.planner.build_plan`) that
carries the typed settings it came from. It serialises to ``plan.json``, all a rank reads,
so the ranks train with exactly the numbers and policies the driver showed.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tntrun.config.settings import Settings, plain_settings, recorded_settings, settings_of
from tntrun.contract import run_files
from tntrun.datasets.base import DatasetInfo
from tntrun.errors import PlanError
from tntrun.planning.knobs import HorovodKnob
from tntrun.planning.layout import RankPlacement
from tntrun.planning.lr_rules import LrRuleInputs, lr_rule_notes
from tntrun.planning.machine import MachineFacts
from tntrun.planning.resume import ResumePoint
from tntrun.planning.schedules import ScheduleParams

SELF_BINDING = "numactl"  # a rank binds itself: it re-executes under numactl

__all__ = ["DatasetInfo", "MachineFacts", "Plan", "PlanError", "ResumePoint"]

# What the plan reads from its settings (properties), in plan.json for its readers.
FROM_SETTINGS = (
    "nodes",
    "world_size",
    "gpus_per_node",
    "pin_to_socket",
    "launcher",
    "epochs",
    "total_steps",
    "backward_passes_per_step",
    "effective_batch_size",
    "optimizer_steps",
    "base_lr",
    "base_batch_size",
    "lr_scaling",
    "fusion_threshold_bytes",
    "precision",
    "jit_compile",
)


@dataclass(frozen=True)
class Plan:
    """Immutable derived plan of one training run: the facts derived from the settings, the
    data and the machine. What the settings say already is a property reading
    ``settings`` (:data:`FROM_SETTINGS`), written into plan.json beside the fields for
    whoever reads the file."""

    ranks_per_node: int
    hosts: tuple[tuple[str, int], ...]
    placements: tuple[RankPlacement, ...]
    threads_per_rank: int
    global_batch_size: int
    micro_batch_size: int
    val_micro_batch_size: int
    num_train: int
    num_val: int
    steps_per_epoch: int
    schedule_epochs: int  # the LR schedule's length (schedule.epochs, else train.epochs)
    scaled_lr: float
    schedule: ScheduleParams
    horovod: tuple[HorovodKnob, ...]
    elastic_nodes: tuple[int, int] | None  # (min, max) nodes an elastic run may go on at
    # The typed settings the plan was derived from: all a rank reads besides the plan's own
    # numbers (its policies: restarts, checkpoints, preemption, tracking, evaluation).
    settings: Settings
    config_hash: str  # the training problem's (checkpoints, resume=auto): see config_hash()
    resume_from: str | None = None
    initial_epoch: int = 0
    initial_step: int = 0
    initial_batch: int = 0  # batches of initial_epoch trained before (a preempted run's)
    worker: tuple[str, ...] = ()  # each rank's command: python -m tntrun.engine.worker <run dir>
    # Rendered by the launcher from the plan (tntrun.launch.with_launch_command), recorded here.
    launch_command: tuple[str, ...] = ()
    launch_env: tuple[tuple[str, str], ...] = ()
    # pin_to_socket: who binds each rank to its socket, the rank itself under numactl or a
    # launcher that binds (mpirun's --bind-to socket).
    bound_by: str = SELF_BINDING

    def to_json(self) -> str:
        raw = dataclasses.asdict(replace(self, settings=None))
        raw.update({name: getattr(self, name) for name in FROM_SETTINGS})
        raw["settings"] = plain_settings(self.settings)  # its enums by value
        return json.dumps(raw, indent=2)

    @classmethod
    def from_json(cls, text: str, config_file: Path | None = None) -> Plan:
        """The plan ``to_json`` wrote; one written before plans carried their settings takes
        them from its run directory's ``config_file``."""
        raw = {k: v for k, v in json.loads(text).items() if k not in FROM_SETTINGS}
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
        elastic = raw.get("elastic_nodes")  # absent from plans written before elastic runs
        raw["elastic_nodes"] = tuple(elastic) if elastic else None
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
    def nodes(self) -> int:
        return self.settings.nodes

    @property
    def world_size(self) -> int:
        return sum(slots for _, slots in self.hosts)

    @property
    def gpus_per_node(self) -> int:
        return self.settings.gpus

    @property
    def pin_to_socket(self) -> bool:
        return self.settings.pin_to_socket

    @property
    def launcher(self) -> str:
        return self.settings.launcher

    @property
    def epochs(self) -> int:
        """Trained by this run (train.epochs); the schedule may be longer (schedule_epochs)."""
        return self.settings.train.epochs

    @property
    def total_steps(self) -> int:
        return self.steps_per_epoch * self.epochs

    @property
    def backward_passes_per_step(self) -> int:
        return self.settings.horovod.backward_passes_per_step

    @property
    def effective_batch_size(self) -> int:
        """Samples per optimizer update: the global batch times the accumulated passes."""
        return self.global_batch_size * self.backward_passes_per_step

    @property
    def optimizer_steps(self) -> int:
        return self.total_steps // self.backward_passes_per_step

    @property
    def base_lr(self) -> float:
        return self.settings.optimizer.base_lr

    @property
    def base_batch_size(self) -> int:
        return self.settings.optimizer.base_batch_size

    @property
    def lr_scaling(self) -> str:
        return self.settings.schedule.scaling.value

    @property
    def fusion_threshold_bytes(self) -> int | None:
        kb = self.settings.horovod.fusion_threshold_kb
        return None if kb is None else kb * 1024

    @property
    def precision(self) -> str:
        """train.precision: the ranks' Keras dtype policy."""
        return self.settings.train.precision.value

    @property
    def jit_compile(self) -> bool:
        """train.jit_compile: forward and backward pass compiled by XLA."""
        return self.settings.train.jit_compile

    @property
    def stops_early(self) -> bool:
        """True when this run trains only the first epochs of a longer schedule."""
        return self.epochs < self.schedule_epochs

    def notes(self) -> list[str]:
        """Legitimate but surprising things about this run, told before it starts: a smoke run
        of a long recipe stops early, possibly inside the warmup; an LR rule off its ground
        (tntrun.planning.lr_rules); a knob that cannot act."""
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
        if self.pin_to_socket and {p.socket for p in self.placements} == {0}:
            notes.append(
                "pin_to_socket=true on nodes of one socket: every rank is bound to socket 0, "
                "which is all of the node (sockets_per_node=1 here)"
            )
        notes += lr_rule_notes(self.lr_rule_inputs())
        if self.gpus_per_node == 0 and self.settings.horovod.hierarchical_allreduce:
            notes.append(
                "horovod.hierarchical_allreduce=true has no effect on CPU ranks (gpus=0): "
                "Horovod's hierarchical allreduce is NCCL's, so the allreduce stays flat"
            )
        return notes

    def lr_rule_inputs(self) -> LrRuleInputs:
        """What the notes on the LR scaling rule read (tntrun.planning.lr_rules)."""
        return LrRuleInputs(
            optimizer=None if self.settings.optimizer.target else self.settings.optimizer.name,
            scaling=self.lr_scaling,
            effective_batch=self.effective_batch_size,
            base_batch=self.base_batch_size,
            scaled_lr=self.scaled_lr,
            warmup_epochs=self.schedule.warmup_steps / self.steps_per_epoch,
        )

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
