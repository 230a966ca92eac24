"""The way a sweep's best job is chosen: as the sweeper optimises, else by the objective's name;
and the note when the sweeper optimises it the other way (Optuna minimises by default)."""

from __future__ import annotations

import pytest
from hydra_plugins.hydra_optuna_sweeper.config import Direction
from omegaconf import OmegaConf

from tests.helpers.asserts import assert_exit
from tests.helpers.commands import tntrun_cli
from tntrun.tracking.logged_model import lower_is_better
from tntrun.tracking.sweep import direction_note, sweeper_direction


@pytest.mark.parametrize(
    ("objective", "direction", "lowest"),
    [
        ("val_loss", None, True),
        ("val_accuracy", None, False),
        ("val_accuracy", "minimize", True),
        ("val_loss", "maximize", False),
    ],
)
def test_the_sweepers_direction_decides_else_the_name(objective, direction, lowest):
    assert lower_is_better(objective, direction) is lowest


@pytest.mark.parametrize(
    ("sweeper", "direction"),
    [
        ({"direction": "maximize"}, "maximize"),
        ({"direction": Direction.minimize}, "minimize"),  # as Optuna's config gives it
        ({"direction": ["minimize", "maximize"]}, None),  # multi-objective: not one way
        ({"max_batch_size": None}, None),  # the basic sweeper says nothing
    ],
)
def test_the_sweepers_direction_is_read_from_its_config(sweeper, direction):
    config = OmegaConf.create({"hydra": {"sweeper": sweeper}})
    assert sweeper_direction(config) == direction


def test_a_sweeper_minimising_an_accuracy_gets_one_line_naming_the_fix():
    note = direction_note("val_accuracy", "minimize")
    assert note == (
        "hydra.sweeper.direction=minimize seeks the lowest tracking.objective=val_accuracy "
        "(and the sweep registers that job): set hydra.sweeper.direction=maximize to optimise it"
    )
    assert "hydra.sweeper.direction=minimize to" in direction_note("val_loss", "maximize")
    for agreeing in (("val_accuracy", "maximize"), ("val_loss", "minimize"), ("x", None)):
        assert direction_note(*agreeing) is None


@pytest.mark.slow
def test_a_dry_run_of_an_optimising_sweep_is_refused_in_one_line(tmp_path):
    """Optuna needs each job's objective, which a dry run does not compute (it failed on the
    first job's NaN with a traceback): one line naming the fix, exit 2, nothing tracked."""
    result = tntrun_cli(tmp_path, "-m", "hydra/sweeper=optuna", "dry_run=true")
    assert_exit(result, 2)
    assert result.stderr.strip() == (
        "tntrun: config error: dry_run=true: hydra.sweeper.direction=minimize needs each job's "
        "tracking.objective, which a dry run does not compute: plan a job without -m "
        "(tntrun dry_run=true <its overrides>)"
    )
    assert not (tmp_path / "outputs" / "mlflow.db").exists()
