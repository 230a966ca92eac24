"""The Transformer's Keras layers and mask helpers (the model: :mod:`tntrun.models.transformer`).

Keras and TensorFlow are imported at the top: :mod:`tntrun.models.transformer` imports
this module only when a model is built or decoded, and the config's collection of the
zoo's schemas (which imports each module of ``tntrun.models``, but not the modules of
its subpackages) stays free of TensorFlow. Importing it registers the layers for Keras
serialisation (package ``tntrun.transformer``), as loading a saved model needs.
Keras 3's TensorFlow backend runs the layers' TensorFlow ops.
"""

from __future__ import annotations

import functools
import math

import keras
import tensorflow as tf

NEG_INF = -1e9

if keras.backend.backend() != "tensorflow":
    raise RuntimeError(
        "the Transformer's layers run TensorFlow ops: set KERAS_BACKEND=tensorflow "
        f"(Keras runs on {keras.backend.backend()})"
    )
register = keras.saving.register_keras_serializable(package="tntrun.transformer")


def padding_mask(ids):
    """(batch, 1, 1, length): True at padding ids (id 0), which no query may see."""
    return tf.equal(ids, 0)[:, None, None, :]


def causal_mask(length):
    """(1, 1, length, length): True where a position would see a later one."""
    positions = tf.range(length)
    return (positions[None, :] > positions[:, None])[None, None]


def mask_bias(blocked):
    """Float32 -1e9 where ``blocked``, 0 elsewhere: added to attention logits."""
    return tf.cast(blocked, tf.float32) * NEG_INF


def padding_bias(ids):
    """(batch, 1, 1, length): -1e9 at padding ids, added to attention logits."""
    return mask_bias(padding_mask(ids))


def positional_encoding(positions, d_model: int):
    """Sinusoids (sin half, cos half) of float ``positions``: (len(positions), d_model)."""
    half = d_model // 2
    increment = math.log(10_000.0) / max(half - 1, 1)
    inverse = tf.exp(tf.range(half, dtype=tf.float32) * -increment)
    scaled = positions[:, None] * inverse[None, :]
    return tf.concat([tf.sin(scaled), tf.cos(scaled)], axis=1)


@register
class SharedEmbedding(keras.layers.Layer):
    """Token embedding times sqrt(d_model); ``mode="linear"``: logits via its transpose."""

    def __init__(self, vocab_size: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size, self.d_model = vocab_size, d_model

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(0.0, self.d_model**-0.5),
        )
        super().build(input_shape)

    def call(self, inputs, mode: str = "embedding"):
        if mode == "embedding":
            return tf.gather(self.embeddings, inputs) * self.d_model**0.5
        if mode == "linear":
            return tf.einsum("bld,vd->blv", inputs, self.embeddings)
        raise ValueError(f"mode={mode!r}: use embedding or linear")

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}


class _Composite(keras.layers.Layer):
    """A layer of sublayers, which build on their first call (as tf_keras builds them).

    Without a ``build`` of its own, Keras 3 would trace ``call`` once more per
    nesting level to find the sublayers' shapes (Transformer-base: 3x the time).
    """

    def build(self, input_shape):
        super().build(input_shape)


@register
class MultiHeadAttention(_Composite):
    """Scaled dot-product attention over ``num_heads`` heads (no biases, like the paper)."""

    def __init__(self, d_model: int, num_heads: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.num_heads, self.dropout = d_model, num_heads, dropout
        self.depth = d_model // num_heads
        dense = functools.partial(keras.layers.Dense, d_model, use_bias=False)
        self.query = dense(name="query")
        self.key = dense(name="key")
        self.value = dense(name="value")
        self.projection = dense(name="output")
        self.weights_dropout = keras.layers.Dropout(dropout)

    def split_heads(self, x):
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        x = tf.reshape(x, [batch, length, self.num_heads, self.depth])
        return tf.transpose(x, [0, 2, 1, 3])

    def project_key_value(self, memory):
        """Keys and values of ``memory``: (batch, heads, length, depth) each."""
        return self.split_heads(self.key(memory)), self.split_heads(self.value(memory))

    def attend(self, x, key, value, bias, training=None):
        query = self.split_heads(self.query(x)) * self.depth**-0.5
        # Masking and softmax in float32 under mixed precision (-1e9 overflows float16).
        logits = tf.cast(tf.einsum("bhqd,bhkd->bhqk", query, key), tf.float32) + bias
        weights = tf.cast(tf.nn.softmax(logits), value.dtype)
        weights = self.weights_dropout(weights, training=training)
        heads = tf.einsum("bhqk,bhkd->bhqd", weights, value)
        heads = tf.transpose(heads, [0, 2, 1, 3])
        batch, length = tf.shape(heads)[0], tf.shape(heads)[1]
        return self.projection(tf.reshape(heads, [batch, length, self.d_model]))

    def call(self, x, memory, blocked, training=None):
        """``blocked`` (boolean, broadcast to batch, heads, queries, keys): pairs not seen."""
        key, value = self.project_key_value(memory)
        return self.attend(x, key, value, mask_bias(blocked), training=training)

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "num_heads": self.num_heads,
            "dropout": self.dropout,
        }


