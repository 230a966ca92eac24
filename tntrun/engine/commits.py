"""Elastic runs on the ranks: rank 0 commits the training state every few steps.

A commit is an ordinary mid-epoch checkpoint (``epoch-0002.batch-00030``), so when a host
is lost the driver restarts the surviving ranks from the newest one, at the new world
size, as a resumed run does: at most ``elastic.commit_every_steps`` steps of work are lost.
Rank 0 writes alone (the ranks' states are the same after every step); the others go on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tntrun.contract.checkpoints import CheckpointMeta, publish
from tntrun.engine.epoch_position import EpochPosition


class Commits(EpochPosition):
    """Rank 0: a checkpoint after every ``every`` training steps, but the run's last."""

    def __init__(
        self,
        run_dir: Path,
        every: int,
        keep: int,
        steps_per_epoch: int,
        epochs: int,
        meta: Callable[[int, int], CheckpointMeta],
    ) -> None:
        super().__init__(steps_per_epoch, epochs)
        self.run_dir, self.every, self.keep, self.meta = run_dir, every, keep, meta

    def on_train_batch_end(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        where = None if step % self.every else self.position(batch)
        if where is None:  # not a commit step, or the run's last (its end saves the state)
            return
        from tntrun.engine.precision import state_checkpoint

        state = state_checkpoint(self.model, self.model.optimizer)
        epoch, done = where
        meta = replace(self.meta(epoch, step), batch=done)
        publish(self.run_dir, meta, lambda prefix: state.write(prefix), self.keep)
