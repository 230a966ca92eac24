"""Each rank's heartbeat file: its step and phase, which the driver's stall watchdog reads."""

from __future__ import annotations

import os
from pathlib import Path

import keras


class Heartbeat(keras.callbacks.Callback):
    """Record this rank's progress (step and phase) in ``<dir>/rank.<N>`` for the watchdog.

    Placed last among the callbacks, so a rank stuck in another callback or in
    its input pipeline shows less progress than the ranks waiting for it.
    """

    RECORD = 32  # bytes: "<step> <phase>" padded, rewritten in place

    def __init__(self, directory: Path, rank: int) -> None:
        super().__init__()
        directory.mkdir(parents=True, exist_ok=True)
        self._path = directory / f"rank.{rank}"
        self._fd = -1
        self._step = 0

    def _beat(self, phase: str) -> None:
        # One pwrite of a fixed-size record: cheap enough for every step.
        os.pwrite(self._fd, f"{self._step} {phase}".ljust(self.RECORD).encode(), 0)

    def on_train_begin(self, logs=None):  # each fit (a resumed epoch's remainder is one)
        if self._fd < 0:
            self._fd = os.open(self._path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._step = int(self.model.optimizer.iterations.numpy())

    def on_train_batch_begin(self, batch, logs=None):
        self._beat("begin")

    def on_train_batch_end(self, batch, logs=None):
        self._step += 1
        self._beat("end")

    def on_test_batch_end(self, batch, logs=None):
        self._beat("eval")

    def on_train_end(self, logs=None):
        os.close(self._fd)
        self._fd = -1
