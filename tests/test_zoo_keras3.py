"""The model zoo under Keras 3 builds what it builds under tf_keras.

Same parameter counts (the published ones included), the same outputs from the same weights,
a gradient for every weight, the same greedy and beam-search translations, and the same
Transformer outputs under mixed_float16; under Keras 3 the Transformer also saves and loads
(tf_keras's is tests/test_translation_zoo.py's). One process cannot hold both as its Keras, so
tests/rank_scripts/zoo_keras.py runs once per Keras in a subprocess: tf_keras
(``TF_USE_LEGACY_KERAS=1``) first, which writes the weights and inputs both runs use, then
Keras 3 (the variable removed, ``KERAS_BACKEND=tensorflow``); they exchange .npz files.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.components import missing
from tntrun.models.base import uses_legacy_keras
from tntrun.models.transformer import PARAM_SETS

SCRIPT = Path(__file__).parent / "rank_scripts" / "zoo_keras.py"
EOS_ID = 2
# The models the script runs on a batch (the others it only builds).
RUN = [
    "mlp",
    "cnn_digits",
    "cnn",
    "resnet18_small",
    "resnet50_imagenet",
    "transformer_tiny",
    "transformer_post_norm",
    "transformer_decoding",
]
# Without dropout, so their training-mode outputs and gradients compare. Not ResNet-50: its
# ImageNet stem leaves 1x1 maps at the last stage, whose batch statistics (3 values) are
# near-degenerate, and tf_keras's fused BatchNorm and Keras 3's moments round differently
# enough there to differ by 1e-2 (its inference outputs, on moving statistics, agree to 1e-7).
TRAINING_ALIKE = ["mlp", "cnn", "resnet18_small"]
PUBLISHED = {"resnet18_224": 11_689_512, "resnet50_224": 25_557_032}  # torchvision's
# name -> (vocabulary, hyperparameters) of the Transformers the script builds.
TRANSFORMERS = {
    "transformer_tiny": (40, PARAM_SETS["tiny"]),
    "transformer_post_norm": (40, {**PARAM_SETS["tiny"], "num_layers": 1, "pre_norm": False}),
    "transformer_decoding": (40, {**PARAM_SETS["tiny"], "num_layers": 1}),
    "transformer_base": (32000, PARAM_SETS["base"]),
    "transformer_big": (32000, PARAM_SETS["big"]),
}


@dataclass
class Run:
    report: dict[str, Any]
    arrays: dict[str, np.ndarray]


def run_script(out: Path, legacy: bool) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    env.update(KERAS_BACKEND="tensorflow", TF_CPP_MIN_LOG_LEVEL="3")
    if legacy:
        env["TF_USE_LEGACY_KERAS"] = "1"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stderr[-5000:]
    name = "tf_keras" if legacy else "keras"
    report = json.loads((out / f"{name}.json").read_text())
    print(name, report["version"], "seconds:", report["seconds"])
    with np.load(out / f"{name}.npz") as arrays:
        return Run(report, dict(arrays))


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> dict[str, Run]:
    """{"tf_keras": ..., "keras": ...}: what each Keras built and computed."""
    for module in ("tensorflow", "tf_keras", "keras"):
        if importlib.util.find_spec(module) is None:
            missing(f"Python module {module}", "make test installs tntrun's dependencies")
    out = tmp_path_factory.mktemp("zoo_keras")
    return {"tf_keras": run_script(out, legacy=True), "keras": run_script(out, legacy=False)}


def transformer_params(vocab: int, hp: dict[str, Any]) -> int:
    """build_transformer's trainable weights from its architecture (bias-free attention)."""
    d, f = hp["d_model"], hp["filter_size"]
    attention, feed_forward, norm = 4 * d * d, 2 * d * f + f + d, 2 * d
    encoder = hp["num_layers"] * (attention + feed_forward + 2 * norm)
    decoder = hp["num_layers"] * (2 * attention + feed_forward + 3 * norm)
    final_norms = 2 * norm if hp.get("pre_norm", True) else 0
    return vocab * d + encoder + decoder + final_norms


def test_legacy_keras_is_chosen_as_tensorflow_reads_the_variable(monkeypatch):
    for value in ("1", "true", "True"):
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", value)
        assert uses_legacy_keras(), value
    for value in ("0", "false", "", "yes"):
        monkeypatch.setenv("TF_USE_LEGACY_KERAS", value)
        assert not uses_legacy_keras(), value
    monkeypatch.delenv("TF_USE_LEGACY_KERAS")
    assert not uses_legacy_keras()


