"""Users' data modules the weight and dict-data tests write into their working directory:
a dataset class yielding (x, y, sample_weight) with its model, and a function returning
tf.data datasets of dicts for a two-input, two-output model."""

from __future__ import annotations

import importlib
import os
import sys
import textwrap
from pathlib import Path
from types import ModuleType

# 100 training samples: a global batch of 16 leaves 4, so train.drop_remainder=false pads.
WEIGHTED = textwrap.dedent('''
    """Three blobs with a weight per sample; a small MLP with fixed initial weights."""
    import numpy as np

    from tntrun.datasets.base import DatasetInfo

    N_TRAIN, N_VAL, FEATURES, CLASSES = 100, 37, 6, 3


    def arrays():
        rng = np.random.default_rng(0)
        y = rng.integers(0, CLASSES, N_TRAIN + N_VAL)
        x = (rng.normal(size=(len(y), FEATURES)) + y[:, None]).astype("float32")
        w = rng.uniform(0.2, 2.0, len(y)).astype("float32")
        return x, y, w


    class Weighted:
        def info(self):
            return DatasetInfo(N_TRAIN, N_VAL, (FEATURES,), CLASSES)

        def load(self):
            import tensorflow as tf

            x, y, w = arrays()
            s = N_TRAIN
            return (
                tf.data.Dataset.from_tensor_slices((x[:s], y[:s], w[:s])),
                tf.data.Dataset.from_tensor_slices((x[s:], y[s:], w[s:])),
            )


    def build(input_shape, num_classes):
        import keras

        model = keras.Sequential(
            [
                keras.Input(shape=tuple(input_shape)),
                keras.layers.Dense(8, activation="tanh"),
                keras.layers.Dense(num_classes),
            ]
        )
        rng = np.random.default_rng(1)  # the same start in every process
        start = [rng.normal(0, 0.5, w.shape) for w in model.get_weights()]
        model.set_weights([w.astype("float32") for w in start])
        return model
''')

# A function returning (train, val) of ({"a", "b"}, {"out1", "out2"}) and its model.
TWO_HEADS = textwrap.dedent('''
    """Two named inputs, two named outputs: out1 the sign of a, out2 the sign of b."""
    import numpy as np
    import tensorflow as tf


    def arrays(n, seed):
        rng = np.random.default_rng(seed)
        a = rng.normal(size=(n, 3)).astype("float32")
        b = rng.normal(size=(n, 2)).astype("float32")
        y = {"out1": (a.sum(1) > 0).astype("int64"), "out2": (b.sum(1) > 0).astype("int64")}
        return {"a": a, "b": b}, y


    def make(num_train, num_val, seed=0):
        train = tf.data.Dataset.from_tensor_slices(arrays(num_train, seed))
        val = tf.data.Dataset.from_tensor_slices(arrays(num_val, seed + 1))
        return train, val


    def build(input_shape, num_classes):
        import keras

        a = keras.Input(shape=tuple(input_shape["a"]), name="a")
        b = keras.Input(shape=tuple(input_shape["b"]), name="b")
        h = keras.layers.Dense(16, activation="relu")(keras.layers.Concatenate()([a, b]))
        out1 = keras.layers.Dense(num_classes, activation="softmax", name="out1")(h)
        out2 = keras.layers.Dense(num_classes, activation="softmax", name="out2")(h)
        return keras.Model({"a": a, "b": b}, {"out1": out1, "out2": out2})
''')


def write_module(directory: Path, name: str, source: str) -> ModuleType:
    """``source`` as ``<directory>/<name>.py``, imported fresh from there."""
    (directory / f"{name}.py").write_text(source)
    if str(directory) not in sys.path:
        sys.path.insert(0, str(directory))
    sys.modules.pop(name, None)
    return importlib.import_module(name)


def forget_modules_from(directory: Path) -> None:
    """Drop the modules imported from ``directory`` (a test's user modules), so a later
    import of the same name reads that test's own file."""
    # A string prefix, not Path.is_relative_to: a worker holds TensorFlow's thousands of
    # modules, and building a Path and its parents for each took 0.4 CPU-s per test.
    inside = os.path.join(os.fspath(directory), "")
    for name, module in list(sys.modules.items()):
        if (getattr(module, "__file__", None) or "/").startswith(inside):
            del sys.modules[name]
