"""Translating with a trained Transformer: batched greedy and beam-search decoding.

Decoding runs the training model's own layers, not a copy: :class:`TransformerParts`
looks up the layers named ``embedding``, ``encoder`` and ``decoder`` in the
model built by ``tntrun.models.transformer.build_transformer`` (or one loaded
from a ``.keras`` file) and calls them directly. The source is encoded once;
the decoder then runs one position per step (``Decoder.decode_step``) with a
key/value cache of the earlier positions and the encoder-decoder keys/values
computed once. Any change of the model's weights shows in the next translation.

Both decoders return an int32 array (batch, max_length): each row is the
generated tokens, ending with EOS (id 2) followed by padding (id 0), or
``max_length`` tokens without EOS when decoding stopped there. The loops are
compiled with ``tf.function`` once per model and decoding setting.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from tntrun.datasets.translation_text import BOS_ID, EOS_ID, PAD_ID

NEG_INF = -1e9
_compiled: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class TransformerParts:
    """The trained model's shared embedding, encoder and decoder layers."""

    embedding: Any
    encoder: Any
    decoder: Any

    @classmethod
    def of(cls, model) -> TransformerParts:
        from tntrun.models.transformer import layer_classes

        layer_classes()  # registers the layer classes (models loaded from files)
        try:
            return cls(*(model.get_layer(name) for name in ("embedding", "encoder", "decoder")))
        except ValueError as err:
            raise ValueError(
                f"{model.name} lacks the Transformer layers embedding/encoder/decoder: "
                "build it with tntrun.models.transformer.build_transformer"
            ) from err

    def encode(self, source):
        """Encoder output of int32 ``source`` ids (batch, length)."""
        return self.encoder([self.embedding(source), source], training=False)

    def start(self, source, memory, max_length: int):
        """(encoder-decoder keys/values, memory bias, empty cache) for decoding."""
        from tntrun.models.transformer import layer_classes

        bias = layer_classes().padding_bias(source)
        cache = self.decoder.initial_cache(_batch(source), max_length)
        return self.decoder.memory_key_values(memory), bias, cache

    def step_logits(self, tokens, memory_kv, memory_bias, cache, step):
        """Float32 logits (batch, vocabulary) of the token after ``tokens`` (batch,) at ``step``."""
        import tensorflow as tf

        x = self.embedding(tokens[:, None])
        x, cache = self.decoder.decode_step(x, memory_kv, memory_bias, cache, step)
        return tf.cast(self.embedding(x, mode="linear")[:, 0], tf.float32), cache


def _batch(x):
    import tensorflow as tf

    return tf.shape(x)[0]


def _decoder(model, key: tuple, make):
    """The compiled decoding function ``make(parts)`` of ``model`` for settings ``key``."""
    per_model = _compiled.setdefault(model, {})
    if key not in per_model:
        import tensorflow as tf

        spec = tf.TensorSpec([None, None], tf.int32)
        per_model[key] = tf.function(make(TransformerParts.of(model)), input_signature=[spec])
    return per_model[key]


def _greedy(parts: TransformerParts, max_length: int):
    import tensorflow as tf

    def decode(source):
        batch = tf.shape(source)[0]
        memory_kv, bias, cache = parts.start(source, parts.encode(source), max_length)

        def body(step, last, finished, tokens, cache):
            logits, cache = parts.step_logits(last, memory_kv, bias, cache, step)
            token = tf.where(finished, PAD_ID, tf.argmax(logits, -1, output_type=tf.int32))
            tokens += tf.one_hot(step, max_length, dtype=tf.int32)[None, :] * token[:, None]
            return step + 1, token, finished | tf.equal(token, EOS_ID), tokens, cache

        def running(step, last, finished, tokens, cache):
            return (step < max_length) & ~tf.reduce_all(finished)

        start = (
            tf.constant(0),
            tf.fill([batch], BOS_ID),
            tf.zeros([batch], tf.bool),
            tf.zeros([batch, max_length], tf.int32),
            cache,
        )
        return tf.while_loop(running, body, start)[3]

    return decode


def greedy_translate(model, source_ids, max_length: int) -> np.ndarray:
    """Most likely next token at every step, for a batch of padded ``source_ids``."""
    fn = _decoder(model, ("greedy", max_length), lambda parts: _greedy(parts, max_length))
    return fn(np.asarray(source_ids, np.int32)).numpy()


def _beam(parts: TransformerParts, max_length: int, beam_size: int, alpha: float):
    def decode(source):
        return _BeamSearch(parts, source, max_length, beam_size, alpha).run()

    return decode


