"""A callback's stop on one rank stops every rank at the same point, on one rank
in-process: at an epoch's end (recorded for the driver, said on the console) and inside
an epoch (held back, sent with the next step's allreduce, stopped after that step)."""

from __future__ import annotations

import json

from tests.engine.one_rank import classifier, fit, horovod_of_one_rank, keras
from tntrun.contract.run_files import STOPPED_EARLY
from tntrun.engine.data_parallel import agree_after_each_step, data_parallel
from tntrun.engine.stop_agreement import StopAgreement, stopped_early


class StopAt(keras.callbacks.Callback):
    """Asks to stop after epoch ``epoch``'s end, or after its batch ``batch``."""

    def __init__(self, epoch: int, batch: int | None = None) -> None:
        super().__init__()
        self.epoch, self.batch, self.steps = epoch, batch, 0

    def on_train_batch_end(self, batch, logs=None):
        self.steps += 1
        if batch == self.batch and self.current == self.epoch:
            self.model.stop_training = True

    def on_epoch_begin(self, epoch, logs=None):
        self.current = epoch

    def on_epoch_end(self, epoch, logs=None):
        if self.batch is None and epoch == self.epoch:
            self.model.stop_training = True


def fitted_with(stop: StopAt, run_dir, epochs: int = 3):
    horovod_of_one_rank()
    optimizer = data_parallel(keras.optimizers.SGD(0.1))
    agreement = agree_after_each_step(optimizer)
    agreed = StopAgreement(run_dir, rank=0, epochs=epochs, agreement=agreement)
    callbacks = [agreement, agreed.before, stop, agreed.after]
    history = fit(classifier(optimizer), callbacks, epochs=epochs)
    return agreed, callbacks, history


def test_a_stop_at_an_epochs_end_is_agreed_and_recorded(tmp_path, capsys):
    stop = StopAt(epoch=0)
    agreed, callbacks, history = fitted_with(stop, tmp_path)
    assert len(history.history["loss"]) == 1 and stop.steps == 4
    assert agreed.stopped_at == 0 and stopped_early(callbacks)
    record = json.loads((tmp_path / STOPPED_EARLY).read_text())
    assert record == {"epoch": 1, "epochs": 3, "ranks": [0]}
    assert "training stopped early after epoch 1 of 3" in capsys.readouterr().out


def test_a_stop_inside_an_epoch_is_held_back_one_step(tmp_path):
    stop = StopAt(epoch=1, batch=0)
    agreed, callbacks, _ = fitted_with(stop, tmp_path)
    assert stop.steps == 4 + 2  # the step it asked after, then one more, with the others
    assert json.loads((tmp_path / STOPPED_EARLY).read_text())["step"] == 2
    assert stopped_early(callbacks)


def test_a_stop_at_the_last_epoch_is_no_early_stop(tmp_path):
    agreed, callbacks, history = fitted_with(StopAt(epoch=2), tmp_path)
    assert len(history.history["loss"]) == 3
    assert agreed.stopped_at is None and not stopped_early(callbacks)
    assert not (tmp_path / STOPPED_EARLY).exists()
