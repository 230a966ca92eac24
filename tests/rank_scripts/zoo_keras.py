"""Build tntrun's model zoo with the Keras the environment selects, and record what it built.

tests/test_zoo_keras3.py runs this twice, under ``TF_USE_LEGACY_KERAS=1`` (tf_keras) and
without it (Keras 3, ``KERAS_BACKEND=tensorflow``): one process cannot hold both as its Keras.
Usage: ``zoo_keras.py OUT_DIR``. The first run writes ``OUT_DIR/shared.npz``: its models'
weights and the input batches. The weights are perturbed (BatchNorm statistics and biases
off their identity/zero initialisation), except the decoders' one-layer Transformer's, which
are trained for 50 steps so that greedy and beam search produce varied sentences of varied
lengths rather than one repeated token. Every run sets the shared weights with
``set_weights`` and writes what it computed to ``OUT_DIR/<keras>.npz`` and
``OUT_DIR/<keras>.json`` (with the seconds each part took). The script asserts nothing.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tntrun.datasets.synthetic_translation import SyntheticTranslationDataset
from tntrun.models.base import keras_module
from tntrun.models.cnn import build_cnn
from tntrun.models.mlp import build_mlp
from tntrun.models.resnet import build_resnet
from tntrun.models.transformer import build_transformer
from tntrun.models.translate import beam_translate, greedy_translate

# name -> (builder, input_shape, num_classes, hyperparameters), as the zoo's tests build them.
RUN = {
    "mlp": (build_mlp, (64,), 10, {}),
    "cnn_digits": (build_cnn, (64,), 7, {"dropout": 0.5}),
    "cnn": (build_cnn, (32, 32, 3), 7, {}),
    "resnet18_small": (
        build_resnet,
        (32, 32, 3),
        7,
        {"depth": 18, "stem": "small", "weight_decay": 1e-4},
    ),
    "resnet50_imagenet": (build_resnet, (32, 32, 3), 7, {"depth": 50, "zero_init_residual": True}),
    "transformer_tiny": (build_transformer, (12,), 40, {"param_set": "tiny"}),
    "transformer_post_norm": (
        build_transformer,
        (12,),
        40,
        {"param_set": "tiny", "pre_norm": False, "num_layers": 1},
    ),
    # Trained a little, for the decoders (one layer: half the tracing of two).
    "transformer_decoding": (build_transformer, (12,), 40, {"param_set": "tiny", "num_layers": 1}),
}
# Built and counted only: the published sizes (ImageNet, the WMT14 vocabulary).
COUNT = {
    "resnet18_224": (build_resnet, (224, 224, 3), 1000, {"depth": 18}),
    "resnet50_224": (build_resnet, (224, 224, 3), 1000, {"depth": 50}),
    "transformer_base": (build_transformer, (64,), 32000, {"param_set": "base"}),
    "transformer_big": (build_transformer, (64,), 32000, {"param_set": "big"}),
}
DECODE_LENGTH = 12
# The task the decoders' Transformer learns a little of before its weights are shared.
TASK = SyntheticTranslationDataset(
    vocab_size=40, max_length=DECODE_LENGTH, num_train=3200, num_val=8, task="reverse", seed=0
)


def trainable_count(model) -> int:
    return sum(int(np.prod(w.shape)) for w in model.trainable_weights)


def weight_names(model) -> list[str]:
    """Variable paths as both Kerases spell them (tf_keras appends the ':0' of TensorFlow)."""
    return [getattr(w, "path", w.name).removesuffix(":0") for w in model.weights]


def perturbed(model, rng: np.random.Generator) -> list[np.ndarray]:
    """The built weights with BatchNorm/LayerNorm parameters and biases moved off their inits.

    Gammas below 1, as trained residual networks have, keep ResNet-50's logits near 1 with
    moving statistics that do not fit the batch (around 1 they reach ~80, where float32's
    spacing alone is ~1e-5).
    """
    out = []
    for name, w in zip(weight_names(model), model.get_weights(), strict=True):
        if name.endswith("moving_variance"):
            w = rng.uniform(0.5, 1.5, w.shape)
        elif name.endswith("gamma"):
            w = rng.uniform(0.2, 0.6, w.shape)
        elif name.endswith(("moving_mean", "beta", "bias")):
            w = rng.normal(0.0, 0.1, w.shape)
        out.append(w.astype(np.float32))
    return out


def inputs_for(name: str, rng: np.random.Generator) -> list[np.ndarray]:
    builder, shape, classes, _ = RUN[name]
    if builder is not build_transformer:
        return [rng.random((3, *shape), dtype=np.float32)]
    source = rng.integers(4, classes, (3, *shape)).astype(np.int32)
    source[1, 7:] = 0  # padding
    target = rng.integers(4, classes, (3, *shape)).astype(np.int32)
    return [source, target]


def trained(keras, model) -> list[np.ndarray]:
    """``model``'s weights after 50 Adam steps on ``TASK`` (a plain loop traces faster than fit)."""
    import tensorflow as tf

    optimizer = keras.optimizers.Adam(3e-3)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0)

    @tf.function
    def step(source, target_input, target_output):
        with tf.GradientTape() as tape:
            loss = loss_fn(target_output, model([source, target_input], training=True))
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))

    pairs = TASK.arrays("train")
    for i in range(0, TASK.num_train, 64):
        step(
            pairs.source[i : i + 64],
            pairs.target_input[i : i + 64],
            pairs.target_output[i : i + 64],
        )
    return model.get_weights()


