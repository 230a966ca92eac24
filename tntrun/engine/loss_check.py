"""The loss against the data, before the first step: a loss that does not fit the labels
or the model's outputs ends the run in one line (the run's ``failure.loss_setup`` tag)
instead of training on silently (sparse cross-entropy truncates float targets; a one-unit
softmax always has loss 0) or failing in a traceback of every rank."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd
import keras
import numpy as np
import tensorflow as tf

from tntrun.contract.run_files import LOSS_SETUP

SPARSE = ("sparse_categorical_crossentropy", "SparseCategoricalCrossentropy")
BINARY = ("binary_crossentropy", "bce", "BinaryCrossentropy", "BinaryFocalCrossentropy")
# TensorFlow's words (CPU kernels) for a sparse label outside the outputs' classes.
LABEL_OUT_OF_RANGE = re.compile(
    r"Received a label value of (-?\d+) which is outside the valid range of \[0, (\d+)\)"
)


class LossSetupError(ValueError):
    """The loss does not fit the labels or the outputs: a config error, found on the data."""


def _loss_name(loss: Any) -> str:
    if isinstance(loss, str):
        return loss
    config = loss.get_config() if hasattr(loss, "get_config") else {}
    return config.get("name") or type(loss).__name__


def label_problem(loss: Any, labels: np.ndarray, outputs: np.ndarray) -> str | None:
    """What is wrong with ``labels`` for ``loss`` on ``outputs`` (one output), or None."""
    name = _loss_name(loss)
    if name in SPARSE or type(loss).__name__ in SPARSE:
        units = outputs.shape[-1]
        if units < 2:
            return f"sparse cross-entropy needs one output unit per class; the output has {units}"
        if not np.all(np.equal(np.mod(labels, 1), 0)):
            return "sparse cross-entropy needs integer class labels; the labels are fractions"
        if labels.min() < 0 or labels.max() >= units:
            return (
                f"labels span {labels.min():g}..{labels.max():g} but the output has {units} "
                f"classes (0..{units - 1})"
            )
    if (name in BINARY or type(loss).__name__ in BINARY) and (labels.min() < 0 or labels.max() > 1):
        span = f"{labels.min():g}..{labels.max():g}"
        return f"binary cross-entropy needs labels in [0, 1]; they span {span}"
    return None


def local_problem(model: Any, batch: Any) -> str | None:
    """This rank's problem with its first validation batch, or None."""
    x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(batch)
    y_pred = model(x, training=False)
    loss = model.loss
    if not isinstance(loss, dict | list | tuple) and not isinstance(y, dict | list | tuple):
        found = label_problem(loss, np.asarray(y), np.asarray(tf.nest.flatten(y_pred)[0]))
        if found:
            return found
    try:
        model.compute_loss(x, y, y_pred, sample_weight, training=False)
    except (ValueError, TypeError, tf.errors.OpError) as refused:
        return str(refused).strip().splitlines()[0][:300]
    return None


def check_loss_setup(model: Any, val_batches: Any, run_dir: Path) -> None:
    """Every rank checks its first validation batch; if any finds a problem, every rank
    raises :class:`LossSetupError` with the first one (rank 0 writes it for the driver)."""
    first = next(iter(val_batches.take(1)), None)
    found = local_problem(model, first) if first is not None else None
    problems = hvd.allgather_object(found, name="loss_setup")
    reported = next((p for p in problems if p), None)
    if reported is None:
        return
    line = f"loss={_loss_name(model.loss)}: {reported}: state the loss the labels and outputs fit"
    if hvd.rank() == 0:
        (run_dir / LOSS_SETUP).write_text(line + "\n")
    raise LossSetupError(line)


def label_range_line(err: BaseException) -> str | None:
    """A training batch's label outside the classes, as TensorFlow raises it at that step
    (a dataset that cannot be scanned before launch), in one line; None for other errors."""
    found = LABEL_OUT_OF_RANGE.search(str(err))
    if found is None:
        return None
    label, classes = found.group(1), int(found.group(2))
    return (
        f"a training label is {label}, outside the model's {classes} classes (0..{classes - 1}):"
        " fix the dataset's labels, or build the model with one output per class"
    )
