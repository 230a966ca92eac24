"""The baseline a user would write by hand: Horovod + Keras on digits, no tntrun.

    horovodrun --gloo -np 2 -H localhost:2 python bench/handwritten_horovod.py --epochs 20

Same model (MLP 128-64), data (digits split), global batch 64 and optimizer as
tntrun's default experiment. Rank 0 prints one JSON line with the steady-state
step time (epochs after the first: wall time per step, and the median step
from batch begin to end) and the wall-clock time of the first step.
``--validate`` evaluates the validation split after every epoch on every rank
(as ``validation_data=`` does) and ``--save DIR`` has rank 0 save the trained
model, as tntrun's default experiment does (bench/overhead_cpu.py).
``--exit-now`` ends each rank as tntrun's ranks end (Horovod shut down, then
``os._exit``: no interpreter teardown of TensorFlow).
``--model cnn`` trains tntrun's zoo ``cnn`` (model=cnn: digits as 8x8 images,
two conv-pool blocks, dense 128). ``--check-sync`` allgathers every rank's
final weights; rank 0 prints their checksums and exits 1 unless all are equal.
The Keras 3 version of this script is bench/handwritten_keras3.py.
"""

import argparse
import json
import os
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import horovod.tensorflow as hvd  # noqa: E402
import horovod.tensorflow.keras as hvd_keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import tf_keras as keras  # noqa: E402

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
tf.random.set_seed(42)

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

if args.model == "mlp":
    layers = [
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dropout(0.1),
        keras.layers.Dense(64, activation="relu"),
        keras.layers.Dropout(0.1),
    ]
else:  # tntrun's zoo cnn (models/cnn.py) on digits' 64 features seen as an 8x8 image
    layers = [
        keras.layers.Reshape((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2, padding="same"),
        keras.layers.Conv2D(64, 3, padding="same", activation="relu"),
        keras.layers.MaxPooling2D(2, padding="same"),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
    ]
model = keras.Sequential([keras.Input((64,)), *layers, keras.layers.Dense(10)])
model.compile(
    optimizer=hvd_keras.DistributedOptimizer(keras.optimizers.Adam(0.002)),
    loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    metrics=["accuracy"],
)


class Timer(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self._supports_tf_logs = True
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
hvd.broadcast_variables(model.variables, root_rank=0)
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
    flat = tf.concat([tf.reshape(w, [-1]) for w in model.weights], 0)
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
