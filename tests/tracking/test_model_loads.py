"""A logged model with the user's own layers loads where the user's code is not: in a fresh
process started in another directory, through ``mlflow.pyfunc.load_model`` alone; one that
cannot be loaded back is said in one line and tagged, and its run still FINISHES.

The user's module is keras.io's "Text classification with Transformer" layers
(``TokenAndPositionEmbedding``, ``TransformerBlock``) over the digits' 64 pixel values
(0-16) read as tokens, written into a working directory outside the checkout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import clean_env, tntrun_cli
from tests.helpers.runs import run_dir_of, store_uri

pytestmark = pytest.mark.slow

LAYERS = textwrap.dedent("""
    import keras
    from keras import layers, ops


    @keras.saving.register_keras_serializable(package="textlayers")
    class TokenAndPositionEmbedding(layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim, **kwargs):
            super().__init__(**kwargs)
            self.maxlen, self.vocab_size, self.embed_dim = maxlen, vocab_size, embed_dim
            self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            positions = ops.arange(0, ops.shape(x)[-1], 1)
            return self.token_emb(ops.cast(x, "int32")) + self.pos_emb(positions)

        def get_config(self):
            return {
                **super().get_config(),
                "maxlen": self.maxlen,
                "vocab_size": self.vocab_size,
                "embed_dim": self.embed_dim,
            }


    @keras.saving.register_keras_serializable(package="textlayers")
    class TransformerBlock(layers.Layer):
        def __init__(self, embed_dim, num_heads, ff_dim, rate=0.1, **kwargs):
            super().__init__(**kwargs)
            self.embed_dim, self.num_heads, self.ff_dim, self.rate = (
                embed_dim, num_heads, ff_dim, rate
            )
            self.att = layers.MultiHeadAttention(num_heads=num_heads, key_dim=embed_dim)
            self.ffn = keras.Sequential(
                [layers.Dense(ff_dim, activation="relu"), layers.Dense(embed_dim)]
            )
            self.layernorm1 = layers.LayerNormalization(epsilon=1e-6)
            self.layernorm2 = layers.LayerNormalization(epsilon=1e-6)
            self.dropout1 = layers.Dropout(rate)
            self.dropout2 = layers.Dropout(rate)

        def call(self, inputs, training=False):
            attn = self.dropout1(self.att(inputs, inputs), training=training)
            out1 = self.layernorm1(inputs + attn)
            ffn = self.dropout2(self.ffn(out1), training=training)
            return self.layernorm2(out1 + ffn)

        def get_config(self):
            return {
                **super().get_config(),
                "embed_dim": self.embed_dim,
                "num_heads": self.num_heads,
                "ff_dim": self.ff_dim,
                "rate": self.rate,
            }
""")

# The embedding as keras.io first wrote it: no get_config, no **kwargs. It saves (Keras
# records its arguments) but its __init__ refuses the saved config's `trainable`.
NO_CONFIG_EMBEDDING = textwrap.dedent("""
    import keras
    from keras import layers, ops


    class TokenAndPositionEmbedding(layers.Layer):
        def __init__(self, maxlen, vocab_size, embed_dim):
            super().__init__()
            self.token_emb = layers.Embedding(input_dim=vocab_size, output_dim=embed_dim)
            self.pos_emb = layers.Embedding(input_dim=maxlen, output_dim=embed_dim)

        def call(self, x):
            positions = ops.arange(0, ops.shape(x)[-1], 1)
            return self.token_emb(ops.cast(x, "int32")) + self.pos_emb(positions)
""")

# The model module imports its layers from a helper module of the working directory.
MODEL = textwrap.dedent("""
    import keras
    from keras import layers

    from textlayers import TokenAndPositionEmbedding{block_import}


    def build(input_shape, num_classes, embed_dim=8):
        inputs = keras.Input(shape=input_shape)
        x = TokenAndPositionEmbedding(input_shape[0], 17, embed_dim)(inputs)
        {block}
        x = layers.GlobalAveragePooling1D()(x)
        return keras.Model(inputs, layers.Dense(num_classes)(x))
""")

# A fresh interpreter, started elsewhere, that knows only the model's URI.
LOAD_AND_PREDICT = textwrap.dedent("""
    import sys

    import mlflow.pyfunc
    import numpy as np

    batch = np.load(sys.argv[1])
    np.save(sys.argv[2], np.asarray(mlflow.pyfunc.load_model(sys.argv[3]).predict(batch)))
