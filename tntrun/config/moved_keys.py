"""Config keys that moved to another section, in one table.

A command line (or a user's YAML) that still writes an old key gets one line naming its
new place instead of Hydra's "no such key"; a config stored by an earlier run (its
``config.yaml``, the settings in its ``plan.json``) is read in today's layout, so the run
still resumes.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

# Old dotted key -> today's. tntrun 0.1's ``train`` section mixed the loop, evaluation and
# fault handling; each now has its own section.
MOVED_KEYS: dict[str, str] = {
    "train.epochs_between_evals": "eval.every_epochs",
    "train.bleu_max_sentences": "eval.bleu_max_sentences",
    "train.bleu_beam_size": "eval.bleu_beam_size",
    "train.check_sync_every_epochs": "faults.check_sync_every_epochs",
    "train.stall_timeout_s": "faults.stall_timeout_s",
    "train.on_nonfinite": "faults.on_nonfinite",
    "train.rollback_lr_factor": "faults.rollback_lr_factor",
    "train.max_rollbacks": "faults.max_rollbacks",
    "train.max_restarts": "faults.max_restarts",
    "train.preempt_signals": "faults.preempt_signals",
    "train.preempt_grace_s": "faults.preempt_grace_s",
}


def moved_to(key: str) -> str | None:
    """Where an old key lives now (None: it did not move)."""
    return MOVED_KEYS.get(key)


def moved_key_problems(overrides: Sequence[str]) -> list[str]:
    """One line per override that sets, adds or deletes a moved key, naming the fix."""
    problems = []
    for override in overrides:
        written, eq, value = override.partition("=")
        key = written.lstrip("+~")
        new = moved_to(key)
        if new is not None:
            deletes = "~" if written.startswith("~") else ""  # today's key exists: no +
            fix = f"{deletes}{new}{eq}{value}"
            problems.append(f"{override}: {key} moved to {new}: write {fix}")
    return problems


def current_layout(stored: Mapping[str, Any]) -> dict[str, Any]:
    """A stored config (plain nested data) with every moved key at its new place; a value
    already at the new place wins."""
    config = copy.deepcopy(dict(stored))
    for old, new in MOVED_KEYS.items():
        old_section, old_name = old.split(".")
        section = config.get(old_section)
        if not isinstance(section, Mapping) or old_name not in section:
            continue
        section = config[old_section] = dict(section)
        value = section.pop(old_name)
        new_section, new_name = new.split(".")
        target = config[new_section] = dict(config.get(new_section) or {})
        target.setdefault(new_name, value)
    return config
