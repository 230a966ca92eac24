"""Encoder-decoder Transformer (Vaswani et al., 2017) for translation.

The training model maps ``[source_ids, target_input_ids]`` (int32, padded
with id 0) to logits of shape (batch, length, vocabulary). It is a
functional model of three named layers that inference reuses
(``tntrun.models.translate`` looks them up with ``model.get_layer``):

- ``embedding`` (:class:`SharedEmbedding`): one matrix shared by the source
  and target embeddings (scaled by sqrt(d_model)) and, transposed, the output
  projection (weight tying: ``embedding(x, mode="linear")``);
- ``encoder``: sinusoidal positions, dropout, ``num_layers`` self-attention
  blocks with padding masks;
- ``decoder``: the same with a causal mask and encoder-decoder attention; its
  ``decode_step`` runs one position against a key/value cache.

Residual blocks are pre-norm by default (``x + dropout(f(layer_norm(x)))``
with a final layer norm per stack: stable without tuning the warmup);
``pre_norm=false`` gives the paper's post-norm ``layer_norm(x + dropout(f(x)))``.
The layers are in :mod:`tntrun.models.layers.transformer`, imported on first use
(TensorFlow is imported lazily; Keras 3's TensorFlow backend runs the layers'
TensorFlow ops), which registers them for Keras serialisation: call
:func:`layer_classes` before loading a saved model in a fresh process.

Attention masks reach the layers as booleans, turned into the -1e9 bias in
float32 inside the attention: Keras 3 casts every floating-point argument of a
layer call to the compute dtype (tf_keras only the first), and -1e9 overflows
float16.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from tntrun.models.base import keras_module

PARAM_SETS: dict[str, dict[str, Any]] = {
    "tiny": {"num_layers": 2, "d_model": 64, "filter_size": 256, "num_heads": 4, "dropout": 0.1},
    "base": {"num_layers": 6, "d_model": 512, "filter_size": 2048, "num_heads": 8, "dropout": 0.1},
    "big": {"num_layers": 6, "d_model": 1024, "filter_size": 4096, "num_heads": 16, "dropout": 0.3},
}


@dataclass
class TransformerConfig:
    _target_: str = "tntrun.models.transformer.build_transformer"
    # tiny, base or big; the keys below override the set's value when not null.
    param_set: str = "base"
    num_layers: int | None = None
    d_model: int | None = None
    filter_size: int | None = None
    num_heads: int | None = None
    dropout: float | None = None
    pre_norm: bool = True


SCHEMAS = {"transformer": TransformerConfig}


def resolve_hparams(param_set: str, **overrides: Any) -> dict[str, Any]:
    """The hyperparameters of ``param_set`` with the non-null ``overrides`` applied."""
    if param_set not in PARAM_SETS:
        raise ValueError(f"model.param_set={param_set!r}: choose one of {', '.join(PARAM_SETS)}")
    unknown = set(overrides) - set(PARAM_SETS[param_set])
    if unknown:
        raise ValueError(f"unknown Transformer hyperparameters: {', '.join(sorted(unknown))}")
    hp = {**PARAM_SETS[param_set], **{k: v for k, v in overrides.items() if v is not None}}
    if hp["d_model"] % hp["num_heads"] or hp["d_model"] % 2:
        raise ValueError(
            f"model.d_model={hp['d_model']} must be even and divisible by "
            f"model.num_heads={hp['num_heads']}"
        )
    return hp


def build_transformer(
    input_shape: Sequence[int],
    num_classes: int,
    param_set: str = "base",
    num_layers: int | None = None,
    d_model: int | None = None,
    filter_size: int | None = None,
    num_heads: int | None = None,
    dropout: float | None = None,
    pre_norm: bool = True,
):
    """The uncompiled training model; ``num_classes`` is the shared vocabulary size.

    ``input_shape`` is ``(max_length,)`` of the training data; the model itself
    accepts any sequence length.
    """
    keras = keras_module()
    if len(input_shape) != 1:
        raise ValueError(f"a Transformer takes token id vectors, not input_shape={input_shape}")
    hp = resolve_hparams(
        param_set,
        num_layers=num_layers,
        d_model=d_model,
        filter_size=filter_size,
        num_heads=num_heads,
        dropout=dropout,
    )
    layers = layer_classes()
    stack = {**hp, "pre_norm": pre_norm}
    source = keras.Input(shape=(None,), dtype="int32", name="source_ids")
    target = keras.Input(shape=(None,), dtype="int32", name="target_input_ids")
    embedding = layers.SharedEmbedding(num_classes, hp["d_model"], name="embedding")
    memory = layers.Encoder(**stack, name="encoder")([embedding(source), source])
    decoded = layers.Decoder(**stack, name="decoder")([embedding(target), memory, source])
    logits = embedding(decoded, mode="linear")
    return keras.Model([source, target], logits, name=f"transformer_{param_set}")


def layer_classes() -> ModuleType:
    """The Transformer's layers and mask helpers (:mod:`tntrun.models.layers.transformer`).

    Imports Keras and TensorFlow, and registers the layers for Keras serialisation.
    """
    from tntrun.models.layers import transformer as layers

    return layers
