"""The vision models: CNN and ResNets train a step, build at every depth, match the reference
parameter counts, and take their stem, zero-init and weight-decay options."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

import keras  # noqa: E402

from tntrun.models.cnn import build_cnn  # noqa: E402
from tntrun.models.resnet import build_resnet  # noqa: E402

pytestmark = pytest.mark.slow


def trainable_count(model) -> int:
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def one_sgd_step(model, x: np.ndarray, y: np.ndarray) -> float:
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        run_eagerly=True,  # tracing a deep ResNet's train step costs more than running it
    )
    loss, _ = model.train_on_batch(x, y)
    return float(loss)


@pytest.mark.parametrize(
    ("builder", "input_shape", "hparams"),
    [
        (build_cnn, (32, 32, 3), {}),
        (build_cnn, (64,), {"dropout": 0.5}),  # digits: 64 features viewed as 8x8x1
        (build_resnet, (32, 32, 3), {"depth": 18, "stem": "small", "weight_decay": 1e-4}),
        (build_resnet, (32, 32, 3), {"depth": 34, "zero_init_residual": True}),
        (build_resnet, (32, 32, 3), {"depth": 50, "stem": "small", "weight_decay": 1e-4}),
    ],
)
def test_model_trains_one_step(builder, input_shape, hparams):
    model = builder(input_shape, 7, **hparams)
    rng = np.random.default_rng(0)
    x = rng.random((2, *input_shape), dtype=np.float32)
    y = np.array([1, 6])
    assert np.isfinite(one_sgd_step(model, x, y))
    assert model(x, training=False).shape == (2, 7)


@pytest.mark.parametrize("depth", [101, 152])
def test_deep_resnets_build_and_run_forward(depth):
    model = build_resnet((32, 32, 3), 5, depth=depth)
    logits = model(np.zeros((2, 32, 32, 3), np.float32), training=False)
    assert logits.shape == (2, 5) and np.isfinite(logits.numpy()).all()


@pytest.mark.parametrize(("depth", "params"), [(18, 11_689_512), (50, 25_557_032)])
def test_resnet_parameter_counts_match_the_reference(depth, params):
    assert trainable_count(build_resnet((224, 224, 3), 1000, depth=depth)) == params


def test_stems_set_the_resolution_of_the_last_stage():
    small = build_resnet((32, 32, 3), 10, depth=18, stem="small")
    imagenet = build_resnet((32, 32, 3), 10, depth=18, stem="imagenet")
    assert small.get_layer("layer4_1_out").output.shape[1:3] == (4, 4)
    assert imagenet.get_layer("layer4_1_out").output.shape[1:3] == (1, 1)
    assert len(imagenet.layers) > len(small.layers)  # the max-pool and its padding


def test_zero_init_residual_zeroes_each_blocks_last_batchnorm():
    model = build_resnet((32, 32, 3), 10, depth=50, stem="small", zero_init_residual=True)
    gammas = {
        layer.name: layer.gamma.numpy()
        for layer in model.layers
        if isinstance(layer, keras.layers.BatchNormalization)
    }
    residual_ends = [name for name in gammas if name.endswith("_bn3")]
    assert len(residual_ends) == 16  # 3 + 4 + 6 + 3 bottleneck blocks
    for name, gamma in gammas.items():
        assert (gamma == 0).all() == (name in residual_ends), name
    bn = model.get_layer("bn1")
    assert bn.momentum == 0.9 and bn.epsilon == 1e-5


def test_weight_decay_is_half_the_factor_on_every_kernel():
    wd = 1e-4
    model = build_resnet((16, 16, 3), 10, depth=18, stem="small", weight_decay=wd)
    kernels = [w for w in model.trainable_weights if "kernel" in w.name]
    assert len(model.losses) == len(kernels) == 21  # 20 convolutions (3 projections) + dense
    expected = wd / 2 * sum(float(tf.reduce_sum(k**2)) for k in kernels)
    assert float(tf.add_n(model.losses)) == pytest.approx(expected, rel=1e-4)
    assert build_resnet((16, 16, 3), 10, depth=18, stem="small").losses == []


def test_resnet_rejects_unknown_options():
    with pytest.raises(ValueError, match="model.depth=20"):
        build_resnet((32, 32, 3), 10, depth=20)
    with pytest.raises(ValueError, match="model.stem=tiny"):
        build_resnet((32, 32, 3), 10, depth=18, stem="tiny")
    with pytest.raises(ValueError, match="perfect square"):
        build_cnn((10,), 3)
