"""Per-rank process set-up: Horovod, threads, seeds."""

from __future__ import annotations

import os
import random

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def init(threads_per_rank: int, seed: int, deterministic: bool = False) -> None:
    """Start Horovod, bound TensorFlow's thread pools and seed every RNG the same way."""
    tf.config.threading.set_intra_op_parallelism_threads(threads_per_rank)
    tf.config.threading.set_inter_op_parallelism_threads(threads_per_rank)
    if deterministic:
        tf.config.experimental.enable_op_determinism()
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
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
