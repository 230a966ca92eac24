"""Run under ``horovodrun -np 2``: the peer suite (issue 41 point 7), Tarantella's
data-parallel accuracy and optimizer tests rewritten for tntrun.

Each case trains one model kind (fc, LeNet-5-like conv, Sequential, subclassed) with one
optimizer by tntrun's name, twice: through tntrun's engine pieces on the two ranks, as a run
does (the schema's optimizer section, ``build_optimizer``, ``PlannedSchedule``,
``data_parallel``, ``broadcast_state``, ``distribute_train``, ``AverageTrainMetrics``), and in
plain single-process Keras on the whole global batch, fed the same global order written out
with tf.data alone (tntrun's contract: shuffle with seed*100003+epoch, batches of the global
batch). The serial references are shared out between the ranks after all tntrun training,
so no rank waits in a collective for another's serial work.

A control case trains with the averaging off (each rank on its own shard): it must differ
from its serial reference, or the comparison could not see a broken averaging.

Each rank prints ``RESULT {json}`` with the cases it compared; tests/engine/test_peer_suite.py
asserts on them. The script itself asserts nothing: a rank failing alone would leave the
other waiting in a collective.
"""

import os

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.pop("TF_USE_LEGACY_KERAS", None)  # this script trains Keras 3

import json  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from typing import Any  # noqa: E402

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402

from tntrun.config.schema import OPTIMIZER_SCHEMAS  # noqa: E402
from tntrun.config.settings import OptimizerSettings  # noqa: E402
from tntrun.datasets.digits import DigitsDataset  # noqa: E402
from tntrun.engine import data_parallel as dp  # noqa: E402
from tntrun.engine import precision, runtime  # noqa: E402
from tntrun.engine.data import distribute_train  # noqa: E402
from tntrun.engine.lars import Lars  # noqa: E402
from tntrun.engine.lr_schedule import PlannedSchedule  # noqa: E402
from tntrun.engine.metric_callbacks import AverageTrainMetrics  # noqa: E402
from tntrun.engine.optimizers import build_optimizer  # noqa: E402
from tntrun.engine.output_kind import outputs_probabilities  # noqa: E402
from tntrun.engine.tasks import compile_spec  # noqa: E402
from tntrun.planning.schedules import ScheduleParams  # noqa: E402

GLOBAL_BATCH, STEPS, EPOCHS, SEED = 32, 8, 2, 3
SAMPLES = GLOBAL_BATCH * STEPS  # a whole epoch of full global batches
INPUT_SHAPE = (64,)  # the digits' 8x8 images, flattened
KINDS = ("fc", "lenet5", "sequential", "subclassed")

# The plain-Keras reference's class, by Keras' own name (not tntrun's table; LARS, which Keras
# lacks, is tntrun's class unwrapped), and a learning rate at which GLOBAL_BATCH * STEPS *
# EPOCHS samples move the weights visibly (LARS' trust coefficient 0.001 asks a large one).
REFERENCE = {
    "adam": ("Adam", 1e-3),
    "adamw": ("AdamW", 1e-3),
    "adamax": ("Adamax", 2e-3),
    "nadam": ("Nadam", 1e-3),
    "lamb": ("Lamb", 1e-2),
    "sgd": ("SGD", 0.1),
    "lars": ("Lars", 1.0),
    "rmsprop": ("RMSprop", 1e-3),
    "adagrad": ("Adagrad", 0.05),
    "adadelta": ("Adadelta", 1.0),
    "lion": ("Lion", 1e-3),
    "adafactor": ("Adafactor", 1e-2),
    "ftrl": ("Ftrl", 0.05),
}


@dataclass(frozen=True)
class Case:
    optimizer: str
    kind: str
    arguments: dict = field(default_factory=dict)  # the optimizer section's keys besides

    @property
    def name(self) -> str:
        extra = ",".join(f"{k}={v}" for k, v in self.arguments.items())
        return f"{self.optimizer}{'(' + extra + ')' if extra else ''}/{self.kind}"


