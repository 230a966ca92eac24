"""Users' Keras is Keras 3: their own layers, ``keras.ops``, subclassed models and
``train_step`` overrides train data-parallel; a legacy tf_keras model is refused in one line.
"""

from __future__ import annotations

import textwrap

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.runs import run_dir_of, store_uri
from tntrun import api
from tntrun.errors import PlanError

# A user's module in today's Keras: a custom layer written with keras.ops, a subclassed
# model and its own train_step (Keras' guide "Customizing what happens in fit()"). The
# train_step writes a file when Keras traces it, so the test knows the override trained.
OWN_STEP = textwrap.dedent('''
    import os
    from pathlib import Path

    import keras
    import tensorflow as tf
    from keras import ops


    class Gain(keras.layers.Layer):
        """tanh(x) times a learned gain per feature."""

        def build(self, input_shape):
            self.gain = self.add_weight(shape=(input_shape[-1],), initializer="ones")

        def call(self, x):
            return ops.tanh(x) * self.gain


    class Classifier(keras.Model):
        def __init__(self, num_classes, width, **kwargs):
            super().__init__(**kwargs)
            self.hidden = keras.layers.Dense(width, activation="relu")
            self.gain = Gain()
            self.logits = keras.layers.Dense(num_classes)

        def call(self, x, training=False):
            return self.logits(self.gain(self.hidden(x)))

        def train_step(self, data):
            Path(f"own-train-step-{os.getpid()}").touch()
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                loss = self.compute_loss(x=x, y=y, y_pred=y_pred, sample_weight=sample_weight)
                scaled = self.optimizer.scale_loss(loss)
            grads = tape.gradient(scaled, self.trainable_variables)
            self.optimizer.apply_gradients(zip(grads, self.trainable_variables))
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred, sample_weight)
            return {m.name: m.result() for m in self.metrics}


    def build(input_shape, num_classes, width=32):
        return Classifier(num_classes, width)
''')

LEGACY = textwrap.dedent("""
    import tf_keras as keras


    def build(input_shape, num_classes):
        return keras.Sequential([keras.Input(shape=input_shape), keras.layers.Dense(num_classes)])
""")

# The same model, its tf_keras import hidden from the check before launch.
HIDDEN_LEGACY = textwrap.dedent("""
    import importlib


    def build(input_shape, num_classes):
        keras = importlib.import_module("tf_" + "keras")
        return keras.Sequential([keras.Input(shape=input_shape), keras.layers.Dense(num_classes)])
""")

LEGACY_LINE = (
    "this model was built with the legacy tf_keras package; tntrun trains Keras 3: use "
    "`import keras` (and unset TF_USE_LEGACY_KERAS)"
)


def test_a_tf_keras_model_file_is_refused_before_launch(in_tmp):
    (in_tmp / "k2models.py").write_text(LEGACY)
    with pytest.raises(PlanError) as refused:
        api.plan(["model=custom", "model._target_=k2models.build"])
    assert refused.value.problems == [
        "model._target_=k2models.build: k2models.py imports the legacy tf_keras package; "
        "tntrun trains Keras 3: write `import keras` instead (the same layers and Model API)"
    ]


@pytest.mark.slow
def test_a_subclassed_model_with_its_own_train_step_trains_averaged(tmp_path):
    (tmp_path / "k3models.py").write_text(OWN_STEP)
    result = tntrun_cli(
        tmp_path,
        "model=custom",
        "model._target_=k3models.build",
        "train.epochs=4",
        "optimizer.base_lr=0.01",
        "tracking.system_metrics=false",
    )
    assert_succeeded(result)
    assert len(list(tmp_path.glob("own-train-step-*"))) == 2, "each rank traced the override"
    # Keras' guide's subclassed models have no get_config: the weights are still saved.
    assert "tntrun: note: no model.keras: Keras cannot serialise Classifier" in result.stdout
    assert (run_dir_of(result) / "final_weights.npz").is_file()
    run_id = (run_dir_of(result) / "run_id").read_text()
    metrics = MlflowClient(store_uri(tmp_path)).get_run(run_id).data.metrics
    assert metrics["weights_rank_spread"] == 0.0  # the override's updates were averaged
    assert metrics["val_accuracy"] > 0.9, metrics


@pytest.mark.slow
def test_a_tf_keras_model_that_reaches_the_ranks_fails_the_run_in_one_line(tmp_path):
    """On one rank: the refusal is each rank's own at build time, reported by the driver."""
    (tmp_path / "k2models.py").write_text(HIDDEN_LEGACY)
    result = tntrun_cli(
        tmp_path, "model=custom", "model._target_=k2models.build", "ranks_per_node=1"
    )
    out = result.stdout + result.stderr
    assert result.returncode != 0, out[-3000:]
    assert f"tntrun: config error: model._target_=k2models.build: {LEGACY_LINE}" in out
    assert "<stderr>:Traceback" not in out  # no rank's (horovodrun reports the exit codes)
    run_id = (run_dir_of(result) / "run_id").read_text()
    assert MlflowClient(store_uri(tmp_path)).get_run(run_id).info.status == "FAILED"
