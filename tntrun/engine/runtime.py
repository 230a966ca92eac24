"""Per-rank process set-up: Horovod, threads, seeds."""

from __future__ import annotations

import os
import random

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def init(threads_per_rank: int, seed: int) -> None:
    """Start Horovod, bound TensorFlow's thread pools and seed every RNG the same way."""
    tf.config.threading.set_intra_op_parallelism_threads(threads_per_rank)
    tf.config.threading.set_inter_op_parallelism_threads(threads_per_rank)
    hvd.init()
    gpus = tf.config.list_physical_devices("GPU")
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    if gpus:
        tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")
    random.seed(seed)
    np.random.seed(seed)
    tf.random.set_seed(seed)
