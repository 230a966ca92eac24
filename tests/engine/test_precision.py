"""train.precision and train.jit_compile: schema, plan, dry run, float32 outputs, MFU cache key;
with real ranks: loss scaling composed with Horovod, and cnn on digits trained in every mode
(the dtypes read from the ranks' built model) reaching the float32 run's accuracy."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import run_on_two_ranks, tntrun_cli
from tests.helpers.paths import RANK_SCRIPTS
from tests.helpers.plans import plan_for
from tests.helpers.runs import run_dir_of
from tntrun.contract import run_files
from tntrun.contract.metrics import last_values, parse_lines
from tntrun.planning.plan import Plan
from tntrun.planning.view import render_plan

# |val_accuracy - float32's| allowed after 3 epochs of cnn on digits (359 validation
# images: 0.02 is 7 images; measured differences are at most 0.006, BENCHMARKS.md).
ACCURACY_TOLERANCE = 0.02
CNN = (
    "model=cnn",
    "train.epochs=3",
    # What no test here reads, off (each costs a run CPU-seconds; none changes the training):
    # checkpoints, step logging, the MLflow Model folder (model.keras, the final model, is
    # written anyway), the gradient noise scale, the host's system metrics.
    "checkpoint.every_epochs=0",
    "tracking.log_every_steps=0",
    "tracking.log_model=false",
    "train.gradient_noise_scale=false",
    "tracking.system_metrics=false",
)
SCRIPT = RANK_SCRIPTS / "loss_scaling.py"
# train.precision -> (the dtype the model's layers compute in, loss scaling).
OBSERVED = {
    "float32": ("float32", False),
    "mixed_bfloat16": ("bfloat16", False),
    "mixed_float16": ("float16", True),
}


def test_a_misspelt_precision_fails_at_composition(compose_cfg):
    with pytest.raises(ConfigCompositionException) as err:
        compose_cfg("train.precision=mixed_float61")
    assert "train.precision" in str(err.value.__cause__ or err.value)


def test_the_plan_carries_precision_and_xla_and_the_dry_run_shows_them(compose_cfg):
    default = plan_for(compose_cfg)
    assert (default.precision, default.jit_compile) == ("float32", False)
    plan = plan_for(compose_cfg, "train.precision=mixed_float16", "train.jit_compile=true")
    assert (plan.precision, plan.jit_compile) == ("mixed_float16", True)
    assert Plan.from_json(plan.to_json()) == plan
    table = render_plan(plan)
    assert "precision" in table and "dynamic loss scaling" in table
    assert "slow on CPU" in table  # gpus=0
    assert "on: forward and backward pass per rank" in table
    assert "float32\n" in render_plan(default) and "XLA (jit_compile)" in render_plan(default)
    bf16 = render_plan(plan_for(compose_cfg, "train.precision=mixed_bfloat16"))
    assert "bfloat16 compute" in bf16 and "loss scaling" not in bf16


def test_the_matmul_peak_is_cached_per_compute_dtype():
    from tntrun.engine.flops import cache_key

    assert cache_key(2, 1) == cache_key(2, 1, dtype="float32")
    assert cache_key(2, 1, dtype="bfloat16").endswith("|dtype=bfloat16")
    assert cache_key(2, 1, dtype="bfloat16") != cache_key(2, 1)


@pytest.mark.parametrize("precision", ["mixed_bfloat16", "mixed_float16"])
def test_every_zoo_model_outputs_float32_logits(precision):
    import tensorflow as tf

    from tntrun.engine import precision as mixed
    from tntrun.models.cnn import build_cnn
    from tntrun.models.mlp import build_mlp
    from tntrun.models.resnet import build_resnet
    from tntrun.models.transformer import build_transformer

    builders = {
        "mlp": (lambda: build_mlp((64,), 10), [tf.zeros((2, 64))]),
        "cnn": (lambda: build_cnn((64,), 10), [tf.zeros((2, 64))]),
        "resnet18": (
            lambda: build_resnet((8, 8, 3), 10, depth=18, stem="small"),
            [tf.zeros((2, 8, 8, 3))],
        ),
        "transformer": (
            lambda: build_transformer((6,), 20, param_set="tiny"),
            [tf.ones((2, 6), tf.int32), tf.ones((2, 6), tf.int32)],
        ),
    }
    with mixed.policy(precision):
        for name, (build, inputs) in builders.items():
            built = build()
            model = mixed.float32_outputs(built, ())
            assert built.outputs[0].dtype != tf.float32, name  # the builder's logits: 16-bit
            assert model.layers[-1].name == "float32_output", name
            assert model.layers[-1].compute_dtype == "float32", name
            assert model.trainable_variables == built.trainable_variables, name  # shared
            out = model(inputs if len(inputs) > 1 else inputs[0], training=True)
            assert out.dtype == tf.float32, name
            assert all(v.dtype == tf.float32 for v in model.trainable_variables), name
    assert mixed.float32_outputs(build_mlp((64,), 10), ()).layers[-1].name == "logits"


def test_a_subclassed_model_gets_float32_outputs_too():
    import keras
    import tensorflow as tf

    from tntrun.engine import precision as mixed

    class Logits(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(3)

        def call(self, x):
            return self.dense(x)

    with mixed.policy("mixed_bfloat16"):
        model = mixed.float32_outputs(Logits(), (4,))
        assert model(tf.zeros((2, 4))).dtype == tf.float32
    assert keras.mixed_precision.global_policy().name == "float32"  # restored


def test_a_model_with_its_own_train_step_must_output_float32_itself():
    """A cast wrapper would train with Keras' step instead of the model's own: refused with
    the fix, unless the model's outputs are float32 already."""
    import keras

    from tntrun.engine import precision as mixed

    class OwnStep(keras.Model):
        def __init__(self, output_dtype=None):
            super().__init__()
            self.dense = keras.layers.Dense(3, dtype=output_dtype)

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            return super().train_step(data)

    with mixed.policy("mixed_bfloat16"):
        with pytest.raises(mixed.OwnTrainStep, match="give its last layer dtype='float32'"):
            mixed.float32_outputs(OwnStep(), (4,))
        model = OwnStep(output_dtype="float32")
        assert mixed.float32_outputs(model, (4,)) is model


