"""Run under ``horovodrun -np 2``: tntrun's Keras 3 data parallelism
(tntrun.engine.data_parallel) on real ranks.

Every rank trains on its own data, so weights equal across ranks mean the gradients were
averaged. Each rank prints one line ``RESULT {json}`` that tests/engine/test_data_parallel.py
asserts on. The script itself asserts nothing: a rank failing alone would leave the other
waiting in a collective.

a. A functional model, a subclassed model with a custom keras.ops layer, and a model with
   its own train_step: they start from different weights on each rank and end with the
   same weights.
b. 2 ranks with B/2 each equal 1 process with B (plain Keras, no Horovod).
c. backward_passes_per_step=2 on micro-batch b equals one step on 2b, with one allreduce
   per 2 micro-steps, and the schedule sees every micro-step.
d. mixed_float16 with an overflow on rank 1 only: both ranks skip that update and halve the
   loss scale.
e. fp16 compression: equal weights, close to uncompressed training.
f. The step agreement: the mean of the ranks' losses, and a stop requested by one rank.
g. tf_keras refused; h. jit_compile refused; i. compile's LossScaleOptimizer wrapping refused.
"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.pop("TF_USE_LEGACY_KERAS", None)  # this script trains Keras 3

import json  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.engine import data_parallel as dp  # noqa: E402

FEATURES, CLASSES = 6, 3
LOSS = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

hvd.init()
RANK = hvd.rank()

# Every grouped allreduce tntrun runs, counted when it executes (also inside tf.function).
ALLREDUCES = tf.Variable(0, dtype=tf.int64, trainable=False)
_grouped_allreduce = hvd.grouped_allreduce


def _counted_grouped_allreduce(tensors, *args, **kwargs):
    reduced = _grouped_allreduce(tensors, *args, **kwargs)
    dense = [t for t in reduced if not isinstance(t, tf.IndexedSlices)]
    with tf.control_dependencies(dense):
        ALLREDUCES.assign_add(1)
    return reduced


hvd.grouped_allreduce = _counted_grouped_allreduce


def allreduces_during(run) -> int:
    ALLREDUCES.assign(0)
    run()
    return int(ALLREDUCES.numpy())


def data(seed: int, n: int, rank: int = RANK) -> tuple[np.ndarray, np.ndarray]:
    """``rank``'s own ``n`` samples (different on every rank)."""
    rng = np.random.default_rng([seed, rank])
    return rng.normal(size=(n, FEATURES)).astype("float32"), rng.integers(0, CLASSES, n)


def across_ranks(value):
    return hvd.allgather_object(value)


def rank_spread(weights: list[np.ndarray]) -> float:
    """Largest difference between rank 0's and rank 1's ``weights`` (0.0: identical)."""
    first, second = across_ranks([np.asarray(w) for w in weights])
    return max(float(np.max(np.abs(a - b))) for a, b in zip(first, second, strict=True))


def relative_difference(got: list[np.ndarray], want: list[np.ndarray]) -> float:
    """The largest ||got - want|| / ||want|| over the weight tensors."""
    return max(
        float(np.linalg.norm(g - w) / np.linalg.norm(w)) for g, w in zip(got, want, strict=True)
    )


def largest_change(before: list[np.ndarray], after: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(a - b))) for a, b in zip(before, after, strict=True))


def data_differ(x: np.ndarray) -> bool:
    first, second = across_ranks(x)
    return not np.array_equal(first, second)


def mlp(seed: int, hidden: int = 16, dtype_out: bool = False) -> keras.Model:
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((FEATURES,))
    hidden_out = keras.layers.Dense(hidden, activation="relu")(inputs)
    logits = keras.layers.Dense(CLASSES)(hidden_out)
    if dtype_out:  # float32 logits under mixed precision
        logits = keras.layers.Activation("linear", dtype="float32")(logits)
    return keras.Model(inputs, logits)


