"""What the engine's in-process tests share: Keras 3 on TensorFlow, Horovod started as a
world of one rank (this Horovod build initialises over Gloo without horovodrun, and its
collectives then return this rank's own values), a tiny classifier and its data."""

from __future__ import annotations

import os

import numpy as np

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ["KERAS_BACKEND"] = "tensorflow"
tf = require_module("tensorflow")
keras = require_module("keras")

SAMPLES = 16
X = np.random.default_rng(0).normal(size=(SAMPLES, 3)).astype("float32")
Y = (X[:, :1] > 0).astype("float32")


def horovod_of_one_rank():
    """``horovod.tensorflow``, initialised as rank 0 of 1 (once per process)."""
    import horovod.tensorflow as hvd

    if not hvd.is_initialized():
        hvd.init()
    assert (hvd.rank(), hvd.size()) == (0, 1), "an in-process test needs a world of one rank"
    return hvd


def classifier(optimizer: str | keras.optimizers.Optimizer = "sgd") -> keras.Model:
    """A compiled two-layer classifier of :data:`X` (3 features) into :data:`Y`."""
    inputs = keras.Input((3,))
    hidden = keras.layers.Dense(4, activation="relu", name="hidden")(inputs)
    model = keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid", name="out")(hidden))
    model.compile(optimizer=optimizer, loss="binary_crossentropy", metrics=["accuracy"])
    return model


def fit(model: keras.Model, callbacks: list, epochs: int = 1, batch_size: int = 4, **kwargs):
    """``model.fit`` on :data:`X`, :data:`Y` as the ranks run it (no shuffling, silent)."""
    return model.fit(
        X,
        Y,
        batch_size=batch_size,
        epochs=epochs,
        callbacks=callbacks,
        shuffle=False,
        verbose=0,
        **kwargs,
    )
