"""Metrics exact across ranks, one model on every rank (BatchNormalization included) and
synchronised batch statistics, on two real Gloo ranks.

One horovodrun launch of tests/rank_scripts/exact_metrics.py: each rank prints a JSON summary
of every check, asserted here.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import rank_summaries, tntrun_cli
from tests.helpers.components import require_module
from tests.helpers.paths import RANK_SCRIPTS
from tests.helpers.runs import run_dir_of
from tntrun.contract import run_files
from tntrun.contract.metrics import last_values

pytestmark = pytest.mark.slow
SCRIPT = RANK_SCRIPTS / "exact_metrics.py"
EXACT = 1e-6
STATE_METRICS = ("loss", "auc", "precision", "recall", "f1")


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    """Each rank's summary, indexed by rank."""
    return rank_summaries(SCRIPT)


def test_validation_metrics_equal_one_process_evaluating_the_whole_set(ranks):
    for summary in ranks:
        check = summary["validation"]
        assert set(check["difference"]) == set(STATE_METRICS), check
        assert max(check["difference"].values()) < EXACT, check
        # The shards' results averaged (the old way) are off: the comparison can tell
        # (measured: precision and AUC about 1e-3 off, loss 2e-8: a mean).
        off = check["averaged_results_difference"]
        assert max(off[k] for k in ("auc", "precision", "recall", "f1")) > 100 * EXACT, check
    assert ranks[0]["validation"]["logged"] == ranks[1]["validation"]["logged"]


def test_training_metrics_are_reduced_from_state_and_other_logs_averaged(ranks):
    for summary in ranks:
        check = summary["train_metrics"]
        assert set(check["difference"]) == set(STATE_METRICS), check
        assert max(check["difference"].values()) < EXACT, check
        assert check["epoch_time_s"] == 1.5, check  # (1 + 2) / 2: not a metric, averaged


def test_a_rank_without_validation_samples_contributes_nothing(ranks):
    for summary in ranks:
        check = summary["zero_samples"]
        assert check["keys"] == sorted(f"val_{k}" for k in STATE_METRICS), check
        assert max(check["difference"].values()) < EXACT, check


def test_moving_statistics_are_averaged_at_each_epoch_end_and_guarded(ranks):
    for summary in ranks:
        check = summary["moving_statistics"]
        assert min(check["before_averaging"]) > 1e-4, check  # the ranks' batches differ
        assert check["after_training"] == 0.0, check
        assert check["guard_final_spread"] == 0.0, check
        assert "ranks' weights diverged after epoch 100" in check["fired"], check
        assert check["spread_after_averaging"] == 0.0, check


def test_sync_batch_norm_trains_as_one_process_on_the_global_batch(ranks):
    for summary in ranks:
        check = summary["sync_batch_norm"]
        assert check["synced_vs_one_process"] < 1e-5, check
        assert check["synced_rank_spread"] < 1e-6, check
        assert check["local_vs_one_process"] > 1e-3, check  # per-rank statistics differ


BN_MODEL = """
import keras


def build(input_shape, num_classes):
    inputs = keras.Input(input_shape)
    hidden = keras.layers.Dense(16, activation="relu")(inputs)
    hidden = keras.layers.BatchNormalization(momentum=0.5)(hidden)
    return keras.Model(inputs, keras.layers.Dense(1, activation="sigmoid")(hidden))
"""


def binary_npz(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A noisy binary problem; 397 validation samples (shards of 199 and 198)."""

    def samples(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(seed)
        x = rng.normal(size=(n, 8)).astype("float32")
        return x, (x[:, 0] + 0.5 * x[:, 1] + rng.normal(size=n) > 0.8).astype("float32")

    (x_train, y_train), (x_val, y_val) = samples(320, 0), samples(397, 1)
    np.savez(path, x_train=x_train, y_train=y_train, x_val=x_val, y_val=y_val)
    return x_val, y_val


def test_a_two_rank_run_logs_what_keras_evaluates_of_its_saved_model(tmp_path):
    """Through the CLI: a BatchNormalization binary classifier with AUC, precision and
    recall; its logged validation metrics equal single-process Keras evaluation of the saved
    final model on the whole set, and the ranks ended with one model (the weight guard,
    which now covers the moving statistics, would fail the run otherwise)."""
    (tmp_path / "bnmodels.py").write_text(BN_MODEL)
    x_val, y_val = binary_npz(tmp_path / "binary.npz")
    result = tntrun_cli(
        tmp_path,
        "model=custom",
        "model._target_=bnmodels.build",
        "dataset=npz",
        f"dataset.path={tmp_path / 'binary.npz'}",
        "loss=binary_crossentropy",
        "metrics=[auc,precision,recall]",
        "optimizer.base_lr=0.01",
        "train.epochs=2",
        "global_batch_size=32",
        # Not read here: the host's metrics, the MLflow Model folder (the final model is
        # written anyway), the gradient noise scale, checkpoints.
        "tracking.system_metrics=false",
        "tracking.log_model=false",
        "train.gradient_noise_scale=false",
        "checkpoint.every_epochs=0",
    )
    assert_succeeded(result)
    run_dir = run_dir_of(result)
    logged = last_values(run_dir / run_files.METRICS)
    assert logged["weights_rank_spread"] == 0.0, logged
    keras = require_module("keras")
    model = keras.saving.load_model(run_dir / run_files.FINAL_MODEL, compile=False)
    model.compile(loss="binary_crossentropy", metrics=["auc", "precision", "recall"])
    want = model.evaluate(x_val, y_val[:, None], batch_size=64, verbose=0, return_dict=True)
    for name, value in want.items():
        assert abs(logged[f"val_{name}"] - value) < EXACT, (name, logged, want)
