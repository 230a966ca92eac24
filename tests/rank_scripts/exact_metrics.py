"""Run under ``horovodrun -np 2``: metrics exact across ranks, one model on every rank
(BatchNormalization included) and synchronised batch statistics, with tntrun's own
callbacks and data parallelism on real ranks.

Each rank prints one line ``RESULT {json}`` that tests/engine/test_exact_metrics.py asserts
on; the script itself asserts nothing (a rank failing alone would leave the other waiting).

a. A binary classifier with BatchNormalization, AUC, Precision, Recall and F1 trains 2
   epochs on each rank's shard with tntrun's callbacks; its 2-rank validation metrics
   (397 samples: shards of 199 and 198) against single-process Keras ``evaluate`` of the
   final weights on the whole set, and what averaging the shards' results would report.
b. The training metrics' reduction against ``evaluate`` of the whole training set.
c. A rank with no validation sample, its compiled metrics never built.
d. The moving statistics: apart before the epoch-end averaging, equal after; the weight
   guard fires when they drift.
e. ``sync_batch_norm``: 2 ranks with half batches against one process on the global batch.
"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.pop("TF_USE_LEGACY_KERAS", None)

import json  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.engine import data_parallel as dp  # noqa: E402
from tntrun.engine.collectives import weighted_mean  # noqa: E402
from tntrun.engine.metric_callbacks import AverageTrainMetrics, ShardedValidation  # noqa: E402
from tntrun.engine.model_average import (  # noqa: E402
    AverageNonTrainable,
    average_non_trainable,
    averaged_weights,
)
from tntrun.engine.sync_batch_norm import synchronise_batch_norm  # noqa: E402
from tntrun.engine.weight_sync import WeightSyncGuard  # noqa: E402

FEATURES, N_TRAIN, N_VAL, MICRO = 8, 320, 397, 16
GLOBAL_BN = 16  # (e)'s global batch: each rank's half of it is rank::2 of the global one
hvd.init()
RANK, SIZE = hvd.rank(), hvd.size()


def dataset(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The same ``n`` samples on every rank: a noisy, unbalanced binary problem."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, FEATURES)).astype("float32")
    y = (x[:, 0] + 0.5 * x[:, 1] + rng.normal(scale=1.0, size=n) > 0.8).astype("float32")
    return x, y[:, None]


def batches(x, y, batch: int) -> tf.data.Dataset:
    return tf.data.Dataset.from_tensor_slices((x, y)).batch(batch)


def spread(values: list[np.ndarray]) -> float:
    """Largest difference between the ranks' ``values`` (0.0: identical)."""
    first, second = hvd.allgather_object([np.asarray(v) for v in values])
    return max(float(np.max(np.abs(a - b))) for a, b in zip(first, second, strict=True))


def classifier(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    hidden = keras.layers.BatchNormalization(momentum=0.5)(hidden)
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))


def metrics() -> list:
    return [
        keras.metrics.AUC(name="auc"),
        keras.metrics.Precision(name="precision"),
        keras.metrics.Recall(name="recall"),
        keras.metrics.F1Score(average="micro", threshold=0.5, name="f1"),
    ]


def compiled(model: keras.Model, optimizer) -> keras.Model:
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=metrics())
    return model


class MovingSpread(keras.callbacks.Callback):
    """The ranks' moving statistics' spread at each epoch's end, before the averaging."""

    spreads: list[float] = []

    def on_epoch_end(self, epoch, logs=None):
        self.spreads.append(spread([w.numpy() for w in averaged_weights(self.model)]))


def differences(got: dict, want: dict, prefix: str = "") -> dict[str, float]:
    return {k: abs(float(got[prefix + k]) - float(v)) for k, v in want.items()}