""")

# The trained model recomputed from the run's model.keras, next to the user's code.
KERAS_PREDICT = textwrap.dedent("""
    import sys

    import keras
    import numpy as np

    import textlayers  # registers the layers

    model = keras.saving.load_model(sys.argv[3], compile=False)
    np.save(sys.argv[2], model.predict(np.load(sys.argv[1]), verbose=0))
""")

TINY = (
    "model=custom",
    "model._target_=textmodel.build",
    "train.epochs=1",
    "tracking.system_metrics=false",
)


def user_project(workdir: Path, layers: str, with_block: bool) -> None:
    (workdir / "textlayers.py").write_text(layers)
    block = "x = TransformerBlock(embed_dim, 2, 16)(x)" if with_block else ""
    (workdir / "textmodel.py").write_text(
        MODEL.format(block_import=", TransformerBlock" if with_block else "", block=block)
    )


def python(script: str, cwd: Path, *args: str) -> None:
    """Run ``script`` in a fresh interpreter in ``cwd``; fail with its output."""
    env = {**clean_env(), "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert_succeeded(done)


def run_tags(workdir: Path, run_dir: Path) -> tuple[str, dict[str, str]]:
    run = MlflowClient(store_uri(workdir)).get_run((run_dir / "run_id").read_text())
    return run.info.status, run.data.tags


def test_a_model_with_the_users_layers_loads_in_a_fresh_process_elsewhere(tmp_path):
    """One rank: the claim is the logged model and where it loads, not the ranks. (The
    refused layer keeps two: its one line is said once, not by every rank.)"""
    workdir, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    workdir.mkdir(), elsewhere.mkdir()
    user_project(workdir, LAYERS, with_block=True)
    result = tntrun_cli(workdir, *TINY, "ranks_per_node=1")
    assert_succeeded(result)
    run_dir = run_dir_of(result)
    status, tags = run_tags(workdir, run_dir)
    assert status == "FINISHED" and tags["model_loads"] == "true", tags
    assert "model_load_error" not in tags and "does not load back" not in result.stdout
    (model_id,) = [
        line.rsplit("models:/", 1)[1]
        for line in result.stdout.splitlines()
        if "logged the final model" in line
    ]

    # 32 digits as the ranks read them, from the run's model.keras next to the user's code.
    batch = np.asarray(json.loads((run_dir / "mlflow_model/input_example.json").read_text()))
    batch = np.tile(batch.astype("float32"), (7, 1))[:32]
    np.save(elsewhere / "batch.npy", batch)
    python(
        KERAS_PREDICT,
        workdir,
        str(elsewhere / "batch.npy"),
        str(elsewhere / "keras.npy"),
        str(run_dir / "model.keras"),
    )
    uri = f"models:/{model_id}"
    env_script = f"import mlflow; mlflow.set_tracking_uri({store_uri(workdir)!r})\n"
    python(env_script + LOAD_AND_PREDICT, elsewhere, "batch.npy", "pyfunc.npy", uri)
    expected, loaded = np.load(elsewhere / "keras.npy"), np.load(elsewhere / "pyfunc.npy")
    assert loaded.shape == (32, 10)
    np.testing.assert_allclose(loaded, expected, rtol=1e-6, atol=1e-6)


def test_a_layer_without_get_config_is_said_in_one_line_and_tagged(tmp_path):
    user_project(tmp_path, NO_CONFIG_EMBEDDING, with_block=False)
    result = tntrun_cli(tmp_path, *TINY)
    assert_succeeded(result)
    status, tags = run_tags(tmp_path, run_dir_of(result))
    assert status == "FINISHED"
    assert tags["model_loads"] == "false"
    assert tags["model_load_error"].startswith("TokenAndPositionEmbedding: "), tags
    assert "unexpected keyword argument 'trainable'" in tags["model_load_error"]
    lines = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "does not load back" in line
    ]
    assert len(lines) == 1, lines
    assert "TokenAndPositionEmbedding" in lines[0]
    fix = "register TokenAndPositionEmbedding with @keras.saving.register_keras_serializable()"
    assert fix in lines[0]
    assert "give it get_config() and accept **kwargs" in lines[0]
    assert "Traceback" not in result.stdout + result.stderr
