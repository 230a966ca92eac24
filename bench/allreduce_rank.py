"""Rank side of bench/fusion_sweep.py: time one allreduce of ResNet-50's gradient set.

Run under ``horovodrun -np 2``; HOROVOD_FUSION_THRESHOLD is set per run by the caller.
"""

import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.models.resnet import build_resnet  # noqa: E402

hvd.init()
shapes = [v.shape for v in build_resnet((224, 224, 3), 1000, depth=50).trainable_variables]
grads = [tf.random.normal(s, seed=i) for i, s in enumerate(shapes)]


@tf.function
def reduce_all(tensors):
    return [hvd.allreduce(t, op=hvd.Average, name=f"g{i}") for i, t in enumerate(tensors)]


reduce_all(grads)  # trace and warm up
times = []
for _ in range(int(os.environ.get("REPEATS", "7"))):
    start = time.perf_counter()
    out = reduce_all(grads)
    _ = out[-1].numpy()
    times.append(time.perf_counter() - start)
if hvd.rank() == 0:
    floats = sum(int(np.prod(s)) for s in shapes)
    print(
        json.dumps({"tensors": len(shapes), "floats": floats, "median_s": float(np.median(times))}),
        flush=True,
    )
