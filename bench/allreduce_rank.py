"""Rank side of bench/fusion_sweep.py and bench/allreduce_wire.py: time allreduces of
ResNet gradient sets.

Run under ``horovodrun -np 2``; HOROVOD_FUSION_THRESHOLD is set per run by the
caller. MODELS (default resnet50) and COMPRESSIONS (default none; fp16 too) pick
what is timed; rank 0 prints one JSON line per (model, compression).
"""

import json
import os
import time

os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.models.resnet import build_resnet  # noqa: E402

DEPTHS = {"resnet18": 18, "resnet50": 50}
COMPRESSION = {"none": hvd.Compression.none, "fp16": hvd.Compression.fp16}

hvd.init()
repeats = int(os.environ.get("REPEATS", "7"))
for model in os.environ.get("MODELS", "resnet50").split(","):
    network = build_resnet((224, 224, 3), 1000, depth=DEPTHS[model])
    shapes = [v.shape for v in network.trainable_variables]
    grads = [tf.random.normal(s, seed=i) for i, s in enumerate(shapes)]
    for compression in os.environ.get("COMPRESSIONS", "none").split(","):

        @tf.function
        def reduce_all(tensors, codec=COMPRESSION[compression], tag=f"{model}.{compression}"):
            return [
                hvd.allreduce(t, op=hvd.Average, name=f"{tag}.g{i}", compression=codec)
                for i, t in enumerate(tensors)
            ]

        reduce_all(grads)  # trace and warm up
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            out = reduce_all(grads)
            _ = out[-1].numpy()
            times.append(time.perf_counter() - start)
        if hvd.rank() == 0:
            floats = sum(int(np.prod(s)) for s in shapes)
            print(
                json.dumps(
                    {
                        "model": model,
                        "compression": compression,
                        "tensors": len(shapes),
                        "floats": floats,
                        "median_s": float(np.median(times)),
                        "times_s": times,
                    }
                ),
                flush=True,
            )
