"""Model FLOPs from TensorFlow's profiler, and this rank's measured matmul FLOP/s.

Convention: one multiply-add is 2 FLOPs (TensorFlow's profiler counts a
MatMul as 2·m·n·k and a convolution as 2 · outputs · kernel volume), so
ResNet-50 at 224x224, "4.1 GMACs", is about 8.2e9 FLOPs per image.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import math
import os
import platform
import socket
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import tensorflow as tf

from tntrun.contract.user_cache import cache_dir

# Training FLOPs per sample = 3 x forward: the backward pass costs about twice the
# forward (gradients of activations and of weights), the usual MFU convention
# (PaLM, Appendix B; Lightning's ThroughputMonitor).
TRAINING_FLOPS_PER_FORWARD = 3
# Ops whose FLOPs dominate; their shapes must be static or the count would be short.
HEAVY_OPS = frozenset(
    {
        "MatMul",
        "BatchMatMul",
        "BatchMatMulV2",
        "BatchMatMulV3",
        "Einsum",
        "Conv2D",
        "Conv3D",
        "DepthwiseConv2dNative",
    }
)
# Ops that run function bodies the profiler does not look into.
FUNCTION_OPS = frozenset(
    {
        "PartitionedCall",
        "StatefulPartitionedCall",
        "While",
        "StatelessWhile",
        "If",
        "StatelessIf",
        "Case",
        "StatelessCase",
    }
)
CACHE_FILE = "matmul_flops.json"


def input_specs(model: Any, input_shape: Sequence[int]) -> list[tf.TensorSpec]:
    """Batch-of-1 specs of ``model.inputs``; unknown dims come from the dataset's ``input_shape``.

    The Transformer's ``(source, target)`` token inputs of shape (None, None)
    become (1, max_length) each.
    """
    specs = []
    for tensor in model.inputs:
        dims = []
        for i, dim in enumerate(tensor.shape[1:]):
            if dim is None:
                if i >= len(input_shape):
                    raise ValueError(f"input {tensor.name} has an unknown dimension {i + 1}")
                dim = int(input_shape[i])
            dims.append(int(dim))
        specs.append(tf.TensorSpec([1, *dims], tensor.dtype))
    return specs


def _einsum_flops(op: tf.Operation) -> int:
    """2 x the product of all index sizes of a two-operand Einsum (the profiler skips Einsum)."""
    equation = op.get_attr("equation").decode()
    operands = equation.split("->")[0].split(",")
    if len(operands) != 2 or "." in equation:
        raise ValueError(f"cannot count the FLOPs of {op.name} (einsum {equation!r})")
    sizes: dict[str, int] = {}
    for labels, tensor in zip(operands, op.inputs, strict=True):
        sizes.update(zip(labels, tensor.shape.as_list(), strict=True))
    return 2 * math.prod(sizes.values())


def _check_countable(graph: tf.Graph) -> None:
    for op in graph.get_operations():
        if op.type in FUNCTION_OPS:
            raise ValueError(f"{op.name} ({op.type}) runs a function the profiler cannot count")
        if op.type in HEAVY_OPS:
            for tensor in (*op.inputs, *op.outputs):
                if not tensor.shape.is_fully_defined():
                    raise ValueError(f"{op.name} ({op.type}) has an unknown shape {tensor.shape}")


@contextlib.contextmanager
def _quiet_tf_logging() -> Iterator[None]:
    """Silence the profiler's deprecation warnings."""
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel("ERROR")
    try:
        yield
    finally:
        logger.setLevel(level)


def structured_inputs(model: Any, xs: list[Any]) -> Any:
    """``xs`` (in ``model.inputs``' order) as the model takes them: one tensor, a list, or a
    dict by input name for a model built on a dict of inputs (Keras warns at a list)."""
    if len(xs) == 1:
        return xs[0]
    try:
        structure = model.input
    except (AttributeError, ValueError):  # a subclassed model: no symbolic inputs
        return xs
    return tf.nest.pack_sequence_as(structure, xs) if isinstance(structure, Mapping) else xs


def forward_flops_per_sample(
    model: Any, inputs: Sequence[int] | tf.TensorSpec | Sequence[tf.TensorSpec]
) -> float:
    """FLOPs of one inference-mode forward pass ``model(x, training=False)`` for a batch of 1.

    ``inputs`` is the dataset's ``input_shape`` (it fills the model's unknown
    dims, e.g. the Transformer's sequence length) or explicit specs, one per
    model input (their batch dim is set to 1). Counted by TensorFlow's profiler
    (``float_operation``: MatMul, convolutions, pooling, bias adds and other
    element-wise arithmetic; not ReLU or fused BatchNorm) plus two-operand
    Einsums, which the profiler does not know. 2 FLOPs per multiply-add.
    """
    given = [inputs] if isinstance(inputs, tf.TensorSpec) else list(inputs)
    if given and all(isinstance(s, tf.TensorSpec) for s in given):
        specs = [tf.TensorSpec([1, *s.shape[1:]], s.dtype) for s in given]
    else:
        specs = input_specs(model, given)

    def forward(*xs):
        return model(structured_inputs(model, list(xs)), training=False)

    graph = tf.function(forward).get_concrete_function(*specs).graph
    _check_countable(graph)
    builder = tf.compat.v1.profiler.ProfileOptionBuilder
    options = builder(builder.float_operation()).with_empty_output().build()
    with _quiet_tf_logging():
        profile = tf.compat.v1.profiler.profile(graph, options=options)
    einsums = sum(_einsum_flops(op) for op in graph.get_operations() if op.type == "Einsum")
    return float(profile.total_float_ops + einsums)