class _BeamSearch:
    """The beam search of one batch of sentences, traced into the compiled decoder.

    ``k`` hypotheses per sentence decode side by side (row ``b * k + j``: beam ``j`` of
    sentence ``b``). Each step grows every alive beam by its ``2 * k`` best tokens; the
    ``k`` best that did not end stay alive, those that ended compete with the finished
    ones by length-normalised score. The loop's state: (step, alive, alive_logp, done,
    done_score, done_flag, cache).
    """

    def __init__(self, parts: TransformerParts, source, max_length: int, k: int, alpha: float):
        import tensorflow as tf

        self.parts, self.max_length, self.k, self.alpha = parts, max_length, k, alpha
        self.batch = tf.shape(source)[0]
        tiled = tf.repeat(source, k, axis=0)  # row b * k + j: beam j of sentence b
        self.memory_kv, self.bias, self.cache = parts.start(tiled, parts.encode(tiled), max_length)

    def run(self):
        """The best finished hypothesis of each sentence (the best alive one if none ended)."""
        import tensorflow as tf

        batch, k, max_length = self.batch, self.k, self.max_length
        first = tf.concat([[0.0], tf.fill([k - 1], NEG_INF)], 0)  # expand one beam at first
        start = (
            tf.constant(0),
            tf.zeros([batch, k, max_length], tf.int32),
            tf.tile(first[None], [batch, 1]),
            tf.zeros([batch, k, max_length], tf.int32),
            tf.fill([batch, k], NEG_INF),
            tf.zeros([batch, k], tf.bool),
            self.cache,
        )
        _, alive, _, done, _, done_flag, _ = tf.while_loop(self.running, self.body, start)
        return tf.where(tf.reduce_any(done_flag, 1)[:, None], done[:, 0], alive[:, 0])

    def length_penalty(self, length):
        import tensorflow as tf

        return ((5.0 + tf.cast(length, tf.float32)) / 6.0) ** self.alpha

    def running(self, step, alive, alive_logp, done, done_score, done_flag, cache):
        """Whether to go on: until ``max_length``, or until no alive beam can still beat
        the worst finished one."""
        import tensorflow as tf

        best_alive = alive_logp[:, 0] / self.length_penalty(self.max_length)
        flags = tf.cast(done_flag, tf.float32)
        worst_done = tf.reduce_min(done_score * flags, axis=1)
        worst_done += (1.0 - tf.reduce_max(flags, axis=1)) * NEG_INF
        return (step < self.max_length) & ~tf.reduce_all(worst_done > best_alive)

    def body(self, step, alive, alive_logp, done, done_score, done_flag, cache):
        """One step: grow the beams, keep the best alive, rank the ended with the finished."""
        grown, top_logp, origin, ended, cache = self.grow(step, alive, alive_logp, cache)
        alive, alive_logp, cache = self.keep_alive(grown, top_logp, origin, ended, cache)
        done, done_score, done_flag = self.keep_done(
            step, grown, top_logp, ended, done, done_score, done_flag
        )
        return step + 1, alive, alive_logp, done, done_score, done_flag, cache

    def grow(self, step, alive, alive_logp, cache):
        """The ``2 * k`` best continuations of each sentence's beams: (their tokens so far,
        log-probabilities, the beams they grew from, whether they ended), and the cache."""
        import tensorflow as tf

        batch, k = self.batch, self.k
        previous = tf.concat([tf.fill([batch, k, 1], BOS_ID), alive], 2)[:, :, step]
        logits, cache = self.parts.step_logits(
            tf.reshape(previous, [-1]), self.memory_kv, self.bias, cache, step
        )
        logp = tf.reshape(tf.nn.log_softmax(logits), [batch, k, -1])
        vocab = tf.shape(logp)[2]
        scores = tf.reshape(alive_logp[:, :, None] + logp, [batch, -1])
        top_logp, top = tf.math.top_k(scores, k=2 * k)
        origin, token = top // vocab, top % vocab
        position = tf.one_hot(step, self.max_length, dtype=tf.int32)[None, None, :]
        grown = tf.gather(alive, origin, batch_dims=1) + position * token[:, :, None]
        return grown, top_logp, origin, tf.equal(token, EOS_ID), cache

    def keep_alive(self, grown, top_logp, origin, ended, cache):
        """The ``k`` best continuations that did not end, and the cache of the beams they
        grew from."""
        import tensorflow as tf

        alive_logp, keep = tf.math.top_k(top_logp + tf.cast(ended, tf.float32) * NEG_INF, self.k)
        alive = tf.gather(grown, keep, batch_dims=1)
        beams = tf.gather(origin, keep, batch_dims=1)
        cache = tf.nest.map_structure(
            lambda t: self.flatten(tf.gather(self.regroup(t), beams, batch_dims=1)), cache
        )
        return alive, alive_logp, cache

    def keep_done(self, step, grown, top_logp, ended, done, done_score, done_flag):
        """The ``k`` best finished hypotheses: the earlier ones and those ending now, by
        log-probability over the length penalty."""
        import tensorflow as tf

        ended_score = top_logp / self.length_penalty(step + 1)
        ended_score += (1.0 - tf.cast(ended, tf.float32)) * NEG_INF
        done_score, pick = tf.math.top_k(tf.concat([done_score, ended_score], 1), self.k)
        done = tf.gather(tf.concat([done, grown], 1), pick, batch_dims=1)
        done_flag = tf.gather(tf.concat([done_flag, ended], 1), pick, batch_dims=1)
        return done, done_score, done_flag

    def regroup(self, t):
        """(batch * k, ...) -> (batch, k, ...)."""
        import tensorflow as tf

        return tf.reshape(t, tf.concat([[self.batch, self.k], tf.shape(t)[1:]], 0))

    @staticmethod
    def flatten(t):
        """(batch, k, ...) -> (batch * k, ...)."""
        import tensorflow as tf

        return tf.reshape(t, tf.concat([[-1], tf.shape(t)[2:]], 0))


def beam_translate(
    model, source_ids, max_length: int, beam_size: int = 4, alpha: float = 0.6
) -> np.ndarray:
    """Beam search; finished hypotheses are ranked by log-probability / ((5 + len) / 6)^alpha."""
    if beam_size < 1:
        raise ValueError(f"beam_size={beam_size}: use at least 1")
    key = ("beam", max_length, beam_size, float(alpha))
    fn = _decoder(model, key, lambda parts: _beam(parts, max_length, beam_size, alpha))
    return fn(np.asarray(source_ids, np.int32)).numpy()
