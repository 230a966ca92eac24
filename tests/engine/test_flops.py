"""FLOP counting against analytic numbers, and the cached matmul rate (real TensorFlow)."""

from __future__ import annotations

import json
import os

import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.engine.flops import (  # noqa: E402
    cache_key,
    cache_path,
    forward_flops_per_sample,
    measured_matmul_flops,
    training_flops_per_sample,
)
from tntrun.models.cnn import build_cnn  # noqa: E402
from tntrun.models.mlp import build_mlp  # noqa: E402
from tntrun.models.resnet import build_resnet  # noqa: E402
from tntrun.models.transformer import build_transformer  # noqa: E402


def test_mlp_counts_two_flops_per_multiply_add_plus_the_bias_adds():
    model = build_mlp((64,), 10, hidden_units=(128, 64))
    widths = [64, 128, 64, 10]
    matmuls = sum(2 * a * b for a, b in zip(widths, widths[1:], strict=False))
    biases = sum(widths[1:])
    assert forward_flops_per_sample(model, (64,)) == matmuls + biases == 34_250
    assert training_flops_per_sample(34_250) == 3 * 34_250


def test_explicit_specs_give_the_same_count_at_any_batch_size():
    model = build_mlp((64,), 10)
    spec = tf.TensorSpec([32, 64], tf.float32)
    assert forward_flops_per_sample(model, spec) == forward_flops_per_sample(model, (64,))


def test_cnn_convolutions_match_the_conv_formula():
    model = build_cnn((8, 8, 1), 10, filters=(4, 8), kernel_size=3, dense_units=16)
    convs = 2 * (8 * 8 * 4) * (3 * 3 * 1) + 2 * (4 * 4 * 8) * (3 * 3 * 4)
    dense = 2 * (2 * 2 * 8) * 16 + 2 * 16 * 10
    counted = forward_flops_per_sample(model, (8, 8, 1))
    # The rest: bias adds and max-pool comparisons, a few percent here.
    assert convs + dense < counted < 1.1 * (convs + dense)


def test_resnet50_at_224_is_the_published_4_1_gmacs():
    model = build_resnet((224, 224, 3), 1000, depth=50)
    counted = forward_flops_per_sample(model, (224, 224, 3))
    assert counted == pytest.approx(2 * 4.09e9, rel=0.05)  # torchvision: 4.09 GMACs


def test_resnet18_small_stem_on_32x32_images():
    model = build_resnet((32, 32, 3), 10, depth=18, stem="small")
    # CIFAR-style ResNet-18: 0.56 GMACs (3x3 stem, no pool, stages at 32/16/8/4 pixels).
    assert forward_flops_per_sample(model, (32, 32, 3)) == pytest.approx(2 * 0.556e9, rel=0.02)


def test_transformer_counts_projections_attention_and_logits_at_the_sequence_length():
    d, f, length, vocab, layers = 64, 256, 16, 100, 2
    model = build_transformer((length,), vocab, param_set="tiny")
    projections = 4 * 2 * length * d * d
    attention = 2 * 2 * length * length * d  # scores and weighted values (Einsum)
    ffn = 2 * 2 * length * d * f
    encoder = layers * (projections + attention + ffn)
    decoder = layers * (2 * (projections + attention) + ffn)
    logits = 2 * length * d * vocab  # tied embedding, Einsum
    analytic = encoder + decoder + logits
    counted = forward_flops_per_sample(model, (length,))
    # Plus biases, layer norms, softmax and scaling: element-wise, a few percent.
    assert analytic < counted < 1.05 * analytic
    assert forward_flops_per_sample(model, (2 * length,)) > 2 * counted, "grows with length"


def test_a_model_with_an_unknown_dimension_and_no_shape_to_fill_it_is_refused():
    model = build_transformer((16,), 100, param_set="tiny")
    with pytest.raises(ValueError, match="unknown dimension"):
        forward_flops_per_sample(model, ())


def test_matmul_rate_is_measured_once_then_read_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_path() == tmp_path / "tntrun" / "matmul_flops.json"
    first = measured_matmul_flops(threads=2, ranks_per_node=1)
    assert 1e8 < first < 1e15
    entries = json.loads(cache_path().read_text())
    key = cache_key(2, 1)
    assert entries[key]["flops_per_s"] == first
    assert "threads=2" in key and "ranks_per_node=1" in key and tf.__version__ in key
    assert measured_matmul_flops(threads=2, ranks_per_node=1) == first

    entries[key]["flops_per_s"] = 123.0  # a cached value is used as it is
    cache_path().write_text(json.dumps(entries))
    assert measured_matmul_flops(threads=2, ranks_per_node=1) == 123.0
    remeasured = measured_matmul_flops(threads=2, ranks_per_node=1, use_cache=False)
    assert remeasured > 1e8
    assert json.loads(cache_path().read_text())[key]["flops_per_s"] == remeasured
