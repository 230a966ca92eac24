"""Sharding of the training stream: every sample once per epoch, same steps on every rank."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.engine.data import distribute_eval, distribute_train  # noqa: E402

N, SIZE, MICRO = 103, 2, 8
GLOBAL = SIZE * MICRO


def stream(rank: int, *, drop: bool, first_epoch: int = 0, epochs: int = 3):
    data = tf.data.Dataset.from_tensor_slices((np.arange(N), np.arange(N) % 10))
    steps = N // GLOBAL if drop else -(-N // GLOBAL)
    ds = distribute_train(
        data,
        num_samples=N,
        micro_batch=MICRO,
        steps_per_epoch=steps,
        rank=rank,
        size=SIZE,
        seed=7,
        first_epoch=first_epoch,
        epochs=epochs,
        drop_remainder=drop,
    )
    batches = [tuple(t.numpy() for t in batch) for batch in ds]
    assert all(len(b[0]) == MICRO for b in batches), "every step is a full micro-batch"
    return steps, batches


@pytest.mark.parametrize("drop", [True, False])
def test_each_epoch_covers_samples_once_and_ranks_run_equal_steps(drop):
    steps, rank0 = stream(0, drop=drop)
    _, rank1 = stream(1, drop=drop)
    assert len(rank0) == len(rank1) == 3 * steps
    orders = []
    for epoch in range(3):
        seen, weights = [], []
        for batches in (rank0, rank1):
            for batch in batches[epoch * steps : (epoch + 1) * steps]:
                seen.extend(batch[0])
                weights.extend(batch[2] if len(batch) == 3 else np.ones(MICRO))
        real = [s for s, w in zip(seen, weights, strict=True) if w > 0]
        assert len(real) == len(set(real)), "no sample twice in an epoch"
        assert len(real) == (steps * GLOBAL if drop else N)
        if not drop:
            assert sorted(real) == list(range(N)) and weights.count(0.0) == steps * GLOBAL - N
        orders.append(real)
    assert orders[0] != orders[1], "each epoch is reshuffled"


def test_a_resumed_stream_continues_with_the_same_batches():
    steps, full = stream(0, drop=True)
    _, resumed = stream(0, drop=True, first_epoch=2)
    for a, b in zip(full[2 * steps :], resumed, strict=True):
        np.testing.assert_array_equal(a[0], b[0])


def test_evaluation_shards_cover_the_set_exactly_once():
    data = tf.data.Dataset.from_tensor_slices((np.arange(N), np.arange(N)))
    seen = [
        int(x)
        for rank in range(SIZE)
        for batch in distribute_eval(data, micro_batch=MICRO, rank=rank, size=SIZE)
        for x in batch[0]
    ]
    assert sorted(seen) == list(range(N))


def global_steps(size: int, *, drop: bool, skip: int) -> list[list[tuple[int, float]]]:
    """Each global step's (sample, weight) pairs, sorted, on ``size`` ranks of GLOBAL samples a
    step, each rank's stream skipping ``skip`` micro-batches (a resumed epoch's start)."""
    data = tf.data.Dataset.from_tensor_slices((np.arange(N), np.arange(N) % 10))
    steps = N // GLOBAL if drop else -(-N // GLOBAL)
    per_rank = [
        list(
            distribute_train(
                data,
                num_samples=N,
                micro_batch=GLOBAL // size,
                steps_per_epoch=steps,
                rank=rank,
                size=size,
                seed=7,
                first_epoch=1,
                epochs=2,
                drop_remainder=drop,
            ).skip(skip)
        )
        for rank in range(size)
    ]
    steps_of_all = zip(*per_rank, strict=True)
    return [sorted(pair for batch in step for pair in weighted(batch)) for step in steps_of_all]


def weighted(batch) -> list[tuple[int, float]]:
    """A micro-batch's (sample, weight) pairs (weight 1 without a padding weight)."""
    weights = batch[2].numpy() if len(batch) == 3 else np.ones(len(batch[0]))
    return [(int(x), float(w)) for x, w in zip(batch[0].numpy(), weights, strict=True)]


@pytest.mark.parametrize("drop", [True, False])
def test_a_global_step_trains_the_same_samples_on_any_number_of_ranks(drop):
    """What lets a preempted run continue mid-epoch on another world size with the same global
    batch: skipping b micro-batches on each rank skips the same samples as on any layout."""
    on_two = global_steps(2, drop=drop, skip=3)
    assert len(on_two) == (N // GLOBAL if drop else -(-N // GLOBAL)) - 3
    assert global_steps(1, drop=drop, skip=3) == on_two
    assert global_steps(4, drop=drop, skip=3) == on_two
