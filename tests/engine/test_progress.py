"""Rank 0's progress lines inside an epoch, from a real ``fit``: the time left to the unit
that matters, the step counted from a resumed epoch's start, the live lines for a terminal;
and the self-check a set-up runs, as a world of one rank."""

from __future__ import annotations

import re

from tests.engine.one_rank import classifier, fit, horovod_of_one_rank
from tests.helpers.plans import plan_for
from tntrun.contract.run_files import LIVE_PREFIX
from tntrun.engine import selfcheck
from tntrun.engine.progress import EpochProgress, duration
from tntrun.engine.step_agreement import StepAgreement


def test_duration_shows_minutes_and_seconds_or_hours_and_minutes():
    assert [duration(s) for s in (0, 95, 3599, 4000, -5)] == [
        "0m00s",
        "1m35s",
        "59m59s",
        "1h06m",
        "0m00s",
    ]


def lines_of(output: str) -> list[str]:
    return [line for line in output.splitlines() if "step" in line]


def test_a_line_per_step_but_the_first_with_the_agreed_loss(compose_cfg, capsys):
    plan = plan_for(compose_cfg, "train.epochs=2")
    agreement = StepAgreement()
    agreement.loss = 0.25
    progress = EpochProgress(0.0, plan, agreement)
    fit(classifier(), [progress], steps_per_epoch=3)  # plan.steps_per_epoch is larger
    lines = lines_of(capsys.readouterr().out)
    steps = plan.steps_per_epoch
    skipped = steps - 3  # fit ran the epoch's last 3 steps, as a resumed epoch does
    assert len(lines) == 2
    assert lines[0].startswith(f"epoch 1/2: step {skipped + 2}/{steps} (")
    assert "loss 0.25; epoch ends in " in lines[0] and re.search(r"the run in \d+m\d\ds$", lines[0])


def test_live_lines_for_a_terminal_between_the_logged_ones(compose_cfg, capsys):
    plan = plan_for(compose_cfg)
    progress = EpochProgress(3600.0, plan, StepAgreement(), live=True)
    progress.LIVE_EVERY_S = 0.0
    fit(classifier(), [progress])
    lines = lines_of(capsys.readouterr().out)
    assert len(lines) == 3 and all(line.startswith(LIVE_PREFIX) for line in lines)


def test_the_selfcheck_allreduces_on_a_world_of_one(capsys):
    horovod_of_one_rank()
    assert selfcheck.main() == 0
    assert capsys.readouterr().out.startswith("selfcheck ok: 1 ranks, allreduce sum 1,")
