"""The peer suite through the real command (issue 41 point 7): ``tntrun optimizer=lamb`` on 2
ranks with a model written into the test's working directory ends with the final weights and
the per-epoch loss of plain single-process Keras at the same global batch.

The serial reference runs in this process: the same builder (it seeds its own initial
weights), Keras' ``Lamb`` by its own name, the digits in tntrun's global order (the same
shuffle on every rank, op seed seed * 100003 + epoch under the global seed ``seed``, batches
of the global batch, the rest dropped).
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import keras
import numpy as np
import pytest
import tensorflow as tf

from tests.helpers.asserts import assert_succeeded
from tests.helpers.peer import TOLERANCE, relative_difference
from tests.helpers.runs import run_dir_of, weights_in
from tntrun.contract.run_files import METRICS
from tntrun.datasets.digits import DigitsDataset

pytestmark = pytest.mark.slow
GLOBAL_BATCH, EPOCHS, SEED, LR = 64, 2, 42, 0.01

PEER_MODEL = """
import keras


def build(input_shape, num_classes):
    keras.utils.set_random_seed(7)  # the initial weights, rebuilt alike by the test
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Dense(32, activation="relu")(inputs)
    x = keras.layers.Dense(32, activation="relu")(x)
    return keras.Model(inputs, keras.layers.Dense(num_classes, activation="softmax")(x))
"""


def peer_model(workdir: Path) -> ModuleType:
    """The model module the run imports, written into ``workdir`` and imported here too."""
    path = workdir / "peer_model.py"
    path.write_text(PEER_MODEL)
    spec = importlib.util.spec_from_file_location("peer_model", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def global_order(train: tf.data.Dataset, samples: int) -> tuple[tf.data.Dataset, int]:
    """tntrun's global batches for every epoch, and the steps per epoch."""
    steps = samples // GLOBAL_BATCH
    epochs = [
        train.shuffle(samples, seed=SEED * 100_003 + epoch, reshuffle_each_iteration=False)
        .batch(GLOBAL_BATCH, drop_remainder=True)
        .take(steps)
        for epoch in range(EPOCHS)
    ]
    stream = epochs[0]
    for epoch in epochs[1:]:
        stream = stream.concatenate(epoch)
    return stream, steps


def serial_lamb(module: ModuleType) -> tuple[list[np.ndarray], list[float]]:
    """Plain Keras: the final weights and per-epoch losses at the global batch."""
    dataset = DigitsDataset()
    info = dataset.info()
    model = module.build(info.input_shape, info.num_classes)
    model.compile(optimizer=keras.optimizers.Lamb(LR), loss="sparse_categorical_crossentropy")
    # A rank seeds TensorFlow with the run's seed before it builds its data (engine/runtime.py),
    # and tf.data's shuffle takes that global seed with its own: the order needs both.
    tf.random.set_seed(SEED)
    batches, steps = global_order(dataset.load()[0], info.num_train)
    history = model.fit(batches, epochs=EPOCHS, steps_per_epoch=steps, verbose=0, shuffle=False)
    return model.get_weights(), history.history["loss"]


def epoch_losses(run_dir: Path) -> list[float]:
    """The per-epoch training loss rank 0 logged (averaged over the ranks), by epoch."""
    losses = {}
    for line in (run_dir / METRICS).read_text().splitlines():
        record = json.loads(line)
        if "loss" in record["metrics"]:
            losses[record["step"]] = record["metrics"]["loss"]
    return [losses[step] for step in sorted(losses)]


def test_tntrun_lamb_on_two_ranks_equals_serial_keras(run_tntrun, tmp_path):
    module = peer_model(tmp_path)
    result = run_tntrun(
        "model=custom",
        "model._target_=peer_model.build",
        "optimizer=lamb",
        f"optimizer.base_lr={LR}",
        f"optimizer.base_batch_size={GLOBAL_BATCH}",
        f"global_batch_size={GLOBAL_BATCH}",
        "ranks_per_node=2",
        f"seed={SEED}",
        f"train.epochs={EPOCHS}",
        "deterministic=true",
        "tracking.system_metrics=false",
    )
    assert_succeeded(result)
    run_dir = run_dir_of(result)
    weights, losses = serial_lamb(module)
    got = weights_in(run_dir)
    assert len(got) == len(weights)
    for ours, serial in zip(got, weights, strict=True):
        assert relative_difference(ours, serial) < TOLERANCE, (
            ours.shape,
            relative_difference(ours, serial),
        )
    assert epoch_losses(run_dir) == pytest.approx(losses, rel=TOLERANCE), (
        epoch_losses(run_dir),
        losses,
    )
    assert losses[-1] < losses[0] * 0.9  # it trained: the comparison has work to do
