"""Horovod's Keras ``DistributedOptimizer`` for tf_keras, without importing Keras 3.

``horovod.tensorflow.keras`` imports the ``keras`` package (Keras 3, which pulls
in pandas, scikit-learn and matplotlib: about 1 s per rank before the first
step) for its callbacks and backend only. Its ``DistributedOptimizer`` is
``horovod._keras.create_distributed_optimizer`` applied to ``tf.keras``, which
is tf_keras under ``TF_USE_LEGACY_KERAS=1``; this calls it the same way.
"""

from __future__ import annotations

from typing import Any

import horovod._keras as horovod_keras
import horovod.tensorflow as hvd
import tf_keras


def distributed_optimizer(
    optimizer: tf_keras.optimizers.Optimizer,
    compression: Any = hvd.Compression.none,
    backward_passes_per_step: int = 1,
    average_aggregated_gradients: bool = True,
) -> tf_keras.optimizers.Optimizer:
    """``optimizer`` averaging its gradients over all ranks (Horovod's defaults otherwise)."""
    return horovod_keras.create_distributed_optimizer(
        keras=tf_keras,
        optimizer=optimizer,
        name=None,
        device_dense="",
        device_sparse="",
        compression=compression,
        sparse_as_dense=False,
        gradient_predivide_factor=1.0,
        op=hvd.Average,
        backward_passes_per_step=backward_passes_per_step,
        average_aggregated_gradients=average_aggregated_gradients,
        groups=None,
        process_set=hvd.global_process_set,
        scale_local_gradients=True,
    )
