"""Per-rank process set-up: Horovod, threads, seeds."""

from __future__ import annotations

import os
import random

import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf


class MissingDevice(RuntimeError):
    """A rank that was planned with a GPU and sees none (never a silent fall-back to the CPU)."""


def init(threads_per_rank: int, seed: int, deterministic: bool = False, gpus: int = 0) -> None:
    """Start Horovod, bound TensorFlow's thread pools and seed every RNG the same way.

    With ``gpus`` > 0 the rank must see a GPU, else :class:`MissingDevice`.
    """
    tf.config.threading.set_intra_op_parallelism_threads(threads_per_rank)
    tf.config.threading.set_inter_op_parallelism_threads(threads_per_rank)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    hvd.init()
    found = tf.config.list_physical_devices("GPU")
    if gpus > 0 and not found:
        raise MissingDevice(
            f"gpus={gpus}: TensorFlow on rank {hvd.rank()} ({os.uname().nodename}) sees no GPU "
            f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')}, "
            f"TensorFlow {tf.__version__} built with CUDA: {tf.test.is_built_with_cuda()}): "
            "install tensorflow[and-cuda] (TNTRUN_DEVICE=gpu make setup) or set gpus=0"
        )
    for gpu in found:
        tf.config.experimental.set_memory_growth(gpu, True)
    if found:
        tf.config.set_visible_devices(found[hvd.local_rank() % len(found)], "GPU")
    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)


def check_rank_api() -> None:
    """Announce this rank and make sure tntrun's rank API agrees with Horovod."""
    import socket

    import tntrun

    ours = (tntrun.get_rank(), tntrun.get_size(), tntrun.get_local_rank())
    theirs = (hvd.rank(), hvd.size(), hvd.local_rank())
    if ours != theirs:
        raise RuntimeError(f"tntrun rank API says {ours}, Horovod says {theirs}")
    print(
        f"rank {hvd.rank()}/{hvd.size()}: local rank {hvd.local_rank()}, "
        f"host {socket.gethostname()}, pid {os.getpid()}, master={tntrun.is_master_rank()}",
        flush=True,
    )
