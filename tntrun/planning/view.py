"""Human views of a plan: the dry-run table (the learning-rate chart: schedule_chart)."""

from __future__ import annotations

import shlex

import numpy as np

from tntrun.planning.plan import SELF_BINDING, Plan
from tntrun.planning.schedules import learning_rate

# train.precision as the dry run describes it.
PRECISIONS = {
    "float32": "float32",
    "mixed_bfloat16": "mixed_bfloat16: bfloat16 compute, float32 weights and logits",
    "mixed_float16": "mixed_float16: float16 compute, float32 weights and logits, dynamic loss "
    "scaling (gradients unscaled before the allreduce)",
}


def precision_text(plan: Plan) -> str:
    """The dry run's description of ``train.precision``."""
    text = PRECISIONS.get(plan.precision, plan.precision)
    if plan.precision == "mixed_float16" and not plan.gpus_per_node:
        text += "; slow on CPU (no float16 units), correct"
    return text


Rows = list[tuple[str, str]]  # (what, its value) of the dry-run table


def _rows(plan: Plan) -> Rows:
    """The dry-run table: where the ranks run, the batches, the LR schedule, Horovod's knobs."""
    return _layout_rows(plan) + _batch_rows(plan) + _schedule_rows(plan) + _horovod_rows(plan)


def _layout_rows(plan: Plan) -> Rows:
    return [
        ("world size", f"{plan.world_size} = {plan.nodes} node(s) x {plan.ranks_per_node} ranks"),
        ("hosts:slots", ", ".join(f"{h}:{n}" for h, n in plan.hosts)),
        ("device", f"{plan.gpus_per_node} GPU(s) per node" if plan.gpus_per_node else "CPU"),
        ("threads per rank", str(plan.threads_per_rank)),
        ("precision", precision_text(plan)),
        (
            "XLA (jit_compile)",
            "on: forward and backward pass per rank; allreduce and update outside XLA"
            if plan.jit_compile
            else "off",
        ),
        *_elastic_rows(plan),
    ]


def _elastic_rows(plan: Plan) -> Rows:
    if plan.elastic_nodes is None:
        return []
    low, high = plan.elastic_nodes
    sizes = ", ".join(str(n * plan.ranks_per_node) for n in range(low, high + 1))
    every = plan.settings.elastic.commit_every_steps
    return [
        ("elastic", f"{low}..{high} node(s): world sizes {sizes}, same global batch"),
        ("elastic commits", f"every {every} steps (the most work a lost host costs)"),
    ]


def _batch_rows(plan: Plan) -> Rows:
    """The batches and how far the run goes."""
    rows = [
        (
            "global batch",
            f"{plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size} (micro-batch)",
        ),
        ("validation micro-batch", str(plan.val_micro_batch_size)),
    ]
    if plan.backward_passes_per_step > 1:
        rows.append(
            (
                "effective batch",
                f"{plan.effective_batch_size} = {plan.global_batch_size}"
                f" x {plan.backward_passes_per_step} backward passes",
            )
        )
    rows += [
        ("samples (train / val)", f"{plan.num_train} / {plan.num_val}"),
        ("steps per epoch", str(plan.steps_per_epoch)),
        ("epochs / total steps", f"{plan.epochs} / {plan.total_steps}"),
    ]
    if plan.stops_early:
        rows.append(
            (
                "schedule length",
                f"{plan.schedule_epochs} epochs ({plan.schedule.total_steps} steps);"
                f" this run stops after epoch {plan.epochs}",
            )
        )
    return rows


def _schedule_rows(plan: Plan) -> Rows:
    """The learning rate: scaled how, warmed up and decayed when, its value at key steps."""
    s = plan.schedule
    rows = [
        ("optimizer steps", str(plan.optimizer_steps)),
        ("base LR", f"{plan.base_lr:g} at batch {plan.base_batch_size}"),
        (
            "scaled LR",
            f"{plan.scaled_lr:g} ({plan.lr_scaling} scaling to batch {plan.effective_batch_size})",
        ),
        ("schedule", s.name),
    ]

    rows += _warmup_and_decay_rows(plan)
    steps = s.key_steps()
    lrs = learning_rate(np.array(steps), s)
    rows.append(
        ("LR at steps", ", ".join(f"{st}: {lr:.4g}" for st, lr in zip(steps, lrs, strict=True)))
    )
    return rows


def _warmup_and_decay_rows(plan: Plan) -> Rows:
    """When the LR warms up, and how it decays after."""
    s = plan.schedule

    def epochs(step: int) -> str:
        return f"{step / plan.steps_per_epoch:g}"

    rows = []
    if s.warmup_steps:
        rows.append(
            (
                "warmup steps",
                f"{s.warmup_steps} ({epochs(s.warmup_steps)} epochs) from LR {s.warmup_start_lr:g}",
            )
        )
    if s.boundaries:
        rows.append(
            (
                "decay steps",
                f"{', '.join(map(str, s.boundaries))} (epochs "
                f"{', '.join(map(epochs, s.boundaries))}; x{s.decay_rate:g})",
            )
        )
    if s.name == "warmup_poly":
        rows.append(
            (
                "decay",
                f"polynomial, power {s.power:g}, to LR {s.final_lr:g} at step {s.total_steps}"
                f" (epoch {epochs(s.total_steps)})",
            )
        )
    return rows


def _horovod_rows(plan: Plan) -> Rows:
    """The fusion threshold and each Horovod knob with what it turns into."""
    fusion = plan.fusion_threshold_bytes
    rows = [
        (
            "fusion threshold",
            "Horovod default (128 MiB)"
            if fusion is None
            else "disabled"
            if fusion == 0
            else f"{fusion} bytes",
        )
    ]
    rows += [(f"horovod.{knob.key}", f"{knob.value} -> {knob.describe()}") for knob in plan.horovod]
    return rows


def render_plan(plan: Plan) -> str:
    """The plan table, the rank map, the launch command and its environment."""
    rows = _rows(plan)
    width = max(len(k) for k, _ in rows)
    lines = ["== Plan =="] + [f"{k.ljust(width)}  {v}" for k, v in rows]
    lines += ["", "== Ranks =="]
    for p in plan.placements:
        where = [f"rank {p.rank}", f"host {p.host}", f"local rank {p.local_rank}"]
        if p.socket is not None and plan.bound_by == SELF_BINDING:
            where.append(f"numactl --cpunodebind={p.socket} --membind={p.socket}")
        elif p.socket is not None:
            where.append(f"socket {p.socket}, bound by {plan.bound_by}")
        if p.gpu is not None:
            where.append(f"GPU {p.gpu}")
        lines.append(", ".join(where))
    lines += ["", "== Launch =="]
    lines += [f"{k}={shlex.quote(v)}" for k, v in plan.launch_env]
    lines.append(shlex.join(plan.launch_command))
    return "\n".join(lines)