@pytest.mark.slow
def test_loss_scaling_with_xla_on_two_ranks():
    result = run_on_two_ranks(SCRIPT)
    out = result.stdout
    assert_succeeded(result)
    for rank in (0, 1):
        for check in (
            "the XLA step equals the standard step",
            "the non-finite guard averages the unscaled loss",
            "an own train_step without scale_loss is refused",
        ):
            assert f"rank {rank}: {check} ok" in out


def train_cnn(work: Path, *overrides: str) -> tuple[dict[str, float], list[float], Path]:
    """Final metrics, per-epoch training losses and run directory of a 3-epoch cnn run."""
    result = tntrun_cli(work, *CNN, *overrides)
    assert_succeeded(result)
    run_dir = run_dir_of(result)
    metrics = run_dir / run_files.METRICS
    losses = [
        value for key, value, _, _ in parse_lines(metrics.read_text().splitlines()) if key == "loss"
    ]
    return last_values(metrics), losses, run_dir


def assert_trained_in(run_dir: Path, precision: str) -> None:
    """``precision`` as rank 0's built model shows it (precision.json), not as the plan asks:
    its layers compute in the policy's dtype and produce it, except the float32 output cast;
    variables and model outputs are float32; only mixed_float16 scales the loss."""
    record = json.loads((run_dir / run_files.PRECISION).read_text())
    compute, loss_scaling = OBSERVED[precision]
    *layers, last = [layer for layer in record["layers"] if layer["class"] != "InputLayer"]
    if compute == "float32":
        layers.append(last)  # no cast: the builder's logits are float32 already
    computed = {
        (layer["compute_dtype"], layer["variable_dtype"], *(layer["output_dtypes"] or [None]))
        for layer in layers
    }
    assert computed == {(compute, "float32", compute)}, (precision, layers)
    assert layers[-1]["name"] == "logits" and layers[-1]["trainable_variables"], layers
    if compute != "float32":  # the last layer casts the 16-bit logits to float32
        cast = (last["name"], last["compute_dtype"], last["output_dtypes"])
        assert cast == ("float32_output", "float32", ["float32"]), last
    assert record["trainable_variables"], record
    assert {dtype for _, dtype in record["trainable_variables"]} == {"float32"}, record
    assert record["outputs"] == ["float32"], record
    assert record["loss_scaling"] is loss_scaling, record
    assert record["data_parallel"] is True, record  # every rank averages its updates
    if loss_scaling:  # the averaging optimizer is the loss scaling one (unscaled gradients)
        assert record["optimizer"] == "LossScaleOptimizer", record


@pytest.fixture(scope="module")
def float32_cnn(tmp_path_factory):
    """The float32 reference, on one rank: the same global batch of 64 trains as on two
    ranks up to the order of the allreduce's sums (test_engine.py; val_accuracy 0.9220
    on either), and what the comparison reads of it is its accuracy and how its model
    was built."""
    return train_cnn(tmp_path_factory.mktemp("float32"), "ranks_per_node=1")


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ("train.precision=mixed_bfloat16",),
        ("train.jit_compile=true",),
        ("train.precision=mixed_float16",),
    ],
    ids=["mixed_bfloat16", "jit_compile", "mixed_float16"],
)
def test_cnn_reaches_the_float32_accuracy(float32_cnn, tmp_path, monkeypatch, overrides):
    reference, _, reference_dir = float32_cnn
    if overrides[0] == "train.jit_compile=true":  # XLA's proof is an INFO line (TF 2.21+)
        monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
    assert reference["val_accuracy"] > 0.85
    assert_trained_in(reference_dir, "float32")
    final, losses, run_dir = train_cnn(tmp_path, *overrides)
    precision = dict(o.split("=") for o in overrides).get("train.precision", "float32")
    assert_trained_in(run_dir, precision)
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
    assert losses[-1] < losses[0]
    assert abs(final["val_accuracy"] - reference["val_accuracy"]) <= ACCURACY_TOLERANCE, (
        final["val_accuracy"],
        reference["val_accuracy"],
    )
    assert final["mfu"] > 0 and final["weights_rank_spread"] == 0
    ranks_log = (run_dir / "ranks.log").read_text()
    compute = {
        "train.precision=mixed_bfloat16": "bfloat16",
        "train.precision=mixed_float16": "float16",
    }.get(overrides[0], "float32")
    assert f"measured matmul peak ({compute})" in ranks_log
    if overrides[0] == "train.jit_compile=true":
        assert "Compiled cluster using XLA" in ranks_log
    if overrides[0] == "train.precision=mixed_float16":
        # Dynamic loss scaling never overflowed: still at its start, 2^15 (> 1).
        assert final["loss_scale"] == 2.0**15
    else:
        assert "loss_scale" not in final
    assert os.path.getsize(run_dir / "model.keras") > 0