def train_with_tntrun_callbacks(x, y, xv, yv):
    """(a), (b), (d): the classifier trained 2 epochs with tntrun's epoch-end callbacks."""
    model = compiled(classifier(1), dp.data_parallel(keras.optimizers.Adam(0.01)))
    dp.broadcast_state(model, model.optimizer)
    local_val = (xv[RANK::SIZE], yv[RANK::SIZE])
    moving = MovingSpread()
    guard = WeightSyncGuard(every_epochs=1)
    callbacks = [
        moving,
        AverageNonTrainable(),
        guard,
        AverageTrainMetrics(N_TRAIN // SIZE),
        ShardedValidation(batches(*local_val, 32), len(local_val[0])),
    ]
    history = model.fit(
        batches(x[RANK::SIZE], y[RANK::SIZE], MICRO), epochs=2, callbacks=callbacks, verbose=0
    )
    logged = {k: v[-1] for k, v in history.history.items()}
    whole = model.evaluate(batches(xv, yv, 64), verbose=0, return_dict=True)
    shard = model.evaluate(batches(*local_val, 32), verbose=0, return_dict=True)
    averaged = weighted_mean(shard, len(local_val[0]), name="old_way")
    return model, guard, moving, logged, whole, averaged


def train_metrics_check(model, x, y) -> dict:
    """(b): each rank's shard evaluated as training left it, reduced by the callback."""
    model.evaluate(batches(x[RANK::SIZE], y[RANK::SIZE], MICRO), verbose=0)
    logs = {**model.get_metrics_result(), "epoch_time_s": float(RANK + 1)}
    callback = AverageTrainMetrics(N_TRAIN // SIZE)
    callback.set_model(model)
    callback.on_epoch_end(0, logs)
    whole = model.evaluate(batches(x, y, 64), verbose=0, return_dict=True)
    return {"difference": differences(logs, whole), "epoch_time_s": logs["epoch_time_s"]}


def zero_sample_check(model, xv, yv) -> dict:
    """(c): 5 samples on rank 0, none on rank 1, in a fresh model whose metrics rank 1
    never built."""
    fresh = compiled(classifier(1), "sgd")
    fresh.set_weights(model.get_weights())
    local = (xv[:5], yv[:5]) if RANK == 0 else (xv[:0], yv[:0])
    validation = ShardedValidation(batches(*local, 32), len(local[0]))
    validation.set_model(fresh)
    got = validation.evaluate("zero")
    whole = fresh.evaluate(batches(xv[:5], yv[:5], 32), verbose=0, return_dict=True)
    return {"difference": differences(got, whole, "val_"), "keys": sorted(got)}


def guard_check(model, guard) -> dict:
    """(d): a drifted moving mean on rank 1 fires the guard; averaged, it passes again."""
    bn = next(layer for layer in model.layers if isinstance(layer, keras.layers.BatchNormalization))
    bn.moving_mean.assign_add(np.full(bn.moving_mean.shape, RANK * 1e-3, "float32"))
    fired = ""
    try:
        guard.on_epoch_end(99)
    except RuntimeError as err:
        fired = str(err)
    average_non_trainable(model, name="guard_check")
    guard.on_epoch_end(99)
    return {"fired": fired, "spread_after_averaging": guard.final_spread}


def bn_model(seed: int) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((FEATURES,))
    hidden = keras.layers.BatchNormalization(momentum=0.8)(keras.layers.Dense(6)(inputs))
    hidden = keras.layers.Activation("relu")(hidden)
    return keras.Model(inputs, keras.layers.Dense(3)(hidden))


def trained_weights(sync: bool | None, x, y) -> list[np.ndarray]:
    """6 SGD steps on global batches of 16: one process (``sync=None``) or this rank's half
    of each, with BatchNormalization's statistics synchronised or not."""
    model = bn_model(2)
    optimizer = keras.optimizers.SGD(0.2)
    data = batches(x, y, GLOBAL_BN)
    if sync is not None:
        optimizer = dp.data_parallel(optimizer)
        data = batches(x[RANK::SIZE], y[RANK::SIZE], GLOBAL_BN // SIZE)
        if sync:
            synchronise_batch_norm(model)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, jit_compile=False)
    model.fit(data, epochs=1, verbose=0, shuffle=False)
    return [np.asarray(w) for w in model.get_weights()]


def sync_batch_norm_check() -> dict:
    """(e): weights and moving statistics after 6 steps, against one process."""
    rng = np.random.default_rng(7)
    x = (rng.normal(size=(96, FEATURES)) * 3 + 1).astype("float32")
    y = rng.integers(0, 3, 96)
    want = trained_weights(None, x, y)
    synced, local = trained_weights(True, x, y), trained_weights(False, x, y)

    def largest(got):
        return max(float(np.max(np.abs(g - w))) for g, w in zip(got, want, strict=True))

    return {
        "synced_vs_one_process": largest(synced),
        "local_vs_one_process": largest(local),
        "synced_rank_spread": spread(synced),
    }


def main() -> None:
    x, y = dataset(N_TRAIN, 0)
    xv, yv = dataset(N_VAL, 1)
    model, guard, moving, logged, whole, averaged = train_with_tntrun_callbacks(x, y, xv, yv)
    summary = {
        "rank": RANK,
        "size": SIZE,
        "keras": keras.__version__,
        "validation": {
            "logged": {k: float(v) for k, v in logged.items()},
            "whole_set": whole,
            "difference": differences(logged, whole, "val_"),
            "averaged_results_difference": differences(averaged, whole),
        },
        "train_metrics": train_metrics_check(model, x, y),
        "zero_samples": zero_sample_check(model, xv, yv),
        "moving_statistics": {
            "before_averaging": moving.spreads,
            "after_training": spread([w.numpy() for w in averaged_weights(model)]),
            "guard_final_spread": guard.final_spread,
            **guard_check(model, guard),
        },
        "sync_batch_norm": sync_batch_norm_check(),
    }
    print("RESULT " + json.dumps(summary, default=float), flush=True)


main()
