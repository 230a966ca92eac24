"""Real 2-rank runs of what users pass beside the data: class weights and a dataset's own
sample weights train as serial single-process Keras does with the same weights on the same
global batches; a two-input, two-output model fed dicts by a function dataset finishes,
its outputs' losses weighted by loss_weights."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.runs import final_weights, run_dir_of, store_uri
from tests.helpers.user_data import TWO_HEADS, WEIGHTED, write_module

pytestmark = pytest.mark.slow

GLOBAL, EPOCHS, LR, SEED = 16, 3, 0.1, 5
CLASS_WEIGHT = {0: 0.5, 2: 3.0}
VAL_LOSSES = ("val_out1_loss", "val_out2_loss", "val_loss")
# Not read by either test: the host's metrics, the gradient noise scale, checkpoints.
UNREAD = (
    "tracking.system_metrics=false",
    "train.gradient_noise_scale=false",
    "checkpoint.every_epochs=0",
)


def run_metrics(workdir, result, key: str) -> list[float]:
    client = MlflowClient(store_uri(workdir))
    run_id = (run_dir_of(result) / "run_id").read_text()
    return [m.value for m in sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)]


def serial_keras(weighted) -> tuple[list[float], list[np.ndarray]]:
    """Plain Keras in this process: the same model and start, SGD at LR, each epoch's
    global batches (tntrun's order for the seed, the last one filled with zero-weight
    padding as train.drop_remainder=false does; the mean over a padded batch counts its
    16 slots, as on the ranks) with the weights computed here: the dataset's weight times
    class_weight[label]."""
    import keras
    import tensorflow as tf

    from tntrun.engine.data import distribute_train

    tf.random.set_seed(SEED)  # as each rank does (runtime.init): tf.data's shuffle seeds
    x, y, w = weighted.arrays()
    n = weighted.N_TRAIN
    weight = w[:n] * np.array([CLASS_WEIGHT.get(int(c), 1.0) for c in y[:n]], "float32")
    model = weighted.build((x.shape[1],), weighted.CLASSES)
    model.compile(
        optimizer=keras.optimizers.SGD(LR),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        weighted_metrics=["accuracy"],
    )
    losses = []
    for epoch in range(EPOCHS):
        ids = tf.data.Dataset.from_tensor_slices((np.arange(n), y[:n]))
        order = distribute_train(  # one process, one global batch a step: the step's samples
            ids,
            num_samples=n,
            micro_batch=GLOBAL,
            steps_per_epoch=math.ceil(n / GLOBAL),
            rank=0,
            size=1,
            seed=SEED,
            first_epoch=epoch,
            epochs=epoch + 1,
            drop_remainder=False,
        )
        steps = [(b[0].numpy(), b[2].numpy()) for b in order]  # ids, 1 or 0 (padding)
        xs = np.stack([x[i] for i, _ in steps])
        ys = np.stack([y[i] for i, _ in steps])
        ws = np.stack([weight[i] * real for i, real in steps])
        batches = tf.data.Dataset.from_tensor_slices((xs, ys, ws))  # each element a batch
        losses.append(model.fit(batches, epochs=1, verbose=0, shuffle=False).history["loss"][0])
    return losses, model.get_weights()


def test_class_and_sample_weights_train_as_serial_keras_on_the_same_global_batches(tmp_path):
    weighted = write_module(tmp_path, "weighted", WEIGHTED)
    result = tntrun_cli(
        tmp_path,
        "model=custom",
        "model._target_=weighted.build",
        "dataset=custom",
        "dataset._target_=weighted.Weighted",
        *(f"+train.class_weight.{c}={v}" for c, v in CLASS_WEIGHT.items()),
        "train.drop_remainder=false",  # 100 samples, global batch 16: the last one padded
        f"global_batch_size={GLOBAL}",
        "optimizer=sgd",
        f"optimizer.base_lr={LR}",
        f"optimizer.base_batch_size={GLOBAL}",
        "optimizer.momentum=0.0",
        f"train.epochs={EPOCHS}",
        f"seed={SEED}",
        "tracking.log_model=false",  # the final weights are written anyway
        *UNREAD,
    )
    assert_succeeded(result)
    losses, weights = serial_keras(weighted)
    assert losses[-1] < losses[0], "the reference learns"
    logged = run_metrics(tmp_path, result, "loss")
    np.testing.assert_allclose(logged, losses, rtol=0, atol=1e-4)
    for ours, serial in zip(final_weights(result), weights, strict=True):
        np.testing.assert_allclose(ours, serial, rtol=0, atol=1e-4)


def test_a_two_input_two_output_model_trains_from_a_function_returning_dict_datasets(tmp_path):
    write_module(tmp_path, "twoheads", TWO_HEADS)
    result = tntrun_cli(
        tmp_path,
        "model=custom",
        "model._target_=twoheads.build",
        "dataset=custom",
        "dataset._target_=twoheads.make",
        "+dataset.num_train=250",  # global batch 32: the last one padded, dicts and all
        "+dataset.num_val=64",
        "+dataset.num_classes=2",
        "+dataset.input_shape={a:[3],b:[2]}",
        "train.drop_remainder=false",
        "global_batch_size=32",
        "optimizer.base_lr=0.02",  # Adam's, stated at 64: 0.01 at 32
        "loss={out1:sparse_categorical_crossentropy,out2:sparse_categorical_crossentropy}",
        "loss_weights={out1:1.0,out2:0.5}",
        "train.epochs=4",
        *UNREAD,  # the MLflow Model folder stays: its load check is read
    )
    out = result.stdout + result.stderr
    assert_succeeded(result)
    assert "tntrun: run FINISHED" in out and "tntrun: warning" not in out
    loads = json.loads((run_dir_of(result) / "model_loads.json").read_text())
    assert loads["loads"], loads  # its dict outputs predicted alike after loading back
    for head in ("out1", "out2"):
        accuracy = run_metrics(tmp_path, result, f"val_{head}_accuracy")
        assert len(accuracy) == 4 and accuracy[-1] > 0.8, (head, accuracy)
    # The loss the model trains on weighs its outputs' losses as loss_weights says.
    out1, out2, total = (run_metrics(tmp_path, result, k) for k in VAL_LOSSES)
    np.testing.assert_allclose(total, np.add(out1, 0.5 * np.asarray(out2)), rtol=1e-5)
