"""The user states the training (issue 41), on two real ranks through the CLI: the loss,
metrics and optimizer from the config or from the user's compiled model, a loss that does
not fit the data refused in one line, and the files a run writes loading without tntrun.

The user's model and dataset modules are written into the test's working directory, as a
user's would be.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.runs import run_dir_of, store_uri, weights_in

pytestmark = pytest.mark.slow
# No test here reads the system metrics, the step metrics or a model logged as an MLflow
# Model (rank 0 saves it and loads it back; model.keras is written either way).
QUIET = (
    "train.epochs=2",
    "tracking.system_metrics=false",
    "tracking.log_every_steps=0",
    "tracking.log_model=false",
)

USER_CODE = dedent(
    '''
    import keras
    import numpy as np

    from tntrun.datasets.base import DatasetInfo


    def softmax_net(input_shape, num_classes):
        return keras.Sequential(
            [
                keras.Input(shape=input_shape),
                keras.layers.Dense(16, activation="relu"),
                keras.layers.Dense(num_classes, activation="softmax"),
            ]
        )


    def compiled_net(input_shape, num_classes):
        model = softmax_net(input_shape, num_classes)
        model.compile(
            optimizer=keras.optimizers.AdamW(0.003),
            loss="sparse_categorical_crossentropy",
            metrics=["accuracy", keras.metrics.SparseTopKCategoricalAccuracy(k=2, name="top2")],
        )
        return model


    def one_unit(input_shape, num_classes):
        return keras.Sequential([keras.Input(shape=input_shape), keras.layers.Dense(1)])


    def regressor(input_shape, num_classes):
        return keras.Sequential([keras.Input(shape=input_shape), keras.layers.Dense(1)])


    def regression_arrays():
        rng = np.random.default_rng(0)
        x = rng.normal(size=(403, 5)).astype("float32")
        y = (x @ np.arange(1, 6, dtype="float32") + 0.1 * rng.normal(size=403)).astype("float32")
        return x[:320], y[:320, None], x[320:], y[320:, None]


    class Regression:
        """320 training and 83 validation samples of a noisy linear function."""

        def info(self):
            return DatasetInfo(num_train=320, num_val=83, input_shape=(5,), num_classes=1)

        def load(self):
            import tensorflow as tf

            x, y, x_val, y_val = regression_arrays()
            return (
                tf.data.Dataset.from_tensor_slices((x, y)),
                tf.data.Dataset.from_tensor_slices((x_val, y_val)),
            )
    '''
)


@pytest.fixture
def user_dir(tmp_path: Path) -> Path:
    (tmp_path / "usercode.py").write_text(USER_CODE)
    return tmp_path


def finished_run(tmp_path: Path, result: subprocess.CompletedProcess):
    assert_succeeded(result)
    client = MlflowClient(tracking_uri=store_uri(tmp_path))
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert run.info.status == "FINISHED"
    return run


def rank_logs(run_dir: Path) -> str:
    return "\n".join(p.read_text() for p in sorted((run_dir / "logs").rglob("*")) if p.is_file())


def test_a_compiled_model_keeps_its_metrics_and_optimizer_and_the_config_its_loss(
    run_tntrun, user_dir
):
    """The builder compiled AdamW, top-2 accuracy and a loss; the config states the loss
    with from_logits=True on the model's softmax: one note, not a warning on every rank."""
    result = run_tntrun(
        "model=custom",
        "model._target_=usercode.compiled_net",
        "loss={_target_:keras.losses.SparseCategoricalCrossentropy,from_logits:true}",
        *QUIET,
    )
    run = finished_run(user_dir, result)
    note = "model._target_=usercode.compiled_net returns a compiled model: its metrics, optimizer"
    assert result.stdout.count(note) == 1, result.stdout[-3000:]
    assert "AdamW, averaged over the ranks" in result.stdout
    assert result.stdout.count("the loss says from_logits=True but the model's outputs") == 1
    assert "received `from_logits=True`" not in rank_logs(run_dir_of(result))
    assert {"val_top2", "top2", "val_accuracy"} <= set(run.data.metrics)
    precision = json.loads((run_dir_of(result) / "precision.json").read_text())
    assert (precision["optimizer"], precision["data_parallel"]) == ("AdamW", True)