class Gate(keras.layers.Layer):
    """A custom layer written with keras.ops."""

    def build(self, input_shape):
        self.gain = self.add_weight(shape=(input_shape[-1],), initializer="random_normal")

    def call(self, x):
        return keras.ops.tanh(x * self.gain) + keras.ops.sin(x)


class Subclassed(keras.Model):
    def __init__(self):
        super().__init__()
        self.gate = Gate()
        self.logits = keras.layers.Dense(CLASSES)

    def call(self, x):
        return self.logits(self.gate(x))


class OwnStep(keras.Model):
    """A model whose train_step is the user's: gradients by hand, optimizer.apply."""

    def __init__(self):
        super().__init__()
        self.hidden = keras.layers.Dense(16, activation="relu")
        self.logits = keras.layers.Dense(CLASSES)

    def call(self, x):
        return self.logits(self.hidden(x))

    def train_step(self, batch):
        x, y = batch
        with tf.GradientTape() as tape:
            loss = self.compute_loss(x=x, y=y, y_pred=self(x, training=True))
            scaled = self.optimizer.scale_loss(loss)
        grads = tape.gradient(scaled, self.trainable_variables)
        self.optimizer.apply(grads, self.trainable_variables)
        return {"loss": loss}


def built(model: keras.Model) -> keras.Model:
    model(np.zeros((1, FEATURES), "float32"))
    return model


def restores_plain(optimizer, base: type) -> bool:
    """Whether ``optimizer`` serialises as ``base`` and deserialises to a plain ``base``."""
    config = keras.saving.serialize_keras_object(optimizer)
    restored = keras.saving.deserialize_keras_object(config)
    return config["class_name"] == base.__name__ and type(restored) is base


def check_models() -> dict:
    """a. Three kinds of model: different initial weights, different data, same result."""
    makers = {
        "functional": lambda: mlp(100 + RANK),
        "subclassed": lambda: built(Subclassed()),
        "own_train_step": lambda: built(OwnStep()),
    }
    results = {}
    for name, make in makers.items():
        keras.utils.set_random_seed(100 + RANK)  # each rank its own initial weights
        model = make()
        initial_spread = rank_spread(model.get_weights())
        model.compile(optimizer=dp.data_parallel(keras.optimizers.Adam(0.01)), loss=LOSS)
        dp.broadcast_state(model, model.optimizer)
        start = model.get_weights()
        x, y = data(1, 24)
        model.fit(x, y, batch_size=8, epochs=1, shuffle=False, verbose=0)
        moved = largest_change(start, model.get_weights())
        results[name] = {
            "initial_spread": initial_spread,
            "broadcast_spread": rank_spread(start),
            "final_spread": rank_spread(model.get_weights()),
            "moved": moved,
            "data_differ": data_differ(x),
            "optimizer_is_adam": isinstance(model.optimizer, keras.optimizers.Adam),
            "restores_plain": restores_plain(model.optimizer, keras.optimizers.Adam),
        }
    return results


def check_global_batch() -> dict:
    """b. 2 ranks with B/2 each vs 1 process with B, same data order, SGD."""
    batch, steps = 16, 4
    rng = np.random.default_rng(7)
    x = rng.normal(size=(batch * steps, FEATURES)).astype("float32")
    y = rng.integers(0, CLASSES, batch * steps)
    half = batch // 2
    mine = np.concatenate(
        [np.arange(s * batch + RANK * half, s * batch + (RANK + 1) * half) for s in range(steps)]
    )

    reference = mlp(0)
    reference.compile(optimizer=keras.optimizers.SGD(0.2), loss=LOSS)
    reference.fit(x, y, batch_size=batch, shuffle=False, verbose=0)

    local_only = mlp(0)  # what a rank would learn without averaging
    local_only.compile(optimizer=keras.optimizers.SGD(0.2), loss=LOSS)
    local_only.fit(x[mine], y[mine], batch_size=half, shuffle=False, verbose=0)

    model = mlp(0)
    model.compile(optimizer=dp.data_parallel(keras.optimizers.SGD(0.2)), loss=LOSS)
    dp.broadcast_state(model, model.optimizer)
    model.fit(x[mine], y[mine], batch_size=half, shuffle=False, verbose=0)
    want = reference.get_weights()
    return {
        "relative_difference": relative_difference(model.get_weights(), want),
        "without_averaging": relative_difference(local_only.get_weights(), want),
        "data_differ": data_differ(x[mine]),
    }