def training_flops_per_sample(forward_flops: float) -> float:
    """FLOPs of one training sample: forward + backward = 3 x forward (see the constant)."""
    return TRAINING_FLOPS_PER_FORWARD * forward_flops


def matmul_flops_per_s(
    size: int = 1024, seconds: float = 0.75, repeats: int = 3, dtype: str = "float32"
) -> float:
    """FLOP/s of ``dtype`` ``size`` x ``size`` matmuls on this process's default device.

    A chain of matmuls (each result RMS-normalised, so values stay finite and
    never denormal) runs in one ``tf.function`` for about ``seconds / repeats``
    per repeat, after a warm-up; the fastest repeat counts 2·size³ FLOPs per
    matmul (other load on the machine only ever slows a repeat down, and a
    peak that is too low would stay cached). Uses the process's TensorFlow
    thread settings. ``dtype`` is the precision's compute dtype (float32,
    bfloat16 or float16): the peak of the arithmetic the model runs.
    """
    a = tf.cast(tf.random.stateless_normal((size, size), seed=(1, 2)), dtype)
    b = tf.cast(tf.random.stateless_normal((size, size), seed=(3, 4)), dtype)

    @tf.function
    def chain(x: tf.Tensor, steps: tf.Tensor) -> tf.Tensor:
        def body(i, x):
            y = tf.matmul(a, x)
            return i + 1, y * tf.math.rsqrt(tf.reduce_mean(tf.square(y)))

        return tf.reduce_sum(tf.while_loop(lambda i, _: i < steps, body, (0, x))[1])

    def timed(steps: int) -> float:
        start = time.perf_counter()
        chain(b, tf.constant(steps)).numpy()  # .numpy() waits for the device
        return time.perf_counter() - start

    timed(1)  # trace and warm up
    per_step = timed(2) / 2
    steps = max(1, round(seconds / repeats / per_step))
    best = min(timed(steps) for _ in range(repeats))
    return 2.0 * size**3 * steps / best


def cache_path() -> Path:
    """``$XDG_CACHE_HOME/tntrun/matmul_flops.json`` (default ``~/.cache``)."""
    return cache_dir() / CACHE_FILE


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _device() -> str:
    gpus = tf.config.get_visible_devices("GPU")
    if not gpus:
        return "CPU"
    return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU")


def cache_key(
    threads: int, ranks_per_node: int, local_rank: int = 0, dtype: str = "float32"
) -> str:
    """What a per-rank matmul rate depends on: host, CPU, threads, layout, TF, device, dtype."""
    return (
        f"{socket.gethostname()}|{_cpu_model()}|threads={threads}|"
        f"ranks_per_node={ranks_per_node}|local_rank={local_rank}|tf={tf.__version__}|{_device()}"
        f"|dtype={dtype}"
    )


def read_cached(key: str) -> float | None:
    """The cached FLOP/s for ``key``, or None (also when the cache is missing or unreadable)."""
    try:
        return float(json.loads(cache_path().read_text())[key]["flops_per_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write_cached(key: str, flops_per_s: float) -> None:
    """Record ``key``'s rate; ranks on one host update the file under a lock, atomically."""
    path = cache_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            entries = json.loads(path.read_text())
        except (OSError, ValueError):
            entries = {}
        entries[key] = {
            "flops_per_s": flops_per_s,
            "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        }
        scratch = path.with_suffix(f".{os.getpid()}.tmp")
        scratch.write_text(json.dumps(entries, indent=1, sort_keys=True))
        os.replace(scratch, path)


def measured_matmul_flops(
    threads: int,
    ranks_per_node: int = 1,
    local_rank: int = 0,
    *,
    use_cache: bool = True,
    dtype: str = "float32",
) -> float:
    """This rank's ``dtype`` matmul FLOP/s: cached for its key, else measured (and then cached).

    ``use_cache=False`` measures even when a cached value exists. Ranks that
    share a node must decide alike and measure at the same time, so contention
    is in the number: see ``tntrun.engine.mfu.peak_flops_across_ranks``.
    """
    key = cache_key(threads, ranks_per_node, local_rank, dtype)
    if use_cache and (cached := read_cached(key)) is not None:
        return cached
    measured = matmul_flops_per_s(dtype=dtype)
    try:
        write_cached(key, measured)
    except OSError as error:
        print(f"mfu: could not cache the matmul rate in {cache_path()}: {error}", flush=True)
    return measured