def forward(model, inputs: list[np.ndarray]) -> np.ndarray:
    out = model(inputs if len(inputs) > 1 else inputs[0], training=False)
    return np.asarray(out, dtype=np.float32)


def training_step(model, inputs: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Training-mode output, and each trainable weight's gradient norm (NaN: no gradient).

    The loss is the mean squared output; nothing is applied.
    """
    import tensorflow as tf

    with tf.GradientTape() as tape:
        out = model(inputs if len(inputs) > 1 else inputs[0], training=True)
        loss = tf.reduce_mean(tf.square(tf.cast(out, tf.float32)))
    grads = tape.gradient(loss, model.trainable_weights)
    norms = [np.nan if g is None else float(tf.norm(tf.convert_to_tensor(g))) for g in grads]
    return np.asarray(out, dtype=np.float32), np.array(norms)


def with_policy(keras, policy: str, run: Callable[[], Any]) -> Any:
    """``run()`` under a global dtype policy (set_global_policy: Keras 3 keeps the alias)."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        return run()
    finally:
        keras.mixed_precision.set_global_policy("float32")


def main(out_dir: Path) -> None:
    keras = keras_module()
    keras.utils.set_random_seed(0)  # the initial weights the first run perturbs or trains
    side = keras.__name__
    shared_path = out_dir / "shared.npz"
    rng = np.random.default_rng(0)
    shared = dict(np.load(shared_path)) if shared_path.exists() else {}
    making = not shared
    arrays: dict[str, np.ndarray] = {}
    report: dict[str, Any] = {
        "keras": side,
        "version": keras.__version__,
        "backend": keras.backend.backend(),
        "params": {},
        "weights": {},
        "layers": {},
        "output_dtypes": {},
    }

    def build(name: str, table: dict):
        builder, shape, classes, hparams = table[name]
        model = builder(shape, classes, **hparams)
        report["params"][name] = trainable_count(model)
        report["weights"][name] = [
            [n, list(w.shape)] for n, w in zip(weight_names(model), model.weights, strict=True)
        ]
        report["layers"][name] = [
            [layer.name, type(layer).__name__]
            for layer in model.layers
            if type(layer).__name__ != "InputLayer"  # listed by tf_keras only
        ]
        return model

    def shared_weights(name: str, model) -> list[np.ndarray]:
        if f"{name}/weight_0" not in shared:
            made = (
                trained(keras, model) if name == "transformer_decoding" else perturbed(model, rng)
            )
            for i, w in enumerate(made):
                shared[f"{name}/weight_{i}"] = w
            for i, x in enumerate(inputs_for(name, rng)):
                shared[f"{name}/input_{i}"] = x
        return [shared[f"{name}/weight_{i}"] for i in range(len(model.weights))]

    def inputs(name: str) -> list[np.ndarray]:
        count = 2 if RUN[name][0] is build_transformer else 1
        return [shared[f"{name}/input_{i}"] for i in range(count)]

    seconds = report["seconds"] = {}
    start = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal start
        seconds[name] = round(time.perf_counter() - start, 2)
        start = time.perf_counter()

    models = {}
    for name in RUN:
        model = models[name] = build(name, RUN)
        model.set_weights(shared_weights(name, model))
        arrays[f"{name}/output"] = forward(model, inputs(name))
        arrays[f"{name}/losses"] = np.array([float(np.sum(loss)) for loss in model.losses])
        out, norms = training_step(model, inputs(name))
        arrays[f"{name}/training_output"], arrays[f"{name}/gradient_norms"] = out, norms
        lap(name)
    if making:
        np.savez(shared_path, **shared)
        lap("write shared weights")

    source = TASK.arrays("val").source
    decoding = models["transformer_decoding"]
    arrays["greedy"] = greedy_translate(decoding, source, DECODE_LENGTH)
    arrays["beam"] = beam_translate(decoding, source, DECODE_LENGTH, beam_size=3, alpha=0.6)
    lap("decoders")

    if side == "keras":  # tf_keras's: tests/test_translation_zoo.py
        # Saved as the engine saves it and loaded back (the layers' registration and configs).
        path = out_dir / "transformer.keras"
        models["transformer_tiny"].save(path)
        loaded = keras.models.load_model(path, compile=False)
        arrays["loaded/output"] = forward(loaded, inputs("transformer_tiny"))
        lap("save and load")

    # Mixed precision: float16 compute, float32 masking and softmax.
    def mixed() -> None:
        builder, shape, classes, hparams = RUN["transformer_decoding"]
        model = builder(shape, classes, **hparams)
        model.set_weights(shared_weights("transformer_decoding", model))
        out = model(inputs("transformer_decoding"), training=False)
        report["output_dtypes"]["mixed_float16"] = out.dtype.name
        arrays["mixed/output"] = np.asarray(out, dtype=np.float32)
        arrays["mixed/greedy"] = greedy_translate(model, source, DECODE_LENGTH)

    with_policy(keras, "mixed_float16", mixed)
    lap("mixed_float16")

    for name in COUNT:
        build(name, COUNT)
        lap(name)
    np.savez(out_dir / f"{side}.npz", **arrays)
    (out_dir / f"{side}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
