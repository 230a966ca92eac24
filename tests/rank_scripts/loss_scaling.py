"""Run under ``horovodrun -np 2``: mixed_float16 loss scaling composed with Horovod.

1. tntrun's order (HorovodLossScaleOptimizer) hands Horovod the unscaled
   gradients and returns their rank average; Keras' own wrapping of Horovod's
   optimizer (model.compile under mixed_float16) hands it 2^15 x them.
2. One rank overflowing makes every rank skip the step and halve its loss scale.
3. The XLA training step (train.jit_compile) takes the same SGD step.
4. The non-finite guard (tntrun.engine.nonfinite) sees the unscaled rank-averaged loss.
Prints one "rank N: ... ok" line per check; exits non-zero on a failed check.
"""

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

from tntrun.engine import precision  # noqa: E402
from tntrun.engine.distributed_optimizer import distributed_optimizer  # noqa: E402

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


def scaled_sgd():
    """tntrun's mixed_float16 optimizer: loss scaling around Horovod's SGD."""
    return precision.with_loss_scaling(distributed_optimizer(keras.optimizers.SGD(0.1)),
                                       "mixed_float16")  # fmt: skip


def record_allreduce(optimizer):
    """The gradients Horovod's allreduce receives, one list per call."""
    horovod = optimizer.inner_optimizer if hasattr(optimizer, "inner_optimizer") else optimizer
    sent, allreduce = [], horovod._allreduce_grads

    def recording(grads, variables):
        sent.append([np.array(g) for g in grads])
        return allreduce(grads, variables)

    horovod._allreduce_grads = recording
    return sent


def gradients(model, optimizer, inputs):
    with tf.GradientTape() as tape:
        loss = loss_fn(y, model(inputs, training=True))
    return optimizer.compute_gradients(loss, model.trainable_variables, tape)


# 1. What the allreduce sees.
model = build()
with tf.GradientTape() as tape:
    loss = loss_fn(y, model(x, training=True))
true_local = [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]
average = [hvd.allreduce(g, op=hvd.Average, name=f"reference.{i}").numpy()
           for i, g in enumerate(true_local)]  # fmt: skip

ours = scaled_sgd()
sent = record_allreduce(ours)
returned = [g.numpy() for g, _ in gradients(model, ours, x)]
assert precision.loss_scale_metrics(ours) == {"loss_scale": 2.0**15}
for got, want in zip(sent[0], true_local, strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-5)
for got, want in zip(returned, average, strict=True):
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-5)
print(f"rank {rank}: allreduced gradients are the unscaled ones ok", flush=True)

keras_default = build()
keras_default.compile(optimizer=distributed_optimizer(keras.optimizers.SGD(0.1)), loss=loss_fn)
sent_by_keras = record_allreduce(keras_default.optimizer)
gradients(keras_default, keras_default.optimizer, x)
ratio = np.abs(sent_by_keras[0][-1]).sum() / np.abs(true_local[-1]).sum()
assert abs(ratio / 2**15 - 1) < 1e-2, ratio
print(f"rank {rank}: Keras' own wrapping allreduces {ratio:.0f} x the gradients ok", flush=True)

# 2. An overflow on one rank: every rank skips the step and halves the loss scale.
model = build()
optimizer = scaled_sgd()
before = [w.copy() for w in model.get_weights()]
bad = x.copy()
if rank == 1:
    bad[0, 0] = np.inf
optimizer.apply_gradients(gradients(model, optimizer, bad))
assert precision.loss_scale_metrics(optimizer) == {"loss_scale": 2.0**14}
assert all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
optimizer.apply_gradients(gradients(model, optimizer, x))  # a good step is applied
assert not all(np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))
print(f"rank {rank}: overflow skipped on every rank, loss scale 16384 ok", flush=True)

# 3. The XLA step (scaled loss differentiated in XLA, unscaled and allreduced outside).
steps = {}
for jit in (False, True):
    model = build()
    start = [w.copy() for w in model.get_weights()]
    model.compile(optimizer=scaled_sgd(), loss=loss_fn)
    if jit:
        precision.compile_gradients_with_xla(model)
    model.train_on_batch(x, y)
    steps[jit] = [w - s for w, s in zip(model.get_weights(), start, strict=True)]
for a, b in zip(steps[False], steps[True], strict=True):
    np.testing.assert_allclose(a, b, rtol=2e-2, atol=1e-5)
print(f"rank {rank}: the XLA step equals the standard step ok", flush=True)

# 4. The non-finite guard's rank-averaged loss is the unscaled one, with and without XLA.
from tntrun.engine.step_agreement import agree_after_each_step  # noqa: E402

local_loss = float(loss_fn(y, build()(x, training=True)))
mean_loss = float(hvd.allreduce(tf.constant(local_loss), op=hvd.Average, name="reference.loss"))
for jit in (False, True):
    model, optimizer = build(), scaled_sgd()
    agreement = agree_after_each_step(optimizer)
    model.compile(optimizer=optimizer, loss=loss_fn)
    if jit:
        precision.compile_gradients_with_xla(model)
    model.train_on_batch(x, y)
    averaged, stop = agreement.read()
    assert abs(averaged - mean_loss) < 1e-2 * mean_loss and not stop, (averaged, mean_loss)
print(f"rank {rank}: the non-finite guard averages the unscaled loss ok", flush=True)
