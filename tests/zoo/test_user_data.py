"""What users pass beside the data, planned on the driver and built on a rank in-process:
class weights (checked before launch), a dataset's own sample weights, dict datasets for
multi-input/output models (npz named arrays, a user's function) and a dataset given as a
function returning tf.data datasets (sizes stated in the config, checked on the rank)."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from tests.helpers.components import require_module
from tests.helpers.user_data import TWO_HEADS, WEIGHTED, write_module
from tntrun import api
from tntrun.errors import PlanError

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
tf = require_module("tensorflow")

from tntrun.datasets.function import DatasetMismatch, FunctionDataset  # noqa: E402
from tntrun.engine.pipelines import UserDataError, build_data  # noqa: E402
from tntrun.planning.plan import Plan  # noqa: E402

SIZES = ("+dataset.num_train=40", "+dataset.num_val=10", "+dataset.num_classes=2")
SHAPES = "+dataset.input_shape={a:[3],b:[2]}"
TWO_HEADS_RUN = (
    "model=custom",
    "model._target_=twoheads.build",
    "dataset=custom",
    "global_batch_size=8",
)


def rank_plan(plan: Plan) -> Plan:
    """The plan as a rank reads it: through plan.json."""
    return Plan.from_json(plan.to_json())


def refusal(overrides) -> str:
    with pytest.raises(PlanError) as refused:
        api.plan(list(overrides))
    (problem,) = refused.value.problems
    assert "\n" not in problem
    return problem


def test_class_weights_reach_the_ranks_multiplied_into_the_datasets_weights(in_tmp):
    weighted = write_module(in_tmp, "weighted", WEIGHTED)
    plan = api.plan(
        [
            "model=custom",
            "model._target_=weighted.build",
            "dataset=custom",
            "dataset._target_=weighted.Weighted",
            "+train.class_weight.2=4.0",  # text key from the command line
            "+train.class_weight={0:0.5}",  # int key
            "global_batch_size=16",
            "train.epochs=1",
        ]
    )
    x, y, w = weighted.arrays()
    expected = w * np.select([y == 0, y == 2], [0.5, 4.0], 1.0)
    seen = {}
    for rank in range(2):
        for features, _, weights in build_data(rank_plan(plan), rank, 2).train:
            for row, weight in zip(features.numpy(), weights.numpy(), strict=True):
                seen[int(np.flatnonzero((x == row).all(1))[0])] = weight
    assert len(seen) == plan.steps_per_epoch * 16 == 96  # drop_remainder: 4 left out
    np.testing.assert_allclose([seen[i] for i in seen], expected[list(seen)], rtol=1e-6)


@pytest.mark.parametrize(
    ("override", "problem"),
    [
        (
            "+train.class_weight.10=2.0",
            "train.class_weight.10=2.0: the dataset's classes are 0 to 9: key the weights by "
            "class id, e.g. +train.class_weight.9=2.0",
        ),
        ("+train.class_weight.cat=2.0", "train.class_weight.cat=2.0: the dataset's classes"),
        ("+train.class_weight.3=-1", "train.class_weight.3=-1.0: give a finite weight >= 0"),
    ],
)
def test_class_weights_outside_the_classes_or_negative_are_refused_before_launch(
    in_tmp, override, problem
):
    assert refusal([override]).startswith(problem)


def test_class_weights_for_a_dict_labelled_dataset_are_one_config_error_on_the_rank(in_tmp):
    write_module(in_tmp, "twoheads", TWO_HEADS)
    plan = api.plan(
        [
            *TWO_HEADS_RUN,
            "dataset._target_=twoheads.make",
            *SIZES,
            SHAPES,
            "+train.class_weight.1=2",
        ]
    )
    with pytest.raises(UserDataError, match="^train.class_weight applies to a model with one"):
        build_data(rank_plan(plan), 0, 2)


def test_a_function_dataset_is_planned_from_its_stated_sizes_without_importing_it(in_tmp):
    write_module(in_tmp, "twoheads", TWO_HEADS)
    del sys.modules["twoheads"]
    plan = api.plan([*TWO_HEADS_RUN, "dataset._target_=twoheads.make", *SIZES, SHAPES])
    assert "twoheads" not in sys.modules, "the driver must not import a module importing TF"
    assert (plan.num_train, plan.num_val, plan.steps_per_epoch) == (40, 10, 5)
    data = build_data(rank_plan(plan), 1, 2)
    assert data.info.input_shape == {"a": (3,), "b": (2,)}
    features, labels, *_ = next(iter(data.train))
    assert features["a"].shape == (plan.micro_batch_size, 3) and set(labels) == {"out1", "out2"}
    assert data.val_samples == 5


def test_a_function_dataset_without_its_sizes_is_one_line_naming_the_keys_to_add(in_tmp):
    write_module(in_tmp, "twoheads", TWO_HEADS)
    problem = refusal([*TWO_HEADS_RUN, "dataset._target_=twoheads.make", SIZES[0]])
    assert problem == (
        "dataset._target_=twoheads.make is a function returning tf.data datasets, which tntrun "
        "cannot size before launch without TensorFlow: state the size, add "
        "+dataset.num_val=<validation samples> +dataset.num_classes=<classes> "
        "+dataset.input_shape=[<dims of one sample>]"
    )


def made(**sizes) -> FunctionDataset:
    """The FunctionDataset of ``mydata.make`` (MYDATA), 6 + 4 samples of 3 features stated."""
    stated = {"num_train": 6, "num_val": 4, "num_classes": 2, "input_shape": [3], **sizes}
    return FunctionDataset("mydata.make", **stated)


@pytest.mark.parametrize(
    ("body", "sizes", "message"),
    [
        (
            "return pair(7, 4)",
            {},
            "dataset.num_train=6, but dataset._target_=mydata.make's "
            "train dataset has 7 samples: set dataset.num_train=7",
        ),
        (
            "return pair(6, 4)[0].batch(2), pair(6, 4)[1]",
            {},
            "dataset.input_shape=[3], but dataset._target_=mydata.make's train features have "
            "shape [None, 3] per element",
        ),
        (
            "return 3",
            {},
            "dataset._target_=mydata.make returned int: return a tf.data.Dataset "
            "or a (train, val) pair of them",
        ),
        (
            "return pair(6, 4)",
            {"input_shape": {"a": [3]}},
            "dataset.input_shape names ['a'], but dataset._target_=mydata.make's train features "
            "are one tensor",
        ),
    ],
)
def test_what_the_function_returns_is_checked_against_the_stated_sizes(
    in_tmp, body, sizes, message
):
    write_module(in_tmp, "mydata", MYDATA.format(body=body))
    with pytest.raises(DatasetMismatch) as refused:
        made(**sizes).load()
    assert str(refused.value).startswith(message), str(refused.value)


MYDATA = """
import numpy as np
import tensorflow as tf


