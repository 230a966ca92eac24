"""Keys that moved to their concern's section: the old ones are refused with their new
place on the command line, and read at the new place from an earlier run's stored config."""

from __future__ import annotations

import dataclasses

from omegaconf import OmegaConf

from tests.helpers.paths import ROOT
from tntrun.config.moved_keys import MOVED_KEYS, moved_key_problems
from tntrun.config.schema import OnNonFinite, TntrunConfig
from tntrun.config.settings import plain_settings, recorded_settings, settings_of

OLD_CONFIG = ROOT / "tests" / "data" / "run_dir_v0_1" / "run" / "config.yaml"


def test_every_moved_key_names_a_key_of_todays_schema_and_none_of_the_old_remains():
    config = TntrunConfig()
    for old, new in MOVED_KEYS.items():
        old_section, old_name = old.split(".")
        new_section, new_name = new.split(".")
        assert new_name in {f.name for f in dataclasses.fields(getattr(config, new_section))}
        assert not hasattr(getattr(config, old_section), old_name), old


def test_an_old_key_is_refused_naming_its_new_place_however_it_is_written():
    assert moved_key_problems(["train.epochs=3", "faults.max_restarts=1"]) == []
    assert moved_key_problems(["+train.max_rollbacks=2", "~train.bleu_beam_size"]) == [
        "+train.max_rollbacks=2: train.max_rollbacks moved to faults.max_rollbacks: "
        "write faults.max_rollbacks=2",
        "~train.bleu_beam_size: train.bleu_beam_size moved to eval.bleu_beam_size: "
        "write ~eval.bleu_beam_size",
    ]


def test_the_config_a_tntrun_0_1_run_stored_reads_with_its_keys_at_their_new_places(tmp_path):
    settings, problem = recorded_settings(OLD_CONFIG)
    assert settings.train.epochs == 2
    assert settings.faults.preempt_signals == ["SIGTERM", "SIGUSR1"]
    assert settings.eval.every_epochs == 1
    # The fault and evaluation keys stay out of the problem's hash, as train's were.
    changed = OmegaConf.load(OLD_CONFIG)
    changed.train.max_restarts, changed.train.bleu_beam_size = 4, 5
    OmegaConf.save(changed, tmp_path / "config.yaml")
    changed_settings, changed_problem = recorded_settings(tmp_path / "config.yaml")
    assert changed_problem == problem
    assert (changed_settings.faults.max_restarts, changed_settings.eval.bleu_beam_size) == (4, 5)


def test_settings_stored_in_an_earlier_plan_in_the_old_layout_load():
    stored = plain_settings(recorded_settings(OLD_CONFIG)[0])
    faults = stored.pop("faults")
    stored["train"].update(faults, on_nonfinite="rollback")  # as a plan.json of then held it
    stored["train"]["epochs_between_evals"] = stored.pop("eval")["every_epochs"] + 2
    settings = settings_of(stored)
    assert settings.faults.on_nonfinite is OnNonFinite.rollback
    assert settings.eval.every_epochs == 3
    assert settings.faults.stall_timeout_s == faults["stall_timeout_s"]