def check_accumulation() -> dict:
    """c. backward_passes_per_step=2 at micro-batch 4 vs one step at 8; schedule per micro-step."""
    x, y = data(3, 16)

    def schedule():
        return keras.optimizers.schedules.ExponentialDecay(0.2, decay_steps=1, decay_rate=0.5)

    accumulated = mlp(0)
    optimizer = dp.data_parallel(keras.optimizers.SGD(schedule()), backward_passes_per_step=2)
    accumulated.compile(optimizer=optimizer, loss=LOSS)
    dp.broadcast_state(accumulated, optimizer)
    fit = accumulated.fit
    count = allreduces_during(lambda: fit(x, y, batch_size=4, shuffle=False, verbose=0))

    single = mlp(0)
    single_optimizer = dp.data_parallel(keras.optimizers.SGD(schedule()))
    single.compile(optimizer=single_optimizer, loss=LOSS)
    dp.broadcast_state(single, single_optimizer)

    def two_big_steps():
        for k in range(2):  # each update where the accumulated one's schedule stands
            single_optimizer.iterations.assign(2 * k + 1)
            single.train_on_batch(x[8 * k : 8 * k + 8], y[8 * k : 8 * k + 8])

    single_count = allreduces_during(two_big_steps)
    return {
        "micro_steps": 4,
        "allreduces": count,
        "single_step_allreduces": single_count,
        "iterations": int(optimizer.iterations.numpy()),
        "relative_difference": relative_difference(accumulated.get_weights(), single.get_weights()),
        "final_spread": rank_spread(accumulated.get_weights()),
        "data_differ": data_differ(x),
    }


def check_loss_scaling() -> dict:
    """d. mixed_float16: rank 1 overflows at step 2; every rank skips it and halves the scale."""
    keras.config.set_dtype_policy("mixed_float16")
    try:
        model = mlp(0, dtype_out=True)
        optimizer = dp.data_parallel(keras.optimizers.LossScaleOptimizer(keras.optimizers.SGD(0.1)))
        model.compile(optimizer=optimizer, loss=LOSS)
        dp.broadcast_state(model, optimizer)
        applied, scales = [], []
        for step in range(4):
            x, y = data(10 + step, 8)
            if step == 2 and RANK == 1:
                x[0, 0] = 1e6  # beyond float16: inf in the forward pass, on this rank only
            before = model.get_weights()
            model.train_on_batch(x, y)
            applied.append(largest_change(before, model.get_weights()) > 0)
            scales.append(float(optimizer.dynamic_scale.numpy()))
        return {
            "kept_by_compile": model.optimizer is optimizer,
            "applied": applied,
            "scales": scales,
            "scales_on_ranks": across_ranks(scales[-1]),
            "final_spread": rank_spread(model.get_weights()),
            "iterations": int(optimizer.iterations.numpy()),
            "compute_dtype": model.layers[1].compute_dtype,
        }
    finally:
        keras.config.set_dtype_policy("float32")


