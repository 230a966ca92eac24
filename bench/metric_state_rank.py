"""Rank side of bench/metric_state_cost.py: the epoch-end reductions themselves, timed.

Run under ``horovodrun -np 2``. For the default experiment's MLP and the cnn, compiled as
tntrun compiles them (sparse cross-entropy, accuracy) and for the MLP with AUC, precision
and recall too, one evaluation fills the metric state; then, ``REPEATS`` times in
alternation: the training metrics' epoch-end reduction as tntrun does it now
(``AverageTrainMetrics``: the state summed, the other logs averaged) and as it did before
(one weighted mean of every log's result), and the state reduction alone. Rank 0 prints
one JSON line per model: medians in ms.
"""

import json
import os
import statistics
import time

os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from tntrun.engine.collectives import weighted_mean  # noqa: E402
from tntrun.engine.metric_callbacks import AverageTrainMetrics  # noqa: E402
from tntrun.engine.metric_state import (  # noqa: E402
    pack,
    state_variables,
    sum_metric_state,
    unpack_into,
)
from tntrun.models.cnn import build_cnn  # noqa: E402
from tntrun.models.mlp import build_mlp  # noqa: E402

hvd.init()
REPEATS = int(os.environ.get("REPEATS", "200"))
EXTRA = [keras.metrics.AUC(name="auc"), keras.metrics.Precision(), keras.metrics.Recall()]
MODELS = {
    "default (MLP)": (lambda: build_mlp((64,), 10), (64,), []),
    "cnn": (lambda: build_cnn((8, 8, 1), 10), (8, 8, 1), []),
    "MLP + AUC, precision, recall": (lambda: build_mlp((64,), 2), (64,), EXTRA),
}
OTHER_LOGS = {"lr": 1e-3, "epoch_time_s": 1.0, "samples_per_s": 1e4, "step_time_p50_ms": 5.0}


def prepared(build, shape, extra) -> keras.Model:
    model = build()
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    if extra:  # binary metrics on a 2-class output's second logit
        loss = keras.losses.BinaryCrossentropy(from_logits=True)
        model = keras.Model(model.inputs, model.outputs[0][:, 1:])
    model.compile(optimizer="sgd", loss=loss, weighted_metrics=["accuracy", *extra])
    x = np.random.default_rng(hvd.rank()).normal(size=(256, *shape)).astype("float32")
    y = (x.reshape(256, -1)[:, 0] > 0).astype("float32" if extra else "int64")
    model.evaluate(x, y, batch_size=64, verbose=0)
    return model


def timed(run, *args, **kwargs) -> float:
    start = time.perf_counter()
    run(*args, **kwargs)
    return 1000 * (time.perf_counter() - start)


for name, (build, shape, extra) in MODELS.items():
    model = prepared(build, shape, extra)
    callback = AverageTrainMetrics(1000)
    callback.set_model(model)
    variables = state_variables(model)
    saved = pack(variables)  # restored after each sum: the state stays the evaluation's
    times: dict[str, list[float]] = {"now": [], "before": [], "state alone": []}
    for i in range(REPEATS):
        logs = {**model.get_metrics_result(), **OTHER_LOGS}
        times["now"].append(timed(callback.on_epoch_end, i, dict(logs)))
        unpack_into(variables, saved)
        times["before"].append(timed(weighted_mean, dict(logs), 1000, name=f"b.{i}"))
        times["state alone"].append(timed(sum_metric_state, model, name=f"s.{i}"))
        unpack_into(variables, saved)
    print(f"rank {hvd.rank()} {name}: {len(saved)} state values", flush=True)
    if hvd.rank() == 0:
        medians = {k: statistics.median(v) for k, v in times.items()}
        print(json.dumps({"model": name, "median_ms": medians}), flush=True)
