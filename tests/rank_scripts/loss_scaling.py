"""Run under ``horovodrun -np 2``: mixed_float16 loss scaling with train.jit_compile.

(tests/rank_scripts/keras3_data_parallel.py proves the averaging of unscaled gradients and
that an overflow on one rank is skipped on every rank; this adds XLA to loss scaling.)
1. The XLA training step (train.jit_compile: the scaled loss differentiated in XLA,
   unscaled, averaged and applied outside) takes the same SGD step as Keras' own.
2. The step agreement (the non-finite guard's rank-averaged loss) carries the unscaled
   loss, with and without XLA.
Prints one "rank N: ... ok" line per check; exits non-zero on a failed check.
"""

import os

os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.engine import data_parallel as dp  # noqa: E402
from tntrun.engine import precision  # noqa: E402
from tntrun.engine.averaging_optimizer import UnscaledLoss  # noqa: E402

hvd.init()
rank = hvd.rank()
precision.set_precision("mixed_float16")
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
rng = np.random.default_rng(rank)  # each rank its own batch
x = rng.normal(size=(16, 4)).astype("float32")
y = rng.integers(0, 3, 16)


def build():
    keras.utils.set_random_seed(0)  # the same initial weights on both ranks
    layers = [keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)]
    return precision.float32_outputs(keras.Sequential(layers), (4,))


def compiled(jit: bool):
    """A model compiled as the trainer compiles it: data-parallel loss-scaled SGD."""
    model = build()
    optimizer = dp.data_parallel(
        precision.with_loss_scaling(keras.optimizers.SGD(0.1), "mixed_float16")
    )
    agreement = dp.agree_after_each_step(optimizer)
    model.compile(optimizer=optimizer, loss=loss_fn, jit_compile=False)
    if jit:
        precision.compile_gradients_with_xla(model)
    dp.broadcast_state(model, optimizer)
    return model, agreement


# 1. The XLA step equals the standard step.
steps = {}
for jit in (False, True):
    model, _ = compiled(jit)
    start = [w.copy() for w in model.get_weights()]
    model.train_on_batch(x, y)
    steps[jit] = [w - s for w, s in zip(model.get_weights(), start, strict=True)]
    assert precision.loss_scale_metrics(model.optimizer) == {"loss_scale": 2.0**15}
for a, b in zip(steps[False], steps[True], strict=True):
    assert np.abs(a).max() > 0
    np.testing.assert_allclose(a, b, rtol=2e-2, atol=1e-5)
print(f"rank {rank}: the XLA step equals the standard step ok", flush=True)

# 2. The agreement's rank-averaged loss is the unscaled one, with and without XLA.
local_loss = float(loss_fn(y, build()(x, training=True)))
mean_loss = float(hvd.allreduce(tf.constant(local_loss), op=hvd.Average, name="reference.loss"))
for jit in (False, True):
    model, agreement = compiled(jit)
    model.train_on_batch(x, y)
    averaged, stop = agreement.read()
    assert abs(averaged - mean_loss) < 1e-2 * mean_loss and not stop, (jit, averaged, mean_loss)
print(f"rank {rank}: the non-finite guard averages the unscaled loss ok", flush=True)


# 3. A train_step of one's own that skips scale_loss is refused at its first step, in one
#    line, instead of training with updates divided by the loss scale.
class OwnStep(keras.Sequential):
    def train_step(self, data):
        features, labels = data
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, self(features, training=True))  # not scaled
        grads = tape.gradient(loss, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss}


keras.utils.set_random_seed(0)
own = OwnStep([keras.Input((4,)), keras.layers.Dense(3, dtype="float32")])
own_optimizer = dp.data_parallel(
    precision.with_loss_scaling(keras.optimizers.SGD(0.1), "mixed_float16")
)
own.compile(optimizer=own_optimizer, loss=loss_fn, jit_compile=False)
try:
    own.fit(x, y, batch_size=16, epochs=1, verbose=0)
    raise AssertionError("an unscaled loss under loss scaling trained")
except UnscaledLoss as refused:
    assert "scale_loss" in str(refused) and "\n" not in str(refused), refused
print(f"rank {rank}: an own train_step without scale_loss is refused ok", flush=True)
