"""The notes on the LR scaling rule (tntrun.planning.lr_rules): a global batch past the range
the rule was shown for gets one note naming the range, its source and what to use past it;
within the range, with a layer-wise optimizer or an unscaled LR, none."""

from __future__ import annotations

import pytest

from tests.helpers.plans import plan_for
from tntrun.config.schema import LrScaling
from tntrun.planning.lr_rules import RULE_RANGES, LrRuleInputs, large_batch_note, lr_rule_notes
from tntrun.planning.plan import DatasetInfo, MachineFacts

IMAGENET = DatasetInfo(1_281_167, 50_000, (224, 224, 3), 1000)


def inputs(**changed) -> LrRuleInputs:
    given = dict(
        optimizer="sgd",
        scaling="linear",
        effective_batch=65536,
        base_batch=256,
        scaled_lr=25.6,
        warmup_epochs=5.0,
    )
    return LrRuleInputs(**{**given, **changed})


def test_sgd_past_8k_with_the_linear_rule_is_told_the_range_and_the_way_past_it():
    note = large_batch_note(inputs())
    assert note.startswith("global batch 65536 is past 8192, the largest the linear LR rule")
    assert "[Goyal et al. 2017]" in note and "its LR 25.6 is untested there" in note
    assert "optimizer=lars [You, Gitman & Ginsburg 2017" in note
    assert "experiment=resnet50_imagenet_lars" in note
    assert "a longer warm-up than 5 epochs (schedule.warmup_epochs)" in note
    assert "metric gradient_noise_scale" in note and "McCandlish et al. 2018" in note


def test_adam_past_8k_with_the_sqrt_rule_is_offered_lamb():
    note = large_batch_note(inputs(optimizer="adam", scaling="sqrt", warmup_epochs=0.0))
    assert "the largest the sqrt LR rule was shown for" in note
    assert "optimizer=lamb [You et al. 2020]" in note
    assert "a warm-up (schedule=warmup_poly or warmup_cosine" in note


@pytest.mark.parametrize(
    "changed",
    [
        {"effective_batch": 8192},  # the edge of the range: still in it
        {"optimizer": "lars"},
        {"optimizer": "lamb", "scaling": "sqrt"},
        {"optimizer": None},  # a user's class: its rule is the user's
        {"scaling": "none"},
    ],
)
def test_no_note_within_the_range_for_layer_wise_or_unscaled_learning_rates(changed):
    assert large_batch_note(inputs(**changed)) is None


def test_each_rule_names_its_range_and_source_once():
    assert set(RULE_RANGES) == {LrScaling.linear, LrScaling.sqrt}
    assert all(r.largest_batch == 8192 and "[" in r.shown_for for r in RULE_RANGES.values())


def test_adam_with_the_linear_rule_past_8k_gets_both_notes():
    notes = lr_rule_notes(inputs(optimizer="adam"))
    assert len(notes) == 2
    assert "schedule.scaling=sqrt" in notes[0] and notes[1].startswith("global batch 65536")


def test_the_issues_resnet50_plan_at_65536_carries_the_note(compose_cfg):
    overrides = (
        "experiment=resnet50_imagenet",
        "dataset.data_dir=/data",
        "nodes=8",
        "gpus=8",
        "hosts=[h0,h1,h2,h3,h4,h5,h6,h7]",
        "global_batch_size=65536",
    )
    plan = plan_for(compose_cfg, *overrides, data=IMAGENET, facts=MachineFacts(cores_per_node=32))
    assert plan.scaled_lr == pytest.approx(25.6)
    (note,) = [n for n in plan.notes() if n.startswith("global batch")]
    assert "past 8192" in note and "its LR 25.6" in note and "than 5 epochs" in note
    small = plan_for(compose_cfg, *overrides[:5], "global_batch_size=8192", data=IMAGENET)
    assert not [n for n in small.notes() if n.startswith("global batch")]
