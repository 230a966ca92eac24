"""Cost of the non-finite loss guard per training step, measured on real ranks.

    horovodrun -np 2 -H localhost:2 --gloo .venv/bin/python bench/nonfinite_guard.py [--model cnn]

Each rank trains the same model on digits with tntrun's data-parallel optimizer,
alternating blocks of epochs without and with the guard (the loss averaged in
the step's Horovod cycle, one scalar read per step), and rank 0 prints the
median step time of each and their ratio. Interleaving puts both under the
same machine load.
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from tntrun.datasets.digits import DigitsDataset  # noqa: E402
from tntrun.engine import data_parallel as dp  # noqa: E402
from tntrun.engine.nonfinite import NonFiniteGuard  # noqa: E402
from tntrun.models.cnn import build_cnn  # noqa: E402
from tntrun.models.mlp import build_mlp  # noqa: E402


class StepTimer(keras.callbacks.Callback):
    def __init__(self) -> None:
        super().__init__()
        self.times: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        self._start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter() - self._start)


def compiled(build, info, guarded: bool):
    model = build(info.input_shape, info.num_classes)
    optimizer = dp.data_parallel(keras.optimizers.Adam(0.002))
    callbacks = []
    if guarded:
        agreement = dp.agree_after_each_step(optimizer)
        callbacks += [agreement, NonFiniteGuard(agreement)]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    model.compile(optimizer=optimizer, loss=loss, metrics=["accuracy"], jit_compile=False)
    dp.broadcast_state(model, optimizer)
    return model, callbacks


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("mlp", "cnn"), default="mlp")
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    hvd.init()
    tf.config.threading.set_intra_op_parallelism_threads(1)
    data = DigitsDataset()
    info = data.info()
    train, _ = data.load()
    batches = train.shard(hvd.size(), hvd.rank()).batch(32, drop_remainder=True).repeat()
    build = build_mlp if args.model == "mlp" else build_cnn
    runs = {False: compiled(build, info, False), True: compiled(build, info, True)}
    steps = {False: [], True: []}
    for round_ in range(args.rounds):
        for guarded in (False, True) if round_ % 2 == 0 else (True, False):
            model, callbacks = runs[guarded]
            timer = StepTimer()
            model.fit(
                batches, epochs=2, steps_per_epoch=22, verbose=0, callbacks=[*callbacks, timer]
            )
            if round_:  # the first round traces and warms up
                steps[guarded].extend(timer.times[22:])
    if hvd.rank() == 0:
        plain, guard = (float(np.median(steps[g])) * 1e3 for g in (False, True))
        print(
            json.dumps(
                {
                    "model": args.model,
                    "steps_each": len(steps[True]),
                    "median_step_ms_without": round(plain, 3),
                    "median_step_ms_with_guard": round(guard, 3),
                    "ratio": round(guard / plain, 4),
                }
            )
        )


if __name__ == "__main__":
    main()
