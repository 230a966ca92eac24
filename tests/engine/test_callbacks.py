"""Keras callbacks as users add them, on two real ranks: a callback that stops training stops
every rank after the same epoch (no rank left waiting in an allreduce), and the run says so.

Before, a callback without a ``ranks`` key ran on rank 0 only: EarlyStopping stopped rank 0
and rank 1 waited until the stall watchdog ended the job (``faults.stall_timeout_s``).
"""

from __future__ import annotations

import json
import os
import pty
import re
import subprocess
import textwrap
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import in_session, tntrun_cli, tntrun_command
from tests.helpers.pace import PACE
from tests.helpers.runs import run_dir_of, store_uri
from tntrun.contract import run_files

pytestmark = pytest.mark.slow

EPOCHS = 10
# What no test here examines: MLflow's system metrics, and the final model logged as an
# MLflow Model (rank 0 imports MLflow to write it: about 2 CPU-s of every finished run).
LEAN = ("tracking.system_metrics=false", "tracking.log_model=false")
# Keras prints it when an EarlyStopping with verbose=1 stopped its rank after epoch 2.
STOPPED_AFTER_EPOCH_2 = "Epoch 2: early stopping"


def early_stopping(name: str, monitor: str) -> tuple[str, ...]:
    """Keras' EarlyStopping on ``monitor`` as callback ``name`` (no ranks key): it stops
    after epoch 2, as epoch 1 sets the best value and epoch 2 cannot improve it by
    min_delta. verbose=1: each one that stops its rank says so in that rank's log."""
    return (
        f"+callbacks.{name}._target_=keras.callbacks.EarlyStopping",
        f"+callbacks.{name}.monitor={monitor}",
        f"+callbacks.{name}.patience=1",
        f"+callbacks.{name}.min_delta=100",
        f"+callbacks.{name}.verbose=1",
    )


# A user's callback deciding from local state: only rank 1 asks to stop, after epoch 3.
STOP_ON_RANK_1 = """
    import horovod.tensorflow as hvd
    import keras


    class StopOnRank1(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            if hvd.rank() == 1 and epoch == 2:
                self.model.stop_training = True
"""
# A user's callback deciding from local state inside an epoch: rank 1 alone asks to stop
# after the epoch's step 5 (batch 4) of epoch 2.
STOP_MID_EPOCH_ON_RANK_1 = """
    import horovod.tensorflow as hvd
    import keras


    class StopMidEpoch(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.epoch = epoch

        def on_train_batch_end(self, batch, logs=None):
            if hvd.rank() == 1 and self.epoch == 1 and batch == 4:
                self.model.stop_training = True
"""


def run_stopped_early(work, *overrides: str, epochs: int = EPOCHS):
    """A run of ``epochs`` epochs with ``overrides``: its MLflow run, stdout, run dir and the
    epochs it logged."""
    result = tntrun_cli(work, f"train.epochs={epochs}", *LEAN, *overrides)
    assert_succeeded(result)
    run, logged = finished_run(work, run_dir_of(result))
    return run, result.stdout, run_dir_of(result), logged


def finished_run(work, run_dir):
    """The FINISHED MLflow run of ``run_dir``, both ranks alike, and the epochs it logged."""
    client = MlflowClient(store_uri(work))
    run = client.get_run((run_dir / "run_id").read_text())
    assert run.info.status == "FINISHED"
    assert run.data.metrics["weights_rank_spread"] == 0.0  # both ranks trained alike
    logged = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
    return run, logged


def assert_early_stopping_stopped_both_ranks_after_epoch_2(run, out, run_dir, epochs) -> None:
    """EarlyStopping (no ranks key) ran on both ranks and stopped them after epoch 2."""
    assert epochs == [0, 1]
    assert run.data.tags["stopped_early"] == f"epoch 2 of {EPOCHS}"
    assert f"training stopped early after epoch 2 of {EPOCHS}" in out
    assert "rank(s) [0, 1]" in out  # it ran on both ranks: no ranks key needed
    record = json.loads((run_dir / run_files.STOPPED_EARLY).read_text())
    assert record == {"epoch": 2, "epochs": EPOCHS, "ranks": [0, 1]}


