"""Range checks of single config values that the schema's types cannot express.

Pure: the typed settings in, one line per problem out, each
naming the key and a value that works. The planner reports them together with
its own layout and batch checks, before any rank starts.
"""

from __future__ import annotations

import math
import re
import signal
from collections.abc import Callable, Mapping
from typing import Any

from tntrun.config.schema import TRACKING_KEYS, TrackingConfig
from tntrun.config.settings import Settings
from tntrun.datasets.base import DatasetInfo

SEED_LIMIT = 2**32  # NumPy's seed range
RESERVED_TAG_PREFIX = "mlflow."  # MLflow's system tags
TAG_NAME = re.compile(r"[\w\-. /:]{1,250}")  # MLflow's rule for tag (and param) names


def _positive_finite(value: Any) -> bool:
    return isinstance(value, int | float) and math.isfinite(value) and value > 0


def _at_least(low: float) -> Callable[[Any], bool]:
    return lambda value: value is None or value >= low


def _signal_names(value: Any) -> bool:
    from tntrun.contract.stop_signals import signal_number

    try:
        numbers = [signal_number(name) for name in value]
    except (TypeError, ValueError):
        return False
    return not {signal.SIGINT, signal.SIGKILL, signal.SIGSTOP} & set(numbers)


# (dotted key, accepts the value, what to give instead)
RULES: tuple[tuple[str, Callable[[Any], bool], str], ...] = (
    ("optimizer.base_lr", _positive_finite, "give a positive, finite learning rate, e.g. 0.1"),
    ("optimizer.base_batch_size", _at_least(1), "give the batch size base_lr is meant for"),
    ("seed", lambda v: 0 <= v < SEED_LIMIT, f"use a seed in [0, {SEED_LIMIT})"),
    (
        "val_micro_batch_size",
        _at_least(1),
        "use 1 or more samples per rank, or null for the training micro-batch",
    ),
    ("batch_tokens", _at_least(1), "use 1 or more tokens, or null"),
    ("eval.every_epochs", _at_least(1), "evaluate every 1 or more epochs"),
    ("faults.check_sync_every_epochs", _at_least(0), "use 0 (never) or more"),
    ("faults.stall_timeout_s", _at_least(0), "use 0 (no watchdog) or a positive time"),
    ("train.label_smoothing", lambda v: 0 <= v < 1, "choose a value in [0, 1)"),
    ("train.gradient_noise_ema", lambda v: 0 <= v < 1, "choose a decay in [0, 1), e.g. 0.95"),
    ("checkpoint.every_epochs", _at_least(0), "use 0 (never) or more"),
    ("checkpoint.keep", _at_least(1), "keep 1 or more checkpoints"),
    ("checkpoint.min_interval_s", _at_least(0), "use 0 (every every_epochs) or more seconds"),
    ("faults.rollback_lr_factor", lambda v: 0 < v <= 1, "choose a factor in (0, 1]"),
    ("faults.max_rollbacks", _at_least(0), "use 0 or more rollbacks"),
    ("faults.max_restarts", _at_least(0), "use 0 (no restarts) or more"),
    ("faults.preempt_signals", _signal_names, "name signals, e.g. [SIGTERM,SIGUSR1], or []"),
    ("faults.preempt_grace_s", lambda v: v > 0, "give the ranks a positive time to checkpoint"),
    ("tracking.log_every_steps", _at_least(0), "use 0 (per epoch only) or more"),
    (
        "train.profile_batches",
        lambda v: bool(re.fullmatch(r"\d+(\s*,\s*\d+)?", str(v))),
        "give a batch or a range of batches, e.g. '10,20' (or null for no profile)",
    ),
    ("train.progress_interval_s", _at_least(0), "use 0 (no progress lines) or a positive interval"),
    ("tracking.system_metrics_interval_s", lambda v: v > 0, "give a positive interval"),
    (
        "tracking.register_alias",
        lambda v: not re.fullmatch(r"[vV]\d+|latest", str(v)),
        "v<number> and latest are MLflow's own aliases: choose another, e.g. candidate",
    ),
)


def lookup(settings: Settings, dotted: str) -> Any:
    """The value at ``a.b.c`` (None when a level is missing): typed sections by attribute,
    the target-defined ones (``optimizer``: plain dicts) by key."""
    value: Any = settings
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, Mapping) else getattr(value, part, None)
    return value


def unknown_tracking_keys(settings: Settings) -> list[str]:
    """``+tracking.<key>`` that MLflow's tracker does not know (a typo would be logged as a
    param and do nothing). Another tracker (``tracking._target_``) takes its own keys."""
    if settings.tracking._target_ != TrackingConfig._target_:
        return []
    keys = ", ".join(sorted(TRACKING_KEYS - {"_target_"}))
    return [
        f"tracking.{key}: no such key: use one of {keys} (tags go in +tracking.tags.<name>=<value>)"
        for key in settings.tracker_options
    ]


def tag_problems(tags: Mapping[str, str]) -> list[str]:
    """``tracking.tags`` MLflow would refuse or that would overwrite its own (``mlflow.*``:
    the run's user, source, parent), one line each."""
    problems = []
    for name in tags:
        if str(name).startswith(RESERVED_TAG_PREFIX):
            problems.append(
                f"tracking.tags.{name}: {RESERVED_TAG_PREFIX}* tags are MLflow's own (it sets "
                f"{name} itself): choose another name, e.g. +tracking.tags.{name.split('.')[-1]}"
                "=..."
            )
        elif not TAG_NAME.fullmatch(str(name)):
            problems.append(
                f"tracking.tags.{name}: MLflow takes tag names of letters, digits, _ - . / : and "
                "spaces: rename it"
            )
    return problems


def combination_problems(settings: Settings) -> list[str]:
    """Values that are fine alone but not together."""
    train = settings.train
    if train.sync_batch_norm and train.jit_compile:
        return [
            "train.sync_batch_norm=true: its allreduce in the forward pass is not an XLA op; "
            "set train.jit_compile=false (or train.sync_batch_norm=false)"
        ]
    return []


def value_problems(settings: Settings) -> list[str]:
    """One line per value out of its range, per unknown tracking key and per combination
    that cannot run."""
    problems = unknown_tracking_keys(settings) + combination_problems(settings)
    problems += tag_problems(settings.tracking.tags)
    for key, accepts, fix in RULES:
        value = lookup(settings, key)
        if (key == "optimizer.base_lr" or value is not None) and not accepts(value):
            problems.append(f"{key}={value}: {fix}")
    return problems


def class_id(key: Any) -> int | None:
    """A ``train.class_weight`` key as a class id (the command line's ``.3`` is text)."""
    text = str(key).strip()
    return int(text) if re.fullmatch(r"-?\d+", text) else None


def class_weight_problems(class_weight: Mapping[Any, float], info: DatasetInfo) -> list[str]:
    """``train.class_weight`` against the dataset's classes: one line per key that is no
    class of the dataset and per weight that is negative or not finite."""
    if class_weight and info.task != "classification":
        return [
            f"train.class_weight: the dataset's task is {info.task}; class weights weigh one "
            "class per sample: remove train.class_weight"
        ]
    problems = []
    top = info.num_classes - 1
    for key, weight in class_weight.items():
        found = class_id(key)
        if found is None or not 0 <= found <= top:
            problems.append(
                f"train.class_weight.{key}={weight}: the dataset's classes are 0 to {top}: "
                f"key the weights by class id, e.g. +train.class_weight.{top}={weight}"
            )
        if not (math.isfinite(weight) and weight >= 0):
            problems.append(f"train.class_weight.{key}={weight}: give a finite weight >= 0")
    return problems