def check_compression() -> dict:
    """e. fp16 compression: equal weights on the ranks, close to uncompressed training."""
    x, y = data(5, 24)
    weights, counts = {}, {}
    for name, compression in (("fp16", hvd.Compression.fp16), ("none", hvd.Compression.none)):
        model = mlp(0)
        optimizer = dp.data_parallel(keras.optimizers.SGD(0.2), compression=compression)
        agreement = dp.agree_after_each_step(optimizer)
        model.compile(optimizer=optimizer, loss=LOSS)
        dp.broadcast_state(model, optimizer)
        fit = model.fit
        counts[name] = allreduces_during(
            lambda fit=fit, agreement=agreement: fit(
                x, y, batch_size=8, shuffle=False, verbose=0, callbacks=[agreement]
            )
        )
        weights[name] = model.get_weights()
    return {
        "final_spread": rank_spread(weights["fp16"]),
        "relative_difference_to_uncompressed": relative_difference(
            weights["fp16"], weights["none"]
        ),
        "grouped_allreduces_per_step": {k: v / 3 for k, v in counts.items()},
        "data_differ": data_differ(x),
    }


def check_agreement() -> dict:
    """f. The agreement vector: the mean of the ranks' losses; one rank's stop reaches all."""
    model = mlp(0)
    optimizer = dp.data_parallel(keras.optimizers.SGD(0.2))
    agreement = dp.agree_after_each_step(optimizer)
    model.compile(optimizer=optimizer, loss=LOSS)
    dp.broadcast_state(model, optimizer)
    steps = []
    for step in range(3):
        x, y = data(20 + step, 8)
        local = float(model.compute_loss(x=x, y=y, y_pred=model(x, training=True)))
        if step == 2 and RANK == 1:
            agreement.request_stop()
        count = allreduces_during(lambda x=x, y=y: model.train_on_batch(x, y))
        loss, stop = agreement.read()
        steps.append(
            {
                "agreed": loss,
                "mean": float(np.mean(across_ranks(local))),
                "local": local,
                "stop": stop,
                "allreduces": count,
            }
        )
    return {"steps": steps}


def check_refusals() -> dict:
    """g-i. One clear ValueError each."""
    import tf_keras

    messages = {}

    def refused(name, run):
        try:
            run()
            messages[name] = None
        except ValueError as err:
            messages[name] = str(err)

    legacy_model = tf_keras.Sequential([tf_keras.Input((FEATURES,)), tf_keras.layers.Dense(2)])
    refused("tf_keras_optimizer", lambda: dp.data_parallel(tf_keras.optimizers.SGD(0.1)))
    refused("tf_keras_model", lambda: dp.broadcast_state(legacy_model, keras.optimizers.SGD()))

    x, y = data(30, 8)
    xla = mlp(0)
    xla.compile(optimizer=dp.data_parallel(keras.optimizers.SGD(0.1)), loss=LOSS, jit_compile=True)
    refused("jit_compile", lambda: xla.fit(x, y, verbose=0))

    keras.config.set_dtype_policy("mixed_float16")
    try:
        wrapped = mlp(0, dtype_out=True)
        inner = dp.data_parallel(keras.optimizers.SGD(0.1), backward_passes_per_step=2)
        wrapped.compile(optimizer=inner, loss=LOSS)  # Keras wraps it in a plain LossScaleOptimizer
        refused("compile_wrapped_loss_scaling", lambda: dp.broadcast_state(wrapped, inner))
        outer = dp.data_parallel(wrapped.optimizer)  # the fix the message names
        messages["moved_outward"] = (
            dp.is_data_parallel(outer)
            and not dp.is_data_parallel(inner)
            and outer._data_parallel.backward_passes_per_step == 2
        )
    finally:
        keras.config.set_dtype_policy("float32")
    return messages


def main() -> None:
    results = {"rank": RANK, "size": hvd.size(), "keras": keras.__version__}
    checks = (
        check_models,
        check_global_batch,
        check_accumulation,
        check_loss_scaling,
        check_compression,
        check_agreement,
        check_refusals,
    )
    for check in checks:
        results[check.__name__.removeprefix("check_")] = check()
    print("RESULT " + json.dumps(results), flush=True)


if __name__ == "__main__":
    main()
