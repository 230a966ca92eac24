"""Preemption on the ranks: stop together at one step, checkpoint there, exit cleanly.

A request to stop reaches a rank as a signal (Slurm's SIGTERM to every task, or
``faults.preempt_signals``) or as the driver's ``stop.request`` file (the driver
got the signal: ``sbatch --signal=B:USR1@60`` signals the batch step only, a
``kill`` reaches only the driver). The rank notes it; the next training step
carries it in the gradients' allreduce (:mod:`tntrun.engine.data_parallel`),
so all ranks learn after the same step that one of them was asked and raise
:class:`Preempted` there. Rank 0 writes a checkpoint of that step (mid-epoch:
``epoch-0003.batch-00017``) and ``preempted.json``; every rank waits for it and
exits 0, so no launcher kills a peer that is still writing.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import horovod.tensorflow as hvd

from tntrun.contract import run_files
from tntrun.contract.checkpoints import CheckpointMeta, publish
from tntrun.contract.stop_requests import StopRequests
from tntrun.engine.epoch_position import EpochPosition
from tntrun.engine.step_agreement import StepAgreement


class Preempted(Exception):
    """The ranks agreed to stop after ``batch`` batches of epoch ``epoch`` (0-based)."""

    def __init__(self, epoch: int, batch: int, step: int, why: str) -> None:
        self.epoch, self.batch, self.step, self.why = epoch, batch, step, why
        super().__init__(f"{why}: stopped at epoch {epoch + 1}, batch {batch}, step {step}")


class PreemptionGuard(EpochPosition):
    """Every rank: pass a pending stop request into the next step; raise :class:`Preempted`
    on every rank after the step in which any rank passed one. ``agreement`` is a callback
    placed before this one (it reads the step's stop request). ``trained_file`` (rank 0's):
    written after the run's last step, when no request can stop training any more, so the
    driver lets a signal that comes now end nothing (:mod:`tntrun.launch.preemption`)."""

    def __init__(
        self,
        requests: StopRequests,
        agreement: StepAgreement,
        steps_per_epoch: int,
        epochs: int,
        trained_file: Path | None = None,
    ) -> None:
        super().__init__(steps_per_epoch, epochs)
        self.requests, self.agreement = requests, agreement
        self.trained_file = trained_file
        self._asked = False

    def on_train_batch_begin(self, batch, logs=None):
        if not self._asked and self.requests.event.is_set():
            self._asked = True
            self.agreement.request_stop()

    def on_train_batch_end(self, batch, logs=None):
        where = self.position(batch)
        if where is None:  # the run's last step: finishing beats a checkpoint of it
            if self.trained_file is not None:
                self.trained_file.write_text(f"{self.epochs} epochs\n")
            return
        if self.agreement.stop:  # the epoch's last batch skips its end-of-epoch work
            step = int(self.model.optimizer.iterations.numpy())
            raise Preempted(*where, step, self.requests.reason())


def checkpoint_and_record(
    model: Any, stop: Preempted, meta: CheckpointMeta, run_dir: Path, keep: int
) -> str:
    """Rank 0: publish the checkpoint of the agreed step and ``preempted.json``; every rank:
    wait for both. Returns the checkpoint's folder name."""
    name = ""
    if hvd.rank() == 0:
        from tntrun.engine.precision import state_checkpoint

        state = state_checkpoint(model, model.optimizer)
        path = publish(run_dir, meta, lambda prefix: state.write(prefix), keep)
        name = path.name
        record = {
            "why": stop.why,
            "epoch": stop.epoch,
            "batch": stop.batch,
            "step": stop.step,
            "checkpoint": name,
            "t": time.time(),
        }
        (run_dir / run_files.PREEMPTED).write_text(json.dumps(record, indent=2))
        print(f"{stop}; checkpoint saved: {path}", flush=True)
    return hvd.broadcast_object(name, root_rank=0, name="tntrun.preempted")
