"""Step time and import time on a rank: tntrun's Keras 3 data parallelism against tf_keras with
Horovod's ``DistributedOptimizer`` (tntrun's tf_keras engine).

    horovodrun --gloo -np 2 -H localhost:2 python bench/keras3_step_time.py keras3|tf_keras \\
        [--steps N] [--agreement]

A 64-128-128-10 MLP with SGD at micro-batch 32 per rank is trained with ``fit``. A warm-up
epoch traces the step first. Rank 0 prints one JSON line with the wall and CPU seconds of
each import (``import tensorflow`` imports Keras 3 itself, tf_keras only on request), the
seconds from start to the end of the first step, the median and mean step time of a timed
epoch, and which of Keras, pandas, scikit-learn and matplotlib got imported. Run the two
frameworks interleaved, a few times each: the machine's load drifts.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

START = time.perf_counter()
ARGS = argparse.ArgumentParser()
ARGS.add_argument("framework", choices=("keras3", "tf_keras"))
ARGS.add_argument("--steps", type=int, default=300)
ARGS.add_argument("--agreement", action="store_true", help="with tntrun's step agreement")
OPTIONS = ARGS.parse_args()
KERAS3 = OPTIONS.framework == "keras3"
if KERAS3:
    os.environ["KERAS_BACKEND"] = "tensorflow"
    os.environ.pop("TF_USE_LEGACY_KERAS", None)
else:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"

import json  # noqa: E402

import numpy as np  # noqa: E402

SECONDS: dict[str, list[float]] = {}  # name -> [wall, CPU] seconds
HEAVY = ("keras", "tf_keras", "pandas", "sklearn", "matplotlib")


def timed_import(name: str, load):
    wall, cpu = time.perf_counter(), time.process_time()
    module = load()
    SECONDS[name] = [round(time.perf_counter() - wall, 3), round(time.process_time() - cpu, 3)]
    return module


tf = timed_import("tensorflow", lambda: __import__("tensorflow"))
WITH_TENSORFLOW = [m for m in HEAVY if m in sys.modules]  # TF 2.18 imports Keras 3 itself
keras = timed_import("keras", lambda: __import__("keras" if KERAS3 else "tf_keras"))
hvd = timed_import("horovod", lambda: __import__("horovod.tensorflow", fromlist=["init"]))


def tntrun_engine():
    if KERAS3:
        from tntrun.engine import data_parallel

        return data_parallel
    from tntrun.engine import distributed_optimizer, step_agreement

    return distributed_optimizer, step_agreement


ENGINE = timed_import("tntrun_engine", tntrun_engine)


def compiled_model():
    """The MLP compiled with the framework's data-parallel SGD, state broadcast from rank 0."""
    keras.utils.set_random_seed(0)
    layers = [
        keras.Input((64,)),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ]
    model = keras.Sequential(layers)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    callbacks = []
    if KERAS3:
        optimizer = ENGINE.data_parallel(keras.optimizers.SGD(0.01))
        if OPTIONS.agreement:
            callbacks.append(ENGINE.agree_after_each_step(optimizer))
        model.compile(optimizer=optimizer, loss=loss, jit_compile=False)
        ENGINE.broadcast_state(model, optimizer)
    else:
        distributed_optimizer, step_agreement = ENGINE
        optimizer = distributed_optimizer.distributed_optimizer(keras.optimizers.SGD(0.01))
        if OPTIONS.agreement:
            callbacks.append(step_agreement.agree_after_each_step(optimizer))
        model.compile(optimizer=optimizer, loss=loss)
        hvd.broadcast_variables(model.variables, root_rank=0)
    return model, callbacks


class StepClock(keras.callbacks.Callback):
    """The time at the end of every batch."""

    def __init__(self) -> None:
        super().__init__()
        self.ends: list[float] = []

    def on_train_batch_end(self, batch, logs=None):
        self.ends.append(time.perf_counter())


def main() -> None:
    hvd.init()
    model, callbacks = compiled_model()
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(32 * OPTIONS.steps, 64)).astype("float32")
    y = rng.integers(0, 10, 32 * OPTIONS.steps)
    first = StepClock()
    model.fit(
        x[: 32 * 20],
        y[: 32 * 20],
        batch_size=32,
        verbose=0,
        shuffle=False,
        callbacks=[*callbacks, first],
    )
    clock = StepClock()
    model.fit(x, y, batch_size=32, verbose=0, shuffle=False, callbacks=[*callbacks, clock])
    steps_ms = np.diff(clock.ends) * 1e3
    if hvd.rank() == 0:
        record = {
            "framework": OPTIONS.framework,
            "agreement": OPTIONS.agreement,
            "keras": keras.__version__,
            "import_wall_cpu_s": SECONDS,
            "imported_by_tensorflow": WITH_TENSORFLOW,
            "start_to_first_step_s": round(first.ends[0] - START, 2),
            "step_ms_median": round(float(np.median(steps_ms)), 3),
            "step_ms_mean": round(float(np.mean(steps_ms)), 3),
            "imported": [m for m in HEAVY if m in sys.modules],
        }
        print("STEP_TIME " + json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