def cases() -> list[Case]:
    """Every optimizer tntrun names once, the model kinds in turn (each kind three times or
    more), SGD also with Nesterov momentum as Tarantella's suite has it; with
    ``TNTRUN_PEER_SUITE=full``, every optimizer on every kind (56 cases; not in CI).

    Adafactor states ``epsilon_1=1e-15``: with Keras' 1e-30 its factored second moment
    underflows to 0 in float32 where an always-zero input pixel meets a ReLU unit dead for
    the whole batch (1e-30 * 1e-30), and the weights become NaN, in serial Keras too."""
    arguments = {"adafactor": {"epsilon_1": 1e-15}}
    full = os.environ.get("TNTRUN_PEER_SUITE") == "full"
    chosen = [
        Case(name, kind, arguments.get(name, {}))
        for i, name in enumerate(OPTIMIZER_SCHEMAS)
        for kind in (KINDS if full else [KINDS[i % len(KINDS)]])
    ]
    nesterov = {"momentum": 0.9, "nesterov": True}
    return [*chosen, *(Case("sgd", kind, nesterov) for kind in (KINDS if full else ["lenet5"]))]


class Subclassed(keras.Model):
    """A subclassed model: layers made in ``__init__``, wired in ``call``."""

    def __init__(self) -> None:
        super().__init__()
        self.hidden = keras.layers.Dense(32, activation="relu")
        self.out = keras.layers.Dense(10, activation="softmax")

    def call(self, x):
        return self.out(self.hidden(x))


def build_kind(kind: str) -> keras.Model:
    """The model kinds of Tarantella's suite, sized for 8x8 digits; softmax outputs, as
    there (so tntrun's task loss takes probabilities)."""
    if kind == "subclassed":
        return Subclassed()
    if kind == "sequential":
        layers = [keras.layers.Dense(20, activation="relu") for _ in range(2)]
        return keras.Sequential(
            [keras.Input(INPUT_SHAPE), *layers, keras.layers.Dense(10, activation="softmax")]
        )
    inputs = keras.Input(INPUT_SHAPE)
    if kind == "fc":
        x = keras.layers.Dense(80, activation="relu")(inputs)
        x = keras.layers.Dense(80, activation="relu")(x)
    else:  # lenet5: two conv + pool stages, a small dense layer
        x = keras.layers.Reshape((8, 8, 1))(inputs)
        for _ in range(2):
            x = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(x)
            x = keras.layers.MaxPooling2D(2)(x)
        x = keras.layers.Dense(20, activation="relu")(keras.layers.Flatten()(x))
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


def built_model(kind: str) -> keras.Model:
    """``kind`` with its initial weights from the seed, built as a run builds it."""
    keras.utils.set_random_seed(SEED)
    return precision.float32_outputs(build_kind(kind), INPUT_SHAPE)


def training_data() -> tf.data.Dataset:
    """The first SAMPLES training digits, unbatched (features, label)."""
    train, _ = DigitsDataset().load()
    return train.take(SAMPLES)


def optimizer_section(case: Case) -> dict[str, Any]:
    """The ``optimizer`` config section a run gets for ``case``: the schema's defaults, the
    learning rate stated at this global batch (no scaling), the case's keys."""
    given = {"base_lr": REFERENCE[case.optimizer][1], "base_batch_size": GLOBAL_BATCH}
    schema = OmegaConf.structured(OPTIMIZER_SCHEMAS[case.optimizer])
    return OmegaConf.to_container(OmegaConf.merge(schema, given, case.arguments))


@dataclass
class Trained:
    """What one training left: the initial and final weights, the per-epoch loss and
    accuracy (tntrun's: averaged over the ranks), the seconds it took."""

    initial: list[np.ndarray]
    final: list[np.ndarray]
    loss: list[float]
    accuracy: list[float]
    seconds: float


def train_with_tntrun(case: Case, averaged: bool = True) -> Trained:
    """``case`` trained on this rank's shard as a tntrun run trains it (``averaged=False``:
    the control, whose optimizer averages nothing)."""
    start = time.perf_counter()
    model = built_model(case.kind)
    schedule = PlannedSchedule(
        ScheduleParams("constant", peak_lr=optimizer_section(case)["base_lr"], total_steps=99)
    )
    optimizer = build_optimizer(OptimizerSettings.of(optimizer_section(case)), schedule)
    if averaged:
        optimizer = dp.data_parallel(optimizer)
    spec = compile_spec("classification", 0.0, not outputs_probabilities(model, INPUT_SHAPE))
    model.compile(optimizer=optimizer, jit_compile=False, **spec)
    optimizer.build(model.trainable_variables)
    dp.broadcast_state(model, optimizer, root_rank=0)
    initial = model.get_weights()
    micro_batch = GLOBAL_BATCH // hvd.size()
    stream = distribute_train(
        training_data(),
        num_samples=SAMPLES,
        micro_batch=micro_batch,
        steps_per_epoch=STEPS,
        rank=hvd.rank(),
        size=hvd.size(),
        seed=SEED,
        first_epoch=0,
        epochs=EPOCHS,
    )
    history = model.fit(
        stream,
        epochs=EPOCHS,
        steps_per_epoch=STEPS,
        callbacks=[AverageTrainMetrics(STEPS * micro_batch)],
        verbose=0,
        shuffle=False,
    ).history
    seconds = time.perf_counter() - start
    return Trained(initial, model.get_weights(), history["loss"], history["accuracy"], seconds)