def pair(n_train, n_val):
    x = np.arange(3 * (n_train + n_val), dtype="float32").reshape(-1, 3)
    y = np.arange(n_train + n_val) % 2
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return ds.take(n_train), ds.skip(n_train)


def make(num_train, seed=0):
    {body}
"""


def test_one_dataset_returned_is_split_into_num_train_then_num_val(in_tmp):
    body = "return tf.data.Dataset.from_tensor_slices((np.zeros((20, 3)), np.arange(20)))"
    write_module(in_tmp, "mydata", MYDATA.format(body=body))
    train, val = made(num_train=12, num_val=5).load()
    assert [int(y) for _, y in train] == list(range(12))
    assert [int(y) for _, y in val] == list(range(12, 17))


def npz_with_named_arrays(path, **extra) -> None:
    rng = np.random.default_rng(0)
    arrays = {
        f"x_{split}__{name}": rng.normal(size=(n, *shape)).astype("float32")
        for split, n in (("train", 12), ("val", 5))
        for name, shape in (("a", (3,)), ("b", (2, 2)))
    }
    arrays |= {f"y_{s}__out1": np.arange(n) % 2 for s, n in (("train", 12), ("val", 5))}
    arrays |= {f"y_{s}__out2": np.arange(n) % 4 for s, n in (("train", 12), ("val", 5))}
    np.savez(path, **{**arrays, **extra})


def test_npz_named_arrays_load_as_dicts_of_inputs_and_outputs(in_tmp):
    from tntrun.datasets.npz import NpzDataset
    from tntrun.tracking.runs_table import dataset_profile

    npz_with_named_arrays(in_tmp / "d.npz")
    dataset = NpzDataset(str(in_tmp / "d.npz"))
    info = dataset.info()
    assert info.input_shape == {"a": (3,), "b": (2, 2)}
    assert dataset_profile(info)["input_shape"] == {"a": [3], "b": [2, 2]}  # as MLflow logs it
    assert (info.num_train, info.num_val, info.num_classes) == (12, 5, 4)
    train, val = dataset.load()
    features, labels = next(iter(val.skip(3)))
    assert features["b"].shape == (2, 2) and int(labels["out2"]) == 3


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"x_train": np.zeros((12, 3))}, "has both x_train and x_train__<name> arrays"),
        ({"y_val__out3": np.zeros(5)}, "y_train names ['out1', 'out2'] but y_val ['out1', "),
        ({"x_val__a": np.zeros((4, 3))}, "the named arrays differ in length"),
    ],
)
def test_npz_named_arrays_that_disagree_are_one_line_naming_dataset_path(in_tmp, extra, message):
    npz_with_named_arrays(in_tmp / "d.npz", **extra)
    problem = refusal(["dataset=npz", f"dataset.path={in_tmp / 'd.npz'}"])
    assert problem.startswith(f"dataset.path={in_tmp / 'd.npz'}") and message in problem


def test_class_weights_for_a_translation_dataset_are_refused_before_launch(compose_cfg):
    from tests.helpers.plans import plan_for
    from tntrun.datasets.base import DatasetInfo

    tokens = DatasetInfo(1000, 100, (16,), 500, task="translation")
    with pytest.raises(PlanError) as refused:
        plan_for(compose_cfg, "+train.class_weight.1=2.0", data=tokens)
    assert refused.value.problems == [
        "train.class_weight: the dataset's task is translation; class weights weigh one class "
        "per sample: remove train.class_weight"
    ]
