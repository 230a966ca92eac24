"""The master rank's checkpoints: model and optimizer state by epochs and by time, and the
best by a monitored metric (the folders' layout is :mod:`tntrun.contract.checkpoints`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import keras
import numpy as np

from tntrun.contract import run_files
from tntrun.contract.checkpoints import publish, publish_best
from tntrun.contract.metrics import lowest_is_best
from tntrun.engine.precision import state_checkpoint


class Checkpointer(keras.callbacks.Callback):
    """Master rank: publish model + optimizer state, by epochs and by time, and keep the best.

    A checkpoint is due every ``every_epochs`` epochs once ``min_interval_s``
    passed since the previous one (short epochs do not write one each); the
    last epoch always writes one. With ``monitor``, a new best value of that
    metric also replaces ``checkpoints/best`` (``save_model`` adds a clean
    ``.keras`` model there).
    """

    def __init__(
        self,
        run_dir: Path,
        every_epochs: int,
        keep: int,
        describe: Callable,
        min_interval_s: float,
        monitor: str | None = None,
        mode: str = "auto",
        save_model: Callable[[Path], None] | None = None,
    ) -> None:
        super().__init__()
        self.run_dir, self.every, self.keep, self.describe = run_dir, every_epochs, keep, describe
        self.min_interval_s, self.monitor, self.save_model = min_interval_s, monitor, save_model
        if mode == "auto":
            mode = "min" if monitor and lowest_is_best(monitor) else "max"
        self.better = (lambda a, b: a < b) if mode == "min" else (lambda a, b: a > b)
        self.best: float | None = None
        self._last_write = time.monotonic()

    def on_train_begin(self, logs=None):
        self._last_write = time.monotonic()

    def on_epoch_end(self, epoch, logs=None):
        done = epoch + 1
        meta = self.describe(done, int(self.model.optimizer.iterations.numpy()))
        if self.monitor:
            self._keep_best(meta, logs or {})
        last = done == self.params.get("epochs")
        due = self.every > 0 and done % self.every == 0
        waited = time.monotonic() - self._last_write >= self.min_interval_s
        if not (last and self.every > 0) and not (due and waited):
            return
        state = state_checkpoint(self.model, self.model.optimizer)
        path = publish(self.run_dir, meta, lambda prefix: state.write(prefix), self.keep)
        self._last_write = time.monotonic()
        print(f"checkpoint saved: epoch {done} -> {path}", flush=True)

    def _keep_best(self, meta: Any, logs: dict) -> None:
        if self.monitor not in logs:
            if any(key.startswith("val_") for key in logs):  # an evaluated epoch without it
                raise ValueError(
                    f"checkpoint.monitor={self.monitor}: no such metric; this run logs "
                    f"{', '.join(sorted(logs))}"
                )
            return  # not evaluated this epoch (eval.every_epochs)
        value = float(logs[self.monitor])
        if not np.isfinite(value) or (self.best is not None and not self.better(value, self.best)):
            return
        self.best = value
        state = state_checkpoint(self.model, self.model.optimizer)
        path = publish_best(
            self.run_dir, meta, lambda prefix: state.write(prefix), self.monitor, value
        )
        if self.save_model is not None:
            self.save_model(path / run_files.FINAL_MODEL)
        print(
            f"best checkpoint: epoch {meta.epoch}, {self.monitor}={value:.4g} -> {path}", flush=True
        )