@pytest.mark.slow
def test_each_run_builds_with_the_keras_its_environment_selects(zoo):
    assert zoo["tf_keras"].report["keras"] == "tf_keras"
    keras3 = zoo["keras"].report
    assert keras3["keras"] == "keras" and keras3["version"].startswith("3.")
    assert keras3["backend"] == "tensorflow"


@pytest.mark.slow
def test_parameter_counts_are_equal_and_the_published_ones(zoo):
    legacy, keras3 = zoo["tf_keras"].report, zoo["keras"].report
    assert keras3["params"] == legacy["params"]
    for name, params in PUBLISHED.items():
        assert keras3["params"][name] == params, name
    for name, (vocab, hp) in TRANSFORMERS.items():
        assert keras3["params"][name] == transformer_params(vocab, hp), name
    # Each weight has the same path and shape (so set_weights maps one to its namesake) and
    # the models have the same layers.
    assert keras3["weights"] == legacy["weights"]
    assert keras3["layers"] == legacy["layers"]
    print({name: f"{count:,}" for name, count in keras3["params"].items()})


@pytest.mark.slow
def test_outputs_are_equal_given_the_same_weights(zoo):
    legacy, keras3 = zoo["tf_keras"].arrays, zoo["keras"].arrays
    differences = {}
    for name in RUN:
        a, b = legacy[f"{name}/output"], keras3[f"{name}/output"]
        assert a.shape == b.shape and np.isfinite(a).all(), name
        differences[name] = float(np.abs(a - b).max())
        assert differences[name] <= 1e-5, (name, differences[name], float(np.abs(a).max()))
        # Weight decay: one L2 term per kernel (ResNet-18: 20 convolutions and the dense).
        np.testing.assert_allclose(keras3[f"{name}/losses"], legacy[f"{name}/losses"], rtol=1e-6)
    assert len(keras3["resnet18_small/losses"]) == 21
    print("max |tf_keras - keras 3|:", differences)


@pytest.mark.slow
def test_every_model_trains_and_the_deterministic_ones_alike(zoo):
    legacy, keras3 = zoo["tf_keras"].arrays, zoo["keras"].arrays
    for name in RUN:
        for arrays in (legacy, keras3):
            norms = arrays[f"{name}/gradient_norms"]
            assert np.isfinite(norms).all(), (name, "a weight without a (finite) gradient")
    for name in TRAINING_ALIKE:
        np.testing.assert_allclose(
            keras3[f"{name}/training_output"], legacy[f"{name}/training_output"], atol=1e-5
        )
        np.testing.assert_allclose(
            keras3[f"{name}/gradient_norms"], legacy[f"{name}/gradient_norms"], rtol=1e-4
        )


@pytest.mark.slow
def test_decoders_translate_alike(zoo):
    legacy, keras3 = zoo["tf_keras"].arrays, zoo["keras"].arrays
    for decoder in ("greedy", "beam"):
        np.testing.assert_array_equal(keras3[decoder], legacy[decoder], err_msg=decoder)
        tokens = keras3[decoder]
        # Sentences, not one repeated token: the shared Transformer learnt a little.
        assert (tokens == EOS_ID).any(axis=1).sum() >= 2, tokens
        assert len(np.unique(tokens)) > 4, tokens
        print(decoder, tokens.tolist())


@pytest.mark.slow
def test_keras3_saves_and_loads_the_transformer(zoo):
    arrays = zoo["keras"].arrays
    np.testing.assert_array_equal(arrays["loaded/output"], arrays["transformer_tiny/output"])


@pytest.mark.slow
def test_mixed_float16_computes_in_float16_and_masks_in_float32(zoo):
    legacy, keras3 = zoo["tf_keras"], zoo["keras"]
    for run in (legacy, keras3):
        assert run.report["output_dtypes"]["mixed_float16"] == "float16"
        mixed, full = run.arrays["mixed/output"], run.arrays["transformer_decoding/output"]
        # Keras 3 casts every float argument of a layer call to float16, where the -1e9
        # attention bias is -inf: the masks reach the layers as booleans instead.
        assert np.isfinite(mixed).all()
        np.testing.assert_allclose(mixed, full, atol=0.05)
        print(run.report["keras"], "max |mixed_float16 - float32|:", np.abs(mixed - full).max())
    np.testing.assert_allclose(
        keras3.arrays["mixed/output"], legacy.arrays["mixed/output"], atol=1e-3
    )
    np.testing.assert_array_equal(keras3.arrays["mixed/greedy"], legacy.arrays["mixed/greedy"])
