"""Deterministic train/validation splits (NumPy only, so the driver stays light)."""

from __future__ import annotations

import numpy as np


def stratified_split(
    labels: np.ndarray, validation_fraction: float, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    """Sorted (train, validation) indices holding out ``validation_fraction`` of each class."""
    rng = np.random.default_rng(seed)
    train, val = [], []
    for label in np.unique(labels):
        members = rng.permutation(np.flatnonzero(labels == label))
        held_out = int(round(len(members) * validation_fraction))
        val.append(members[:held_out])
        train.append(members[held_out:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(val))