def global_order() -> tf.data.Dataset:
    """The global batches of every epoch in tntrun's order, written with tf.data alone:
    the same shuffle seed on every rank, seed * 100003 + epoch, then the global batch."""
    epochs = [
        training_data()
        .shuffle(SAMPLES, seed=SEED * 100_003 + epoch, reshuffle_each_iteration=False)
        .batch(GLOBAL_BATCH, drop_remainder=True)
        for epoch in range(EPOCHS)
    ]
    stream = epochs[0]
    for epoch in epochs[1:]:
        stream = stream.concatenate(epoch)
    return stream


def train_serially(case: Case, initial: list[np.ndarray]) -> Trained:
    """``case`` in plain single-process Keras from ``initial``: Keras' class by its own
    name with Keras' defaults, the whole global batch per step."""
    start = time.perf_counter()
    keras.utils.set_random_seed(SEED)
    model = build_kind(case.kind)
    model(np.zeros((1, *INPUT_SHAPE), "float32"))  # a subclassed model builds on a call
    model.set_weights(initial)
    class_name, lr = REFERENCE[case.optimizer]
    reference = Lars if class_name == "Lars" else getattr(keras.optimizers, class_name)
    optimizer = reference(learning_rate=lr, **case.arguments)
    model.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(
        global_order(), epochs=EPOCHS, steps_per_epoch=STEPS, verbose=0, shuffle=False
    ).history
    seconds = time.perf_counter() - start
    return Trained(initial, model.get_weights(), history["loss"], history["accuracy"], seconds)


def relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def flat(weights: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([w.ravel() for w in weights])


def compared(ours: Trained, serial: Trained) -> dict[str, Any]:
    """How far tntrun's training is from the serial one, and how far either moved."""
    loss = [abs(a - b) / abs(b) for a, b in zip(ours.loss, serial.loss, strict=True)]
    pairs = list(zip(ours.final, serial.final, strict=True))
    return {
        "loss": ours.loss,
        "serial_loss": serial.loss,
        "loss_relative_difference": max(loss),
        "accuracy_difference": max(
            abs(a - b) for a, b in zip(ours.accuracy, serial.accuracy, strict=True)
        ),
        "weights_relative_difference": max(relative(g, w) for g, w in pairs),
        "weights_max_abs_difference": max(float(np.max(np.abs(g - w))) for g, w in pairs),
        "moved": relative(flat(serial.final), flat(serial.initial)),
        "seconds": ours.seconds,
        "serial_seconds": serial.seconds,
    }


def rank_spread(weights: list[np.ndarray]) -> float:
    """Largest difference between the ranks' ``weights`` (0.0: identical)."""
    first, second = hvd.allgather_object([np.asarray(w) for w in weights])
    return max(float(np.max(np.abs(a - b))) for a, b in zip(first, second, strict=True))


def main() -> None:
    runtime.init(threads_per_rank=1, seed=SEED, deterministic=True)
    rank, size = hvd.rank(), hvd.size()
    all_cases = cases()
    trained = [train_with_tntrun(case) for case in all_cases]
    spreads = [rank_spread(t.final) for t in trained]
    control = train_with_tntrun(all_cases[0], averaged=False)
    results: dict[str, Any] = {}
    for index in range(rank, len(all_cases), size):  # the serial references, shared out
        case, ours = all_cases[index], trained[index]
        serial = train_serially(case, ours.initial)
        results[case.name] = {
            **compared(ours, serial),
            "optimizer": case.optimizer,
            "kind": case.kind,
            "rank_spread": spreads[index],
        }
        if index == 0:  # the control shares case 0's start and reference
            results["control"] = {**compared(control, serial), "case": case.name}
    summary = {"rank": rank, "size": size, "cases": results, "keras": keras.__version__}
    print("RESULT " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