@register
class FeedForward(_Composite):
    """Position-wise ReLU layer of ``filter_size`` units and back to ``d_model``."""

    def __init__(self, d_model: int, filter_size: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.filter_size, self.dropout = d_model, filter_size, dropout
        self.hidden = keras.layers.Dense(filter_size, activation="relu", name="filter")
        self.hidden_dropout = keras.layers.Dropout(dropout)
        self.projection = keras.layers.Dense(d_model, name="output")

    def call(self, x, training=None):
        return self.projection(self.hidden_dropout(self.hidden(x), training=training))

    def get_config(self):
        return {
            **super().get_config(),
            "d_model": self.d_model,
            "filter_size": self.filter_size,
            "dropout": self.dropout,
        }


class _Block(_Composite):
    """Residual sub-layers with pre- or post-norm and residual dropout."""

    def __init__(self, d_model, num_heads, filter_size, dropout, pre_norm, **kwargs):
        super().__init__(**kwargs)
        self.hp = {
            "d_model": d_model,
            "num_heads": num_heads,
            "filter_size": filter_size,
            "dropout": dropout,
            "pre_norm": pre_norm,
        }
        self.pre_norm = pre_norm
        self.residual_dropout = keras.layers.Dropout(dropout)
        self.feed_forward = FeedForward(d_model, filter_size, dropout, name="feed_forward")
        self.ffn_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="ffn_norm")

    def residual(self, x, norm, sublayer, training):
        if self.pre_norm:
            return x + self.residual_dropout(sublayer(norm(x)), training=training)
        return norm(x + self.residual_dropout(sublayer(x), training=training))

    def feed_forward_residual(self, x, training):
        def ffn(y):
            return self.feed_forward(y, training=training)

        return self.residual(x, self.ffn_norm, ffn, training)

    def get_config(self):
        return {**super().get_config(), **self.hp}


@register
class EncoderBlock(_Block):
    def __init__(self, d_model, num_heads, filter_size, dropout, pre_norm, **kwargs):
        super().__init__(d_model, num_heads, filter_size, dropout, pre_norm, **kwargs)
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, name="self_attention")
        self.attention_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="attention_norm")

    def call(self, x, blocked, training=None):
        def attend(y):
            return self.self_attention(y, y, blocked, training=training)

        x = self.residual(x, self.attention_norm, attend, training)
        return self.feed_forward_residual(x, training)


@register
class DecoderBlock(_Block):
    def __init__(self, d_model, num_heads, filter_size, dropout, pre_norm, **kwargs):
        super().__init__(d_model, num_heads, filter_size, dropout, pre_norm, **kwargs)
        self.self_attention = MultiHeadAttention(d_model, num_heads, dropout, name="self_attention")
        self.cross_attention = MultiHeadAttention(
            d_model, num_heads, dropout, name="cross_attention"
        )
        self.self_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="self_norm")
        self.cross_norm = keras.layers.LayerNormalization(epsilon=1e-6, name="cross_norm")

    def call(self, x, memory, self_blocked, memory_blocked, training=None):
        def attend_self(y):
            return self.self_attention(y, y, self_blocked, training=training)

        def attend_memory(y):
            return self.cross_attention(y, memory, memory_blocked, training=training)

        x = self.residual(x, self.self_norm, attend_self, training)
        x = self.residual(x, self.cross_norm, attend_memory, training)
        return self.feed_forward_residual(x, training)

    def decode_step(self, x, memory_kv, memory_bias, cache, step):
        """One position ``x`` (batch, 1, d_model) at index ``step``, without dropout.

        ``cache`` holds this block's self-attention keys and values of all
        positions (batch, heads, max_length, depth); the step's own are
        written at ``step`` and the later ones are masked. Returns (x, cache).
        """
        length = tf.shape(cache["key"])[2]
        at_step = tf.one_hot(step, length, dtype=cache["key"].dtype)[None, None, :, None]
        bias = mask_bias(tf.range(length) > step)[None, None, None, :]
        updated = {}

        def attend_self(y):
            key, value = self.self_attention.project_key_value(y)
            updated["key"] = cache["key"] * (1.0 - at_step) + key * at_step
            updated["value"] = cache["value"] * (1.0 - at_step) + value * at_step
            return self.self_attention.attend(y, updated["key"], updated["value"], bias)

        def attend_memory(y):
            return self.cross_attention.attend(y, *memory_kv, memory_bias)

        x = self.residual(x, self.self_norm, attend_self, False)
        x = self.residual(x, self.cross_norm, attend_memory, False)
        return self.feed_forward_residual(x, False), updated


