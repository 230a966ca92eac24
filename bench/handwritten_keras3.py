"""The baseline a user would write by hand today: Keras 3 + Horovod's TensorFlow collectives.

    KERAS_BACKEND=tensorflow horovodrun --gloo -np 2 -H localhost:2 \\
        python bench/handwritten_keras3.py --epochs 20 [--model cnn] [--check-sync]

The same training as bench/handwritten_horovod.py (data, model, global batch 64,
Adam at 0.002, flags and the JSON line rank 0 prints), written for Keras 3:
Horovod's Keras layer does not average under Keras 3 (horovod#4290), so the
model's ``train_step`` (Keras' guide to customising ``fit`` with TensorFlow)
averages the gradients with ``hvd.grouped_allreduce`` before
``optimizer.apply``, and rank 0's weights and optimizer state are broadcast
before training. XLA stays off: Horovod's ops are not XLA ops.
``--model cnn`` trains tntrun's zoo ``cnn`` (model=cnn: digits as 8x8 images,
two conv-pool blocks, dense 128). ``--check-sync`` allgathers every rank's
final weights; rank 0 prints their checksums and exits 1 unless all are equal.
Keras 3 converts the step's logs to floats after every batch once a callback
has ``on_train_batch_end`` (the timer here does; tntrun's step timing too).
"""

import argparse
import json
import os
import time

os.environ.pop("TF_USE_LEGACY_KERAS", None)  # tf.keras, too, is Keras 3
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.datasets.digits import DigitsDataset  # noqa: E402  (the same arrays)

parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=20)
parser.add_argument("--global-batch", type=int, default=64)
parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
parser.add_argument("--validate", action="store_true")
parser.add_argument("--save", default=None)
parser.add_argument("--check-sync", action="store_true")
parser.add_argument("--exit-now", action="store_true")
args = parser.parse_args()

hvd.init()
tf.config.threading.set_intra_op_parallelism_threads(max(1, os.cpu_count() // hvd.size()))
tf.config.threading.set_inter_op_parallelism_threads(max(1, os.cpu_count() // hvd.size()))
keras.utils.set_random_seed(42)

x_train, x_val, y_train, y_val = DigitsDataset()._splits
micro = args.global_batch // hvd.size()
steps = len(x_train) // args.global_batch
train = (
    tf.data.Dataset.from_tensor_slices((x_train, y_train))
    .shuffle(len(x_train), seed=42)
    .shard(hvd.size(), hvd.rank())
    .batch(micro, drop_remainder=True)
    .take(steps)
    .repeat()
    .prefetch(tf.data.AUTOTUNE)
)


class AveragedModel(keras.Model):
    """Keras' own step with the gradients averaged over the ranks."""

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_variables)
        if hvd.size() > 1:  # as Horovod's DistributedOptimizer: no collective on 1 rank
            grads = hvd.grouped_allreduce(grads, op=hvd.Average)
        self.optimizer.apply(grads, self.trainable_variables)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


inputs = keras.Input((64,))
if args.model == "mlp":
    x = keras.layers.Dense(128, activation="relu")(inputs)
    x = keras.layers.Dropout(0.1)(x)
    x = keras.layers.Dense(64, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
else:  # tntrun's zoo cnn (models/cnn.py) on digits' 64 features seen as an 8x8 image
    x = keras.layers.Reshape((8, 8, 1))(inputs)
    for filters in (32, 64):
        x = keras.layers.Conv2D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling2D(2, padding="same")(x)
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(128, activation="relu")(x)
model = AveragedModel(inputs, keras.layers.Dense(10)(x))
model.compile(
    optimizer=keras.optimizers.Adam(0.002),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
    jit_compile=False,
)
model.optimizer.build(model.trainable_variables)
hvd.broadcast_variables([v.value for v in model.weights + model.optimizer.variables], 0)


class Timer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.first_step_at, self.epochs, self.steps = None, [], []

    def on_train_batch_begin(self, batch, logs=None):
        if self.first_step_at is None:
            self.first_step_at = time.time()
        self.step_began = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        if self.epochs:  # steady state: after the first epoch
            self.steps.append(time.perf_counter() - self.step_began)

    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append(time.perf_counter() - self.t)


timer = Timer()
val = tf.data.Dataset.from_tensor_slices((x_val, y_val)).batch(micro) if args.validate else None
model.fit(
    train,
    epochs=args.epochs,
    steps_per_epoch=steps,
    callbacks=[timer],
    verbose=0,
    validation_data=val,
)
if args.save and hvd.rank() == 0:
    model.save(os.path.join(args.save, "model.keras"))
if hvd.rank() == 0:
    steady = timer.epochs[1:] or timer.epochs
    print(
        json.dumps(
            {
                "steady_step_time_ms": 1000 * sum(steady) / (len(steady) * steps),
                "step_p50_ms": 1000 * sorted(timer.steps)[len(timer.steps) // 2],
                "first_step_at": timer.first_step_at,
            }
        ),
        flush=True,
    )
if args.check_sync:
    flat = tf.concat([tf.reshape(w.value, [-1]) for w in model.weights], 0)
    ranks = hvd.allgather(flat[None]).numpy().astype(np.float64)  # one row per rank
    if hvd.rank() == 0:
        sums = [float(np.abs(row).sum()) for row in ranks]
        differ = float(np.abs(ranks - ranks[0]).max())
        print(json.dumps({"weight_checksums": sums, "max_abs_difference": differ}), flush=True)
        if differ != 0.0:
            raise SystemExit("the ranks' weights differ")
if args.exit_now:
    hvd.shutdown()
    os._exit(0)
