"""Per-sample weights in the rank's pipeline: class weights, the dataset's own weights, dict
features and labels, and the padding of train.drop_remainder=false (zero weight whatever
the element's structure)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from tests.helpers.components import require_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.engine.data import distribute_train  # noqa: E402
from tntrun.engine.sample_weights import ClassWeightError, with_class_weights  # noqa: E402

N, SIZE, MICRO = 21, 2, 4  # 3 global batches of 8 hold 21 samples: 3 padding slots
GLOBAL = SIZE * MICRO
IDS = np.arange(N)
LABELS = IDS % 3
OWN = (1.0 + IDS / 10).astype("float32")  # the dataset's own weights, all distinct


def elements(dataset) -> list[tuple]:
    return [tuple(tf.nest.map_structure(lambda t: t.numpy(), e)) for e in dataset]


def test_class_weights_weigh_each_sample_by_its_class_and_unlisted_classes_by_one():
    data = tf.data.Dataset.from_tensor_slices((IDS, LABELS))
    weighted = elements(with_class_weights(data, {"2": 5.0, 0: 0.5}, num_classes=3))
    expected = {0: 0.5, 1: 1.0, 2: 5.0}  # keys as the command line gives them: text or int
    assert [w for _, _, w in weighted] == [expected[y] for y in LABELS]


def test_class_weights_multiply_the_datasets_own_weights():
    data = tf.data.Dataset.from_tensor_slices((IDS, LABELS, OWN))
    weighted = elements(with_class_weights(data, {1: 3.0}, num_classes=3))
    np.testing.assert_allclose(
        [w for _, _, w in weighted], OWN * np.where(LABELS == 1, 3.0, 1.0), rtol=1e-6
    )


@pytest.mark.parametrize(
    "labels",
    [np.eye(3)[LABELS].astype("float32"), LABELS[:, None]],
    ids=["one-hot", "one-element"],
)
def test_class_weights_read_the_class_as_keras_does(labels):
    data = tf.data.Dataset.from_tensor_slices((IDS, labels))
    weighted = elements(with_class_weights(data, {2: 4.0}, num_classes=3))
    assert [w for _, _, w in weighted] == [4.0 if y == 2 else 1.0 for y in LABELS]


def test_class_weights_are_refused_for_several_outputs_and_for_sequence_labels():
    outputs = tf.data.Dataset.from_tensor_slices((IDS, {"o1": LABELS, "o2": LABELS}))
    with pytest.raises(ClassWeightError, match="a model with one output") as refused:
        with_class_weights(outputs, {1: 2.0}, num_classes=3)
    assert "\n" not in str(refused.value)
    sequences = tf.data.Dataset.from_tensor_slices((IDS, np.zeros((N, 5, 2), "int64")))
    with pytest.raises(ClassWeightError, match=r"labels have shape \[5, 2\]"):
        with_class_weights(sequences, {1: 2.0}, num_classes=3)


def epoch(data, *, drop: bool, rank: int) -> list:
    steps = N // GLOBAL if drop else -(-N // GLOBAL)
    stream = distribute_train(
        data,
        num_samples=N,
        micro_batch=MICRO,
        steps_per_epoch=steps,
        rank=rank,
        size=SIZE,
        seed=3,
        first_epoch=0,
        epochs=1,
        drop_remainder=drop,
    )
    return list(stream)


def samples_and_weights(data, *, drop: bool, ids, weights) -> list[tuple[int, object]]:
    """Each trained slot's (id, weight) over both ranks' micro-batches of one epoch."""
    pairs = []
    for rank in range(SIZE):
        for batch in epoch(data, drop=drop, rank=rank):
            batch = tf.nest.map_structure(lambda t: t.numpy(), batch)
            pairs += list(zip(ids(batch), weights(batch), strict=True))
    return pairs


@pytest.mark.parametrize("drop", [True, False])
def test_the_datasets_weights_survive_padding_and_padding_weighs_zero(drop):
    data = tf.data.Dataset.from_tensor_slices((IDS, LABELS, OWN))
    pairs = samples_and_weights(data, drop=drop, ids=lambda b: b[0], weights=lambda b: b[2])
    real = [(i, w) for i, w in pairs if w > 0]
    assert all(w == pytest.approx(OWN[i]) for i, w in real), "each sample keeps its weight"
    assert len({i for i, _ in real}) == len(real) == (N // GLOBAL * GLOBAL if drop else N)
    assert len(pairs) - len(real) == (0 if drop else GLOBAL - N % GLOBAL)


@pytest.mark.parametrize("drop", [True, False])
def test_dict_features_labels_and_weights_are_padded_with_zero_weight_per_output(drop):
    features = {"a": IDS.astype("float32"), "b": np.stack([IDS, IDS], 1).astype("float32")}
    labels = {"out1": LABELS, "out2": 2 - LABELS}
    weights = {"out1": OWN, "out2": 2 * OWN}
    data = tf.data.Dataset.from_tensor_slices((features, labels, weights))
    pairs = samples_and_weights(
        data,
        drop=drop,
        ids=lambda b: b[0]["a"].astype(int),
        weights=lambda b: list(zip(b[2]["out1"], b[2]["out2"], strict=True)),
    )
    real = [(i, w) for i, w in pairs if w[0] > 0]
    assert all(w == pytest.approx((OWN[i], 2 * OWN[i])) for i, w in real)
    padding = [w for _, w in pairs if w[0] == 0]
    assert padding == [(0.0, 0.0)] * (0 if drop else GLOBAL - N % GLOBAL)
    assert sorted(i for i, _ in real) == (sorted(set(i for i, _ in real)))


def test_dict_data_without_weights_gets_the_padding_weight_alone():
    features = {"a": IDS.astype("float32"), "b": IDS.astype("float32")}
    data = tf.data.Dataset.from_tensor_slices((features, {"o1": LABELS, "o2": LABELS}))
    pairs = samples_and_weights(
        data, drop=False, ids=lambda b: b[0]["a"].astype(int), weights=lambda b: b[2]
    )
    assert sorted(i for i, w in pairs if w == 1.0) == list(range(N))
    assert [w for _, w in pairs if w != 1.0] == [0.0] * (GLOBAL - N % GLOBAL)
