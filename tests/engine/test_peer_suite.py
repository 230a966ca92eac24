"""The peer suite (issue 41 point 7): Tarantella's data-parallel tests (its
``optimizers_mnist_test.py`` and ``accuracy_test.py``: the loss history of data-parallel
training equals serial training's within 1e-4) rewritten for tntrun, for every optimizer
tntrun names and the model kinds of Tarantella's suite (fc, LeNet-5, Sequential, subclassed).

One horovodrun launch of tests/rank_scripts/peer_suite.py trains every case through tntrun's
engine on 2 ranks and in plain single-process Keras at the same global batch; the tests here
assert on the differences each rank printed. A control case with the averaging off shows the
comparison can fail. ``test_peer_suite_cli.py`` does the same for one real ``tntrun`` run.
"""

from __future__ import annotations

import pytest

from tests.helpers.commands import rank_summaries
from tests.helpers.paths import RANK_SCRIPTS
from tests.helpers.peer import TOLERANCE
from tntrun.config.schema import OPTIMIZER_SCHEMAS

pytestmark = pytest.mark.slow
SCRIPT = RANK_SCRIPTS / "peer_suite.py"
KINDS = {"fc", "lenet5", "sequential", "subclassed"}


@pytest.fixture(scope="module")
def cases() -> dict[str, dict]:
    """Every case's comparison, from the rank that computed its serial reference."""
    summaries = rank_summaries(SCRIPT)
    merged: dict[str, dict] = {}
    for summary in summaries:
        merged.update(summary["cases"])
    return merged


def test_every_optimizer_and_every_model_kind_is_compared(cases):
    compared = [c for name, c in cases.items() if name != "control"]
    assert {c["optimizer"] for c in compared} == set(OPTIMIZER_SCHEMAS)
    assert {c["kind"] for c in compared} == KINDS
    for case in compared:  # far more movement than the tolerance: the comparison has work
        assert case["moved"] > 100 * TOLERANCE, case


@pytest.mark.parametrize("optimizer", sorted(OPTIMIZER_SCHEMAS))
def test_two_ranks_train_as_serial_keras_does_at_the_global_batch(cases, optimizer):
    mine = {name: c for name, c in cases.items() if c.get("optimizer") == optimizer}
    assert mine, optimizer
    for name, case in mine.items():
        assert case["rank_spread"] == 0.0, (name, case)
        assert case["loss_relative_difference"] < TOLERANCE, (name, case)
        assert case["weights_relative_difference"] < TOLERANCE, (name, case)
        assert case["accuracy_difference"] == 0.0, (name, case)


def test_without_averaging_the_comparison_fails(cases):
    control = cases["control"]
    assert control["weights_relative_difference"] > 100 * TOLERANCE, control
    assert control["loss_relative_difference"] > TOLERANCE, control
