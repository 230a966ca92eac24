"""Model FLOP utilisation of a finished ``model.fit``: achieved FLOP/s over measured peak."""

from __future__ import annotations

from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf

from tntrun.engine.flops import (
    cache_key,
    forward_flops_per_sample,
    measured_matmul_flops,
    read_cached,
    training_flops_per_sample,
)
from tntrun.engine.precision import COMPUTE_DTYPES
from tntrun.planning.plan import DatasetInfo, Plan


def peak_flops_across_ranks(threads: int, ranks_per_node: int, dtype: str = "float32") -> float:
    """Sum over ranks of each rank's ``dtype`` matmul FLOP/s; every rank must call it.

    All ranks use their cached rates only if every rank has one; otherwise all
    measure together (right after one allreduce), so ranks sharing a node
    contend as they do in training. Two allreduces, nothing else collective.
    """
    key = cache_key(threads, ranks_per_node, hvd.local_rank(), dtype)
    cached = tf.constant([0.0 if read_cached(key) is None else 1.0], tf.float64)
    all_cached = bool(hvd.allreduce(cached, op=hvd.Min, name="mfu.cached").numpy()[0])
    local = measured_matmul_flops(
        threads, ranks_per_node, hvd.local_rank(), use_cache=all_cached, dtype=dtype
    )
    total = hvd.allreduce(tf.constant([local], tf.float64), op=hvd.Sum, name="mfu.peak")
    return float(total.numpy()[0])


def format_flops(rate: float) -> str:
    """``1.23e12`` -> ``1.23 TFLOP/s``."""
    for scale, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M")):
        if rate >= scale:
            return f"{rate / scale:.3g} {prefix}FLOP/s"
    return f"{rate:.3g} FLOP/s"


def model_flop_utilisation(
    model: Any, info: DatasetInfo, plan: Plan, steady: dict[str, float]
) -> dict[str, float]:
    """Call on every rank after ``fit``; rank 0 gets the metrics to log (other ranks: {}).

    ``mfu`` = achieved / peak, achieved = 3 x forward FLOPs per sample x global
    batch / steady step time (``steady`` is ``Throughput.steady_state()``),
    peak = the ranks' summed measured matmul FLOP/s in the compute dtype of
    ``plan.precision`` (bfloat16 under mixed_bfloat16). If the model's FLOPs
    cannot be counted, rank 0 prints why and logs only the peak.
    """
    dtype = COMPUTE_DTYPES[plan.precision]
    peak = peak_flops_across_ranks(plan.threads_per_rank, plan.ranks_per_node, dtype)
    if hvd.rank() != 0:
        return {}
    metrics = {"peak_flops_per_s": peak}
    try:
        per_sample = training_flops_per_sample(forward_flops_per_sample(model, info.input_shape))
    except Exception as error:  # a missing metric must not fail the run
        print(f"mfu: skipped, cannot count the model's FLOPs: {error}", flush=True)
        return metrics
    step_ms = steady.get("steady_step_time_ms")
    if not step_ms or per_sample <= 0:
        print("mfu: skipped, no steady step time or zero FLOPs counted", flush=True)
        return metrics
    achieved = per_sample * plan.global_batch_size / (step_ms / 1000.0)
    metrics.update(
        mfu=achieved / peak,
        model_flops_per_sample=per_sample,
        achieved_flops_per_s=achieved,
    )
    print(
        f"mfu {achieved / peak:.3g}: {format_flops(achieved)} achieved of "
        f"{format_flops(peak)} measured matmul peak ({dtype})",
        flush=True,
    )
    return metrics
