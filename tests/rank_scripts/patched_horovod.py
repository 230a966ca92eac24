"""Run under ``horovodrun -np 2``: what tntrun's Horovod patches (scripts/horovod/) fix, used
as a user's own script would: ``hvd.broadcast_variables`` of Keras 3 variables, and
horovodrun's runner importing without distutils. Prints one ``RESULT {json}`` line."""

import json
import os
import sys

os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})
if sys.version_info >= (3, 12):
    # As in an environment without setuptools, whose shim alone gave 3.12+ a distutils.
    sys.modules["distutils"] = None

import horovod.runner.launch  # noqa: E402,F401  (imports js_run: distutils before the patch)
import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

hvd.init()
keras.utils.set_random_seed(hvd.rank())  # each rank starts from weights of its own
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3), keras.layers.Dense(2)])


def spread() -> float:
    """The largest difference of any weight between the ranks."""
    flat = np.concatenate([np.ravel(v.numpy()) for v in model.variables])
    gathered = hvd.allgather(tf.constant(flat[None, :])).numpy()
    return float(np.max(gathered.max(axis=0) - gathered.min(axis=0)))


before = spread()
hvd.broadcast_variables(model.variables, root_rank=0)  # Keras 3 Variables, not tf.Variables
result = {
    "rank": hvd.rank(),
    "size": hvd.size(),
    "keras": keras.__version__,
    "tensorflow": tf.__version__,
    "spread_before": before,
    "spread_after": spread(),
}
print("RESULT " + json.dumps(result), flush=True)