def lr_history(work, run) -> list[float]:
    client = MlflowClient(store_uri(work))
    return [m.value for m in client.get_metric_history(run.info.run_id, "lr")]


def test_a_stop_asked_on_one_rank_only_stops_every_rank(tmp_path):
    (tmp_path / "stopper.py").write_text(textwrap.dedent(STOP_ON_RANK_1))
    stopper = "+callbacks.stop._target_=stopper.StopOnRank1"
    run, out, _, epochs = run_stopped_early(tmp_path, stopper)
    assert epochs == [0, 1, 2]
    assert run.data.tags["stopped_early"] == f"epoch 3 of {EPOCHS}"
    assert "set stop_training on rank(s) [1]; every rank stops here" in out


def test_a_stop_asked_inside_an_epoch_on_one_rank_stops_every_rank_after_the_next_step(
    tmp_path,
):
    """Without the agreement rank 1 would leave fit after step 5 while rank 0 waits in step
    6's allreduce until the stall watchdog (600 s) fails the run."""
    (tmp_path / "stopper.py").write_text(textwrap.dedent(STOP_MID_EPOCH_ON_RANK_1))
    stopper = "+callbacks.stop._target_=stopper.StopMidEpoch"
    run, out, run_dir, epochs = run_stopped_early(tmp_path, stopper, "faults.stall_timeout_s=60")
    assert epochs == [0, 1]
    assert run.data.tags["stopped_early"] == f"epoch 2 of {EPOCHS}, step 6"
    assert f"stopped early in epoch 2 of {EPOCHS}, after its step 6: " in out
    assert "set stop_training on rank(s) [1]; every rank stops here" in out
    record = json.loads((run_dir / run_files.STOPPED_EARLY).read_text())
    assert record == {"epoch": 2, "epochs": EPOCHS, "ranks": [1], "step": 6}


def test_reduce_lr_on_plateau_scales_the_schedule_and_a_batch_job_prints_progress_lines(
    tmp_path,
):
    """Keras refused to set a number on tntrun's schedule (TypeError at the first plateau); the
    number now scales the schedule alike on every rank. Every epoch after the first is a
    plateau (min_delta). A run that nothing stops has no early-stop tag, record or line.

    The same run has no terminal (a pipe, as under Slurm): every train.progress_interval_s a
    line from rank 0 with the step, speed, loss and time left. Steps are slowed to 0.1 s (the
    pace callback on both ranks), so each 22-step epoch lasts over 2 s: lines at 1 s."""
    plateau = (
        "schedule=constant",
        "+callbacks.plateau._target_=keras.callbacks.ReduceLROnPlateau",
        "+callbacks.plateau.monitor=val_loss",
        "+callbacks.plateau.patience=1",
        "+callbacks.plateau.min_delta=100",
        "+callbacks.plateau.factor=0.5",
    )
    (tmp_path / "pace.py").write_text(PACE)
    slow = (*paced(tmp_path), "train.progress_interval_s=1")
    run, out, run_dir, epochs = run_stopped_early(tmp_path, *plateau, *slow, epochs=4)
    assert epochs == [0, 1, 2, 3] and "stopped_early" not in run.data.tags
    assert not (run_dir / run_files.STOPPED_EARLY).exists() and "stopped early" not in out
    lr = lr_history(tmp_path, run)  # the epoch's last step: cut after epochs 2 and 3
    assert lr == pytest.approx([lr[0], lr[0], lr[0] / 2, lr[0] / 4], rel=1e-6), lr
    lines = re.findall(
        r"epoch [1-4]/4: step (\d+)/22 \(\d+%\), [\d,]+ samples/s, loss [\d.]+; epoch ends in "
        r"\d+m\d\ds, the run in \d+m\d\ds",
        out,
    )
    assert lines and all(0 < int(step) <= 22 for step in lines), out[-3000:]