class _Stack(_Composite):
    """Positions, input dropout and ``num_layers`` blocks (+ a final norm when pre-norm)."""

    block_class: type

    def __init__(self, num_layers, d_model, num_heads, filter_size, dropout, pre_norm, **kwargs):
        super().__init__(**kwargs)
        self.hp = {
            "num_layers": num_layers,
            "d_model": d_model,
            "num_heads": num_heads,
            "filter_size": filter_size,
            "dropout": dropout,
            "pre_norm": pre_norm,
        }
        self.d_model, self.num_heads = d_model, num_heads
        self.input_dropout = keras.layers.Dropout(dropout)
        self.blocks = [
            self.block_class(d_model, num_heads, filter_size, dropout, pre_norm, name=f"block_{i}")
            for i in range(num_layers)
        ]
        self.final_norm = (
            keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm") if pre_norm else None
        )

    def with_positions(self, embedded, training=None):
        length = tf.shape(embedded)[1]
        positions = positional_encoding(tf.cast(tf.range(length), tf.float32), self.d_model)
        positions = tf.cast(positions, embedded.dtype)  # the compute dtype
        return self.input_dropout(embedded + positions, training=training)

    def finish(self, x):
        return self.final_norm(x) if self.final_norm is not None else x

    def get_config(self):
        return {**super().get_config(), **self.hp}


@register
class Encoder(_Stack):
    """``[embedded source, source ids]`` -> encoder output (the decoder's memory)."""

    block_class = EncoderBlock

    def call(self, inputs, training=None):
        embedded, source_ids = inputs
        blocked = padding_mask(source_ids)
        x = self.with_positions(embedded, training)
        for block in self.blocks:
            x = block(x, blocked, training=training)
        return self.finish(x)


@register
class Decoder(_Stack):
    """``[embedded target input, memory, source ids]`` -> decoder output, causally masked."""

    block_class = DecoderBlock

    def call(self, inputs, training=None):
        embedded, memory, source_ids = inputs
        self_blocked = causal_mask(tf.shape(embedded)[1])
        memory_blocked = padding_mask(source_ids)
        x = self.with_positions(embedded, training)
        for block in self.blocks:
            x = block(x, memory, self_blocked, memory_blocked, training=training)
        return self.finish(x)

    def memory_key_values(self, memory):
        """Each block's encoder-decoder keys and values, computed once per sentence."""
        return [block.cross_attention.project_key_value(memory) for block in self.blocks]

    def initial_cache(self, batch, max_length: int):
        """Empty self-attention keys/values of each block for ``max_length`` steps."""
        shape = [batch, self.num_heads, max_length, self.d_model // self.num_heads]
        zeros = functools.partial(tf.zeros, shape, self.compute_dtype)
        return [{"key": zeros(), "value": zeros()} for _ in self.blocks]

    def decode_step(self, embedded, memory_kv, memory_bias, cache, step):
        """Decoder output (batch, 1, d_model) for one position; returns (x, cache)."""
        position = tf.cast(tf.reshape(step, [1]), tf.float32)
        x = embedded + tf.cast(positional_encoding(position, self.d_model), embedded.dtype)
        updated = []
        for block, kv, block_cache in zip(self.blocks, memory_kv, cache, strict=True):
            x, block_cache = block.decode_step(x, kv, memory_bias, block_cache, step)
            updated.append(block_cache)
        return self.finish(x), updated
