"""Jobs that differ only by seed: mean and spread per configuration (in-process)."""

from __future__ import annotations

import pytest

from tntrun.tracking import RunSummary
from tntrun.tracking.seed_groups import seed_groups, seeds_line, seeds_markdown


def job(seed: int, lr: str, accuracy: float, status: str = "FINISHED") -> RunSummary:
    params = {"seed": str(seed), "optimizer.base_lr": lr, "train.epochs": "3"}
    return RunSummary(
        f"run-{seed}-{lr}", status=status, params=params, metrics={"val_accuracy": accuracy}
    )


def test_each_configuration_gets_the_mean_and_spread_of_its_seeds():
    children = [
        job(1, "0.1", 0.90),
        job(2, "0.1", 0.92),
        job(3, "0.1", 0.94),
        job(1, "0.2", 0.80),
        job(2, "0.2", 0.84),
        job(3, "0.2", 0.50, status="FAILED"),  # not a repeat that finished
        job(1, "0.3", 0.70),  # alone: nothing to spread
    ]
    first, second = seed_groups(children)
    assert (first.label, first.seeds) == ("optimizer.base_lr=0.1", ("1", "2", "3"))
    assert first.spread("val_accuracy") == pytest.approx((0.92, 0.02, 0.90, 0.94))
    assert (second.label, second.seeds) == ("optimizer.base_lr=0.2", ("1", "2"))
    assert seeds_line(first, "val_accuracy") == (
        "optimizer.base_lr=0.1: val_accuracy 0.9200 ± 0.0200 over 3 seeds (1, 2, 3)"
    )
    assert seeds_line(first, "bleu") is None  # not recorded
    table = seeds_markdown([first, second])
    assert "| optimizer.base_lr=0.1 | 1, 2, 3 | 0.92 ± 0.02 (0.9-0.94) |" in table


def test_a_sweep_of_seeds_alone_is_one_group_and_other_sweeps_none():
    (group,) = seed_groups([job(1, "0.1", 0.9), job(2, "0.1", 0.8)])
    assert group.label == "all jobs"
    assert seed_groups([job(1, "0.1", 0.9), job(1, "0.2", 0.8)]) == []
