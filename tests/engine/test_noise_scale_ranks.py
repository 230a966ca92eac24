"""The gradient noise scale on real ranks: two launches of tests/rank_scripts/noise_scale.py
(2 ranks, then 4 with accumulation and fp16 compression, the same global batch of 64) on a
linear regression whose |G|^2 and tr(Sigma) are exact; the second resumes the first's
checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import run_on_two_ranks
from tests.helpers.paths import RANK_SCRIPTS

pytestmark = pytest.mark.slow

SCRIPT = RANK_SCRIPTS / "noise_scale.py"
# 256 updates of 24 + 1 dimensions: the averages' own noise is about 1-2% (a NumPy simulation of
# the same sampling: at most 3.7% over 5 seeds x 2 layouts); the bound is a few percent.
EXACT_WITHIN = 0.05


def summaries(state_dir: Path, ranks: int) -> list[dict]:
    result = run_on_two_ranks(SCRIPT, timeout=600, ranks=ranks, args=[str(state_dir)])
    assert_succeeded(result)
    found = [
        json.loads(line.split("RESULT ", 1)[1])
        for line in result.stdout.splitlines()
        if "RESULT {" in line
    ]
    assert sorted(s["rank"] for s in found) == list(range(ranks)), result.stdout[-3000:]
    return sorted(found, key=lambda s: s["rank"])


@pytest.fixture(scope="module")
def layouts(tmp_path_factory) -> dict[int, list[dict]]:
    """Each launch's rank summaries, by world size (the 4-rank one resumes the 2-rank one)."""
    state_dir = tmp_path_factory.mktemp("noise_scale")
    return {ranks: summaries(state_dir, ranks) for ranks in (2, 4)}


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_averaged_estimates_match_the_exact_values(layouts, ranks):
    for summary in layouts[ranks]:
        assert summary["updates"] == 256
        for name in ("gradient_sq", "trace"):
            exact, measured = summary[f"exact_{name}"], summary[f"mean_{name}"]
            assert measured == pytest.approx(exact, rel=EXACT_WITHIN), (ranks, name)
    first = layouts[ranks][0]
    assert all(s["state"] == first["state"] for s in layouts[ranks])  # one average everywhere


def test_the_noise_scale_is_the_problems_not_the_layouts(layouts):
    ratios = {r: s[0]["mean_trace"] / s[0]["mean_gradient_sq"] for r, s in layouts.items()}
    assert ratios[2] == pytest.approx(ratios[4], rel=2 * EXACT_WITHIN), ratios
    smoothed = {r: s[0]["smoothed"]["gradient_noise_scale"] for r, s in layouts.items()}
    exact = layouts[2][0]["exact_trace"] / layouts[2][0]["exact_gradient_sq"]
    for value in smoothed.values():  # the last 20 or so updates: noisier, still the same
        assert value == pytest.approx(exact, rel=0.2), smoothed


def test_a_resume_on_another_layout_continues_the_averages(layouts):
    saved = layouts[2][0]["state"]
    for summary in layouts[4]:
        assert summary["restored"] == pytest.approx(saved)
        assert summary["steps_after_fit"] == saved[-1] + 256


def test_a_step_with_a_zero_weight_sample_on_one_rank_is_left_out_on_all(layouts):
    assert all(s["padded_left_out"] for summaries in layouts.values() for s in summaries)
