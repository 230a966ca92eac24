"""The peer suite's bound (tests/engine/test_peer_suite*.py): tntrun on 2 ranks against plain
single-process Keras at the same global batch."""

from __future__ import annotations

import numpy as np

# Relative to the serial value: each epoch's loss |a - b| / |b|, each final weight tensor
# ||a - b|| / ||b||. Tarantella's suite bounds the loss by 1e-4 (absolute); float32 reordering
# of the gradient sums leaves at most 4e-7 in CI's cases (9.2e-7 over every optimizer on every
# model kind), so 1e-5 keeps a 10x margin and still fails on a gradient sum instead of an
# average for every optimizer whose update depends on the gradients' scale.
TOLERANCE = 1e-5


def relative_difference(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))
