"""Fault injection on one rank in-process: its arguments checked, a fault at its step on
its rank only and once (across processes with ``once_file``), and ``hold`` waiting for
its release file."""

from __future__ import annotations

import math

import pytest

from tests.engine.one_rank import classifier, fit, horovod_of_one_rank
from tntrun.engine.faults import InjectFault


@pytest.fixture(autouse=True)
def one_rank():
    horovod_of_one_rank()


def test_an_unknown_kind_and_a_release_without_hold_are_refused():
    with pytest.raises(ValueError, match="kind='explode'"):
        InjectFault(rank=0, at_step=1, kind="explode")
    with pytest.raises(ValueError, match="release=<file> goes with kind=hold"):
        InjectFault(rank=0, at_step=1, kind="raise", release="/tmp/x")
    with pytest.raises(ValueError, match="release=<file> goes with kind=hold"):
        InjectFault(rank=0, at_step=1, kind="hold")


def test_raise_at_its_step_on_its_rank(capsys):
    with pytest.raises(RuntimeError, match="injected failure on rank 0 at step 2"):
        fit(classifier(), [InjectFault(rank=0, at_step=2)])
    assert "rank 0: injecting fault 'raise' at step 2" in capsys.readouterr().out


def test_another_ranks_fault_leaves_this_rank_alone():
    fit(classifier(), [InjectFault(rank=1, at_step=2)])


def test_nan_loss_poisons_the_output_layer_once(tmp_path):
    once = tmp_path / "fired"
    model = classifier()
    fit(model, [InjectFault(rank=0, at_step=3, kind="nan_loss", once_file=str(once))])
    assert math.isnan(float(model.trainable_variables[-1].numpy()[0]))
    assert once.read_text() == "rank 0 step 3 nan_loss\n"
    fresh = classifier()  # a restarted rank passes step 3 again: the file says it fired
    fit(fresh, [InjectFault(rank=0, at_step=3, kind="nan_loss", once_file=str(once))])
    assert not math.isnan(float(fresh.trainable_variables[-1].numpy()[0]))


def test_hold_writes_its_mark_and_goes_on_once_released(tmp_path, capsys):
    release = tmp_path / "release"
    release.write_text("")  # released already: the rank passes at once
    fault = InjectFault(rank=0, at_step=2, kind="hold", release=str(release))
    fit(classifier(), [fault])
    assert (tmp_path / "release.held").read_text() == "step 2\n"
    assert fault.fired and "holding after step 2" in capsys.readouterr().out
