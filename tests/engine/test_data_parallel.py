"""tntrun's Keras 3 data parallelism (tntrun.engine.data_parallel) on two real Gloo ranks.

One horovodrun launch of tests/rank_scripts/keras3_data_parallel.py: each rank prints a JSON
summary of every check, asserted here. Each rank trains on data of its own, so equal
weights on the ranks need averaged gradients.
"""

from __future__ import annotations

import pytest

from tests.helpers.commands import rank_summaries
from tests.helpers.paths import RANK_SCRIPTS

pytestmark = pytest.mark.slow
SCRIPT = RANK_SCRIPTS / "keras3_data_parallel.py"


@pytest.fixture(scope="module")
def ranks() -> list[dict]:
    """Each rank's summary, indexed by rank."""
    return rank_summaries(SCRIPT)


def test_every_kind_of_model_ends_with_the_same_weights_on_both_ranks(ranks):
    for summary in ranks:
        for kind in ("functional", "subclassed", "own_train_step"):
            check = summary["models"][kind]
            assert check["data_differ"] and check["moved"] > 1e-3, (kind, check)
            assert check["initial_spread"] > 0.1, (kind, check)  # broadcast has work to do
            assert check["broadcast_spread"] == 0.0, (kind, check)
            assert check["final_spread"] == 0.0, (kind, check)
            assert check["optimizer_is_adam"], (kind, check)
            assert check["restores_plain"], (kind, check)  # a saved model needs no tntrun


def test_two_ranks_with_half_batches_equal_one_process_with_the_global_batch(ranks):
    for summary in ranks:
        check = summary["global_batch"]
        assert check["data_differ"], check
        assert check["relative_difference"] < 1e-5, check
        assert check["without_averaging"] > 1e-2, check  # the comparison can tell


def test_backward_passes_accumulate_locally_and_allreduce_once_per_update(ranks):
    for summary in ranks:
        check = summary["accumulation"]
        assert check["data_differ"] and check["final_spread"] == 0.0, check
        assert check["relative_difference"] < 1e-5, check
        assert check["allreduces"] == check["micro_steps"] // 2, check
        assert check["single_step_allreduces"] == 2, check
        assert check["iterations"] == check["micro_steps"], check  # the schedule's steps


def test_an_overflow_on_one_rank_is_skipped_on_every_rank(ranks):
    for summary in ranks:
        check = summary["loss_scaling"]
        assert check["kept_by_compile"] and check["compute_dtype"] == "float16", check
        assert check["applied"] == [True, True, False, True], check
        assert check["scales"] == [2.0**15, 2.0**15, 2.0**14, 2.0**14], check
        assert check["scales_on_ranks"] == [2.0**14, 2.0**14], check
        assert check["final_spread"] == 0.0, check
        assert check["iterations"] == 4, check  # the skipped step counts


def test_fp16_compression_keeps_the_ranks_equal(ranks):
    for summary in ranks:
        check = summary["compression"]
        assert check["data_differ"] and check["final_spread"] == 0.0, check
        assert 0 < check["relative_difference_to_uncompressed"] < 1e-2, check
        # one op per dtype: float16 gradients, the float32 agreement vector beside them
        assert check["grouped_allreduces_per_step"] == {"fp16": 2.0, "none": 1.0}, check


def test_the_agreement_is_the_mean_loss_and_any_ranks_stop(ranks):
    for summary in ranks:
        steps = summary["agreement"]["steps"]
        for step in steps:
            assert step["agreed"] == pytest.approx(step["mean"], rel=1e-6), step
            assert step["allreduces"] == 1, step  # it rode in the gradients' allreduce
        assert [step["stop"] for step in steps] == [False, False, True], steps
    local = [[step["local"] for step in summary["agreement"]["steps"]] for summary in ranks]
    assert local[0] != local[1]


def test_legacy_keras_xla_and_compiles_own_loss_scaling_are_refused(ranks):
    refusals = ranks[0]["refusals"]
    legacy = "was built with the legacy tf_keras package; tntrun trains Keras 3: use `import keras`"
    assert refusals["tf_keras_optimizer"].startswith(f"this optimizer {legacy}")
    assert refusals["tf_keras_model"].startswith(f"this model {legacy}")
    assert "jit_compile=False" in refusals["jit_compile"]
    assert "data_parallel(model.optimizer)" in refusals["compile_wrapped_loss_scaling"]
    assert refusals["moved_outward"] is True
    assert all("\n" not in m for m in refusals.values() if isinstance(m, str))