def loads_without_tntrun(where: Path, *files: Path) -> str:
    """Load each ``.keras`` file in a Python where importing tntrun fails; what it printed."""
    load = dedent(
        """
        import sys
        sys.modules["tntrun"] = None  # any import of tntrun fails
        import keras
        for path in sys.argv[1:]:
            optimizer = getattr(keras.saving.load_model(path), "optimizer", None)
            print(path, type(optimizer).__name__)
        """
    )
    loaded = subprocess.run(
        [sys.executable, "-c", load, *map(str, files)],
        capture_output=True,
        text=True,
        cwd=where,
        timeout=120,
    )
    assert_succeeded(loaded)
    assert "Skipping variable loading" not in loaded.stderr, loaded.stderr[-3000:]
    return loaded.stdout


def keras_evaluation(user_dir: Path, weights: list[np.ndarray]) -> dict[str, float]:
    """Single-process Keras' mse and mae of ``weights`` on the whole validation set."""
    sys.path.insert(0, str(user_dir))
    try:
        import usercode  # the test's own copy of the user's module

        model = usercode.regressor((5,), 1)
        model.compile(loss="mse", metrics=["mae"])
        model.set_weights(weights)
        _, _, x_val, y_val = usercode.regression_arrays()
        return model.evaluate(x_val, y_val, batch_size=83, verbose=0, return_dict=True)
    finally:
        sys.path.remove(str(user_dir))
        sys.modules.pop("usercode", None)


def test_an_adamw_regression_equals_keras_and_its_files_load_without_tntrun(run_tntrun, user_dir):
    saved = user_dir / "user_checkpoint.keras"
    result = run_tntrun(
        "model=custom",
        "model._target_=usercode.regressor",
        "dataset=custom",
        "dataset._target_=usercode.Regression",
        "loss=mse",
        "metrics=[mae]",
        "optimizer=adamw",
        "optimizer.base_lr=0.3",
        "optimizer.base_batch_size=16",
        "global_batch_size=16",
        f"+callbacks.ckpt={{_target_:keras.callbacks.ModelCheckpoint,filepath:{saved}}}",
        *QUIET,
    )
    run = finished_run(user_dir, result)
    assert run.data.params["optimizer.name"] == "adamw"
    serial = keras_evaluation(user_dir, weights_in(run_dir_of(result)))
    np.testing.assert_allclose(run.data.metrics["val_mae"], serial["mae"], rtol=1e-5)
    np.testing.assert_allclose(run.data.metrics["val_loss"], serial["loss"], rtol=1e-5)
    # It learnt: predicting the mean gives an MAE of about 6 (the labels' deviation is 7.4).
    assert run.data.metrics["val_mae"] < 2.0
    printed = loads_without_tntrun(user_dir, saved, run_dir_of(result) / "model.keras")
    assert f"{saved} AdamW" in printed, printed


def test_a_loss_that_does_not_fit_the_output_fails_in_one_line(run_tntrun, user_dir):
    result = run_tntrun("model=custom", "model._target_=usercode.one_unit", *QUIET)
    assert_exit(result, 1)
    expected = (
        "loss=sparse_categorical_crossentropy: sparse cross-entropy needs one output unit per "
        "class; the output has 1"
    )
    assert f"tntrun: run FAILED: {expected}" in result.stdout
    assert "Traceback" not in result.stdout + result.stderr
    client = MlflowClient(tracking_uri=store_uri(user_dir))
    (run,) = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    assert run.info.status == "FAILED"
    assert run.data.tags["failure.loss_setup"].startswith(expected)