def paced(work) -> tuple[str, ...]:
    """Overrides slowing every step of both ranks to 0.1 s (pace.py in ``work``)."""
    return (
        "+callbacks.pace._target_=pace.Pace",
        "+callbacks.pace.step_s=0.1",
        f"+callbacks.pace.until={work / 'never'}",
    )


def run_on_a_terminal(work, *overrides: str) -> str:
    """``tntrun`` with its stdout on a pseudo-terminal, as in an interactive shell: all it
    wrote there, once it ended."""
    main, terminal = pty.openpty()
    with in_session(
        tntrun_command(work, *overrides), work, stdout=terminal, stderr=subprocess.DEVNULL
    ) as process:
        os.close(terminal)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's last writer closed it
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=600) == 0, b"".join(chunks).decode()[-3000:]
    os.close(main)
    return b"".join(chunks).decode(errors="replace")


def without_redraws(out: str) -> str:
    """A terminal's output as its lines, without the live line's redraws."""
    return out.replace("\r", "").replace("\x1b[K", "")


@pytest.fixture(scope="module")
def early_stopped_on_a_terminal(tmp_path_factory) -> tuple[Path, str, Path]:
    """One paced run on a terminal with two EarlyStopping callbacks, on val_loss (minimised)
    and on val_accuracy (maximised): both tests below read it, one launch instead of two.
    Its working directory, all it wrote on the terminal and its run directory."""
    work = tmp_path_factory.mktemp("early_stopped_on_a_terminal")
    (work / "pace.py").write_text(PACE)
    out = run_on_a_terminal(
        work,
        f"train.epochs={EPOCHS}",
        *LEAN,
        *paced(work),
        *early_stopping("es_loss", "val_loss"),
        *early_stopping("es_accuracy", "val_accuracy"),
    )
    return work, out, next((work / "outputs" / "runs").glob("*/*"))


def test_early_stopping_on_val_loss_and_on_val_accuracy_each_stops_both_ranks_after_epoch_2(
    early_stopped_on_a_terminal,
):
    """Each EarlyStopping decides alone on each rank: two lines in each rank's log say that
    both stopped their rank (one whose monitor a rank lacks would stay silent there), and
    every rank stops after epoch 2, whatever the console."""
    work, out, run_dir = early_stopped_on_a_terminal
    for rank in (0, 1):
        log = (run_dir / "logs" / f"rank.{rank}.log").read_text()
        assert log.count(STOPPED_AFTER_EPOCH_2) == 2, log[-3000:]
    run, epochs = finished_run(work, run_dir)
    assert_early_stopping_stopped_both_ranks_after_epoch_2(
        run, without_redraws(out), run_dir, epochs
    )


def test_on_a_terminal_rank_0s_live_line_is_redrawn_in_place_and_no_log_keeps_it(
    early_stopped_on_a_terminal,
):
    """On a terminal rank 0 adds a line every second that the driver redraws in place (the
    30-s line of a batch job does not come in a 2-s epoch); the logs keep none of it."""
    _, out, run_dir = early_stopped_on_a_terminal
    live = re.findall(
        rf"\r\x1b\[Kepoch [12]/{EPOCHS}: step (\d+)/22 \(\d+%\), [\d,]+ samples/s, ", out
    )
    assert live and all(0 < int(step) <= 22 for step in live), out[-3000:]
    assert run_files.LIVE_PREFIX not in out
    assert "\ntntrun: run FINISHED" in without_redraws(out)
    for log in (run_dir / run_files.RANKS_LOG, run_dir / "logs" / "rank.0.log"):
        assert "samples/s, loss" not in log.read_text(), log
