"""The training plan: every number and command derived from the config, before launch.

Pure: no TensorFlow, no I/O besides reading ``os.cpu_count``-like facts passed in.
A :class:`Plan` is immutable and serialises to JSON so the ranks read the exact
numbers the driver showed.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LR_SCALINGS = ("linear", "sqrt", "none")


class PlanError(ValueError):
    """A config value that cannot produce a valid plan; the message names key and fix."""


@dataclass(frozen=True)
class DatasetInfo:
    """What the planner needs to know about a dataset (computed without TensorFlow)."""

    num_train: int
    num_val: int
    input_shape: tuple[int, ...]
    num_classes: int


@dataclass(frozen=True)
class Plan:
    """Immutable derived plan of one training run."""

    nodes: int
    ranks_per_node: int
    world_size: int
    hosts: tuple[tuple[str, int], ...]
    threads_per_rank: int
    global_batch_size: int
    micro_batch_size: int
    val_micro_batch_size: int
    num_train: int
    num_val: int
    steps_per_epoch: int
    epochs: int
    total_steps: int
    base_lr: float
    base_batch_size: int
    lr_scaling: str
    scaled_lr: float
    fusion_threshold_bytes: int | None
    cycle_time_ms: float | None
    launch_command: tuple[str, ...]
    launch_env: tuple[tuple[str, str], ...]

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2)

    @classmethod
    def from_json(cls, text: str) -> Plan:
        raw = json.loads(text)
        raw["hosts"] = tuple(tuple(h) for h in raw["hosts"])
        raw["launch_command"] = tuple(raw["launch_command"])
        raw["launch_env"] = tuple(tuple(kv) for kv in raw["launch_env"])
        return cls(**raw)

    def save(self, path: Path) -> None:
        path.write_text(self.to_json())

    @classmethod
    def load(cls, path: Path) -> Plan:
        return cls.from_json(path.read_text())

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
            "steps_per_epoch",
            "total_steps",
            "scaled_lr",
            "fusion_threshold_bytes",
        )
        return {f"plan.{k}": getattr(self, k) for k in keys}


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


def resolve_hosts(cfg: Mapping[str, Any]) -> tuple[tuple[str, int], ...]:
    """Hosts and their slots (ranks) from ``hosts=[a,b]``, else localhost for one node."""
    nodes, ranks = int(cfg["nodes"]), int(cfg["ranks_per_node"])
    hosts = cfg.get("hosts")
    if hosts:
        if len(hosts) > nodes:
            raise PlanError(
                f"hosts lists {len(hosts)} hosts but nodes={nodes}: "
                f"set nodes={len(hosts)} or list {nodes} host(s)"
            )
        if len(hosts) < nodes:
            raise PlanError(
                f"nodes={nodes} but hosts lists only {len(hosts)}: "
                f"list one host per node, e.g. hosts=[{','.join(f'node{i}' for i in range(nodes))}]"
            )
        return tuple((str(h), ranks) for h in hosts)
    if nodes == 1:
        return (("localhost", ranks),)
    raise PlanError(
        f"nodes={nodes} needs the hosts to run on: give hosts=[h1,h2,...] "
        "or run inside a Slurm allocation"
    )


def ranks_per_node(cfg: Mapping[str, Any]) -> int:
    """Ranks on each node: one per GPU, or ``ranks_per_node`` CPU ranks when gpus=0."""
    gpus = int(cfg["gpus"])
    if gpus < 0:
        raise PlanError(f"gpus={gpus}: give the GPUs per node (0 for CPU ranks)")
    if gpus > 0:
        return gpus
    ranks = int(cfg["ranks_per_node"])
    if ranks < 1:
        raise PlanError(f"ranks_per_node={ranks}: CPU runs need at least 1 rank per node")
    return ranks


def build_plan(
    cfg: Mapping[str, Any],
    data: DatasetInfo,
    *,
    cores_per_node: int,
    python: str,
    horovodrun: str,
    run_dir: Path,
) -> Plan:
    """Derive the plan from a resolved config (a plain nested mapping)."""
    nodes = int(cfg["nodes"])
    if nodes < 1:
        raise PlanError(f"nodes={nodes}: a run needs at least 1 node")
    per_node = ranks_per_node(cfg)
    layout = {**cfg, "ranks_per_node": per_node}
    hosts = resolve_hosts(layout)
    world = nodes * per_node

    global_batch = int(cfg["global_batch_size"])
    if global_batch % world:
        lower = global_batch - global_batch % world
        upper = lower + world
        raise PlanError(
            f"global_batch_size={global_batch} is not divisible by the world size {world}: "
            f"use global_batch_size={lower} or {upper}"
        )
    micro = global_batch // world
    if micro < 1:
        raise PlanError(
            f"global_batch_size={global_batch} gives a micro-batch < 1 on {world} ranks"
        )
    val_micro = int(cfg.get("val_micro_batch_size") or micro)

    train = cfg["train"]
    drop = bool(train.get("drop_remainder", True))
    steps = data.num_train // global_batch if drop else math.ceil(data.num_train / global_batch)
    if steps < 1:
        raise PlanError(
            f"global_batch_size={global_batch} exceeds the {data.num_train} training samples: "
            "lower global_batch_size"
        )
    epochs = int(train["epochs"])
    if epochs < 1:
        raise PlanError(f"train.epochs={epochs}: train for at least 1 epoch")

    opt = cfg["optimizer"]
    scaling = str(cfg["schedule"].get("scaling", "linear"))
    base_lr, base_batch = float(opt["base_lr"]), int(opt["base_batch_size"])
    scaled = scale_learning_rate(base_lr, global_batch, base_batch, scaling)

    hvd = cfg["horovod"]
    fusion_kb = hvd.get("fusion_threshold_kb")
    if fusion_kb is not None and fusion_kb < 0:
        raise PlanError(
            f"horovod.fusion_threshold_kb={fusion_kb}: use 0 to disable fusion or a positive size"
        )
    fusion_bytes = None if fusion_kb is None else int(fusion_kb) * 1024
    cycle = hvd.get("cycle_time_ms")

    threads = cfg.get("threads_per_rank") or max(1, cores_per_node // per_node)
    # Keras 2 on the ranks (Horovod does not average gradients under Keras 3);
    # TensorFlow's C++ start-up chatter off (Python errors still surface).
    env: dict[str, str] = {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "3"}
    if int(cfg["gpus"]) == 0:
        env["CUDA_VISIBLE_DEVICES"] = "-1"  # CPU ranks: keep TensorFlow off any GPU
    if fusion_bytes is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(fusion_bytes)
    if cycle is not None:
        env["HOROVOD_CYCLE_TIME"] = str(cycle)

    command = (
        horovodrun,
        "--gloo",
        "-np",
        str(world),
        "-H",
        ",".join(f"{host}:{slots}" for host, slots in hosts),
        "--start-timeout",
        str(int(hvd.get("start_timeout", 60))),
        python,
        "-m",
        "tntrun.worker",
        str(run_dir),
    )
    return Plan(
        nodes=nodes,
        ranks_per_node=per_node,
        world_size=world,
        hosts=hosts,
        threads_per_rank=int(threads),
        global_batch_size=global_batch,
        micro_batch_size=micro,
        val_micro_batch_size=val_micro,
        num_train=data.num_train,
        num_val=data.num_val,
        steps_per_epoch=steps,
        epochs=epochs,
        total_steps=steps * epochs,
        base_lr=base_lr,
        base_batch_size=base_batch,
        lr_scaling=scaling,
        scaled_lr=scaled,
        fusion_threshold_bytes=fusion_bytes,
        cycle_time_ms=None if cycle is None else float(cycle),
        launch_command=command,
        launch_env=tuple(sorted(env.items())),
    )
