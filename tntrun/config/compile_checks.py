"""The driver's checks of what the model is compiled with (``loss``, ``loss_weights``,
``metrics``) and of the user's optimizer class, before any rank starts and without Keras:
names against Keras 3's (the lists below, held to Keras by tests/config/test_compile_keys.py),
``_target_`` mappings against their class's parameters, read from source where it can."""

from __future__ import annotations

import difflib
import importlib.util
import re
from collections.abc import Mapping
from numbers import Real
from pathlib import Path
from typing import Any

from tntrun.config.schema import OPTIMIZER_SCHEMAS
from tntrun.config.user_code import check_target
from tntrun.errors import PlanError

# keras.losses.get / keras.metrics.get names (Keras 3.15), and compile's own metric names.
LOSS_NAMES = frozenset(
    (
        "bce",
        "binary_crossentropy",
        "binary_focal_crossentropy",
        "categorical_crossentropy",
        "categorical_focal_crossentropy",
        "categorical_hinge",
        "circle",
        "cosine_similarity",
        "ctc",
        "dice",
        "hinge",
        "huber",
        "kl_divergence",
        "kld",
        "log_cosh",
        "mae",
        "mape",
        "mean_absolute_error",
        "mean_absolute_percentage_error",
        "mean_squared_error",
        "mean_squared_logarithmic_error",
        "mse",
        "msle",
        "poisson",
        "sparse_categorical_crossentropy",
        "squared_hinge",
        "tversky",
    )
)
METRIC_NAMES = frozenset(
    (
        "accuracy",
        "acc",
        "auc",
        "bce",
        "binary_accuracy",
        "binary_crossentropy",
        "binary_io_u",
        "categorical_accuracy",
        "categorical_crossentropy",
        "categorical_hinge",
        "ce",
        "crossentropy",
        "concordance_correlation",
        "cosine_similarity",
        "f1_score",
        "f_beta_score",
        "false_negatives",
        "false_positives",
        "hinge",
        "io_u",
        "kl_divergence",
        "log_cosh_error",
        "mae",
        "mape",
        "mean_absolute_error",
        "mean_absolute_percentage_error",
        "mean_io_u",
        "mean_squared_error",
        "mean_squared_logarithmic_error",
        "mse",
        "msle",
        "one_hot_io_u",
        "one_hot_mean_io_u",
        "pearson_correlation",
        "poisson",
        "precision",
        "precision_at_recall",
        "r2_score",
        "recall",
        "recall_at_precision",
        "root_mean_squared_error",
        "sensitivity_at_specificity",
        "sparse_categorical_accuracy",
        "sparse_categorical_crossentropy",
        "sparse_top_k_categorical_accuracy",
        "specificity_at_sensitivity",
        "squared_hinge",
        "top_k_categorical_accuracy",
        "true_negatives",
        "true_positives",
    )
)


def close_names(name: str, known: frozenset[str]) -> str:
    """``did you mean a, b?`` for the known names close to ``name`` (else the whole list)."""
    close = difflib.get_close_matches(name.lower(), sorted(known), n=3, cutoff=0.6)
    if close:
        return f"did you mean {', '.join(close)}?"
    return f"Keras' names: {', '.join(sorted(known))}"


def _check_one(key: str, spec: Any, names: frozenset[str], per_output: bool) -> None:
    if isinstance(spec, str):
        if spec not in names:
            what = "loss" if names is LOSS_NAMES else "metric"
            raise PlanError(
                f"{key}={spec}: Keras has no {what} of that name; {close_names(spec, names)} "
                f"(or give {key}._target_=<module.Class> with its arguments)"
            )
    elif isinstance(spec, Mapping) and "_target_" in spec:
        target = str(spec["_target_"])
        if target.startswith("keras."):  # importing Keras here would start TensorFlow
            check_keras_name(key, target)
        else:
            check_target(key, target, [k for k in spec if k != "_target_"])
    elif isinstance(spec, Mapping) and per_output:  # output name -> loss or metrics
        for output, value in spec.items():
            _check_one(f"{key}.{output}", value, names, per_output=names is METRIC_NAMES)
    elif isinstance(spec, list | tuple) and names is METRIC_NAMES:
        for value in spec:
            _check_one(key, value, names, per_output=False)
    else:
        raise PlanError(
            f"{key}={spec!r}: give a Keras name, a mapping with _target_ and its arguments, "
            "or a mapping of output name to either"
        )


def check_keras_name(key: str, target: str) -> None:
    """``keras.<module>.<Name>`` exists in the installed Keras, read from its API file."""
    module, _, name = target.rpartition(".")
    spec = importlib.util.find_spec("keras")  # the top-level package: found, not imported
    folder = Path(spec.origin).parent.joinpath(*module.split(".")[1:]) if spec else None
    source = folder / "__init__.py" if folder else None
    if source is None or not source.is_file():
        raise PlanError(f"{key}._target_={target}: Keras has no module {module}")
    if not re.search(rf"\bimport {re.escape(name)}\b|\bas {re.escape(name)}\b", source.read_text()):
        raise PlanError(f"{key}._target_={target}: {module} has no {name}")


def _check_loss_weights(weights: Any) -> None:
    values = list(weights.values()) if isinstance(weights, Mapping) else weights
    if not isinstance(values, list | tuple) or not all(
        isinstance(v, Real) and not isinstance(v, bool) and v >= 0 for v in values
    ):
        raise PlanError(
            f"loss_weights={weights!r}: give a list of non-negative numbers (one per output) "
            "or a mapping of output name to a number, e.g. loss_weights={out_a:1.0,out_b:0.2}"
        )


def check_compile_keys(loss: Any, loss_weights: Any, metrics: Any) -> None:
    """Refuse, in one line naming the key and the fix, what Keras' compile would refuse."""
    if loss is not None:
        _check_one("loss", loss, LOSS_NAMES, per_output=True)
    if loss_weights is not None:
        _check_loss_weights(loss_weights)
    if metrics is not None:
        if isinstance(metrics, str):
            metrics = [metrics]
        _check_one("metrics", metrics, METRIC_NAMES, per_output=True)


def check_optimizer_target(section: Mapping[str, Any]) -> None:
    """A user's optimizer class (``optimizer=custom``) takes ``learning_rate`` and the keys."""
    target, name = section.get("_target_"), section.get("name")
    if not target and name not in OPTIMIZER_SCHEMAS:
        known = frozenset(OPTIMIZER_SCHEMAS)
        raise PlanError(
            f"optimizer.name={name}: tntrun has no optimizer of that name; "
            f"{close_names(str(name), known)} (choose it with optimizer=<name>)"
        )
    if target:
        keys = [k for k in section if k not in ("_target_", "base_lr", "base_batch_size")]
        check_target("optimizer", str(target), keys, supplied=("learning_rate",))
