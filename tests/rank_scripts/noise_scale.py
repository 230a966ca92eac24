"""Run under ``horovodrun -np 2`` or ``-np 4``: the gradient noise scale measured on real
ranks, on a linear regression whose |G|^2 and tr(Sigma) are computed exactly from the data.

Usage: ``noise_scale.py <state dir>``. The global batch of an update is 64 on any layout:
2 ranks of 32, or 4 ranks of 8 with 2 accumulated micro-steps and fp16 compression. The
learning rate is 0, so the weights (zero) stay where the exact values are computed.

a. Over 4 epochs (256 updates) the un-smoothed estimates, averaged, against the exact
   values for batches drawn without replacement from the 4096 samples (|G|^2 - tr/(N-1)
   and tr(Sigma) with the N-1 denominator).
b. The ratio of those averages, printed for the test to compare between layouts.
c. The launch on 2 ranks writes a checkpoint (rank 0, tntrun's ``state_checkpoint``); the
   launch on 4 ranks reads it (``read_checkpoint`` and ``broadcast_state``, as a resumed
   run does) and every rank starts from its averages.
d. A step in which one rank's batch holds a zero-weight sample is left out on every rank.

Each rank prints one line ``RESULT {json}``; tests/engine/test_noise_scale_ranks.py asserts.
"""

import os
import sys

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.pop("TF_USE_LEGACY_KERAS", None)

import json  # noqa: E402
from pathlib import Path  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.engine import data_parallel as dp  # noqa: E402
from tntrun.engine.precision import read_checkpoint, state_checkpoint  # noqa: E402

SAMPLES, FEATURES, GLOBAL_BATCH, EPOCHS = 4096, 24, 64, 4

hvd.init()
rank, size = hvd.rank(), hvd.size()
state_dir = Path(sys.argv[1])
passes = 1 if size == 2 else 2
micro = GLOBAL_BATCH // (size * passes)
compression = hvd.Compression.none if size == 2 else hvd.Compression.fp16

rng = np.random.default_rng(0)  # the same data on every rank
x = rng.normal(size=(SAMPLES, FEATURES)).astype("float32")
w_true = rng.normal(size=FEATURES).astype("float32") * 0.3
y = (x @ w_true + 0.5 * rng.normal(size=SAMPLES)).astype("float32")[:, None]


def exact_values() -> tuple[float, float]:
    """The expected estimates at zero weights: per-sample gradients of the squared error,
    kernel and bias, g = -2 y [x, 1]; their mean G and the trace of their covariance."""
    per_sample = -2.0 * y.astype("float64") * np.hstack([x, np.ones((SAMPLES, 1))])
    mean = per_sample.mean(axis=0)
    trace = float(((per_sample - mean) ** 2).sum() / (SAMPLES - 1))
    return float(mean @ mean) - trace / SAMPLES, trace


optimizer = dp.data_parallel(keras.optimizers.SGD(0.0), compression, passes)
agreement = dp.agree_after_each_step(optimizer)
noise = dp.measure_gradient_noise(optimizer, micro * passes, GLOBAL_BATCH, decay=0.95)
model = keras.Sequential(
    [keras.Input((FEATURES,)), keras.layers.Dense(1, kernel_initializer="zeros")]
)
model.compile(optimizer=optimizer, loss="mse", jit_compile=False)
optimizer.build(model.trainable_variables)
restored = None
if size == 4 and rank == 0:
    read_checkpoint(model, optimizer, str(state_dir / "state"))
dp.broadcast_state(model, optimizer)
if size == 4:
    restored = [float(v.numpy()) for v in noise.state_variables()]

data = (
    tf.data.Dataset.from_tensor_slices((x, y))
    .shuffle(SAMPLES, seed=1, reshuffle_each_iteration=True)  # the same order on every rank
    .shard(size, rank)
    .batch(micro, drop_remainder=True)
)
raw: list[tuple[float, float]] = []


class Raw(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if (batch + 1) % passes == 0:
            raw.append(noise.last_estimates())


model.fit(data, epochs=EPOCHS, callbacks=[agreement, Raw()], verbose=0)
estimates = np.array(raw)
steps_after_fit = int(noise.steps.numpy())
if size == 2 and rank == 0:
    state_checkpoint(model, optimizer).write(str(state_dir / "state"))

# d. one rank's batch holds a zero-weight sample: every rank leaves the step out.
weights = np.ones(micro, "float32")
weights[0] = 0.0 if rank == 1 else 1.0
for _ in range(passes):
    model.train_on_batch(x[:micro], y[:micro], sample_weight=weights)
padded_left_out = int(noise.steps.numpy()) == steps_after_fit

gradient_sq, trace = exact_values()
summary = {
    "rank": rank,
    "size": size,
    "updates": len(raw),
    "mean_gradient_sq": float(estimates[:, 0].mean()),
    "mean_trace": float(estimates[:, 1].mean()),
    "exact_gradient_sq": gradient_sq,
    "exact_trace": trace,
    "smoothed": noise.metrics(),
    "state": [float(v.numpy()) for v in noise.state_variables()],
    "steps_after_fit": steps_after_fit,
    "restored": restored,
    "padded_left_out": padded_left_out,
}
print("RESULT " + json.dumps(summary), flush=True)
