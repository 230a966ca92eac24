"""pace.py: a user callback module a test writes into a run's working directory to
interrupt training at a known point however busy the machine is.

- Pace: each step sleeps step_s until the file ``until`` exists; with hold_at_step, that
  step waits for ``until`` (training cannot run out before the test has acted).
- HoldForStop: once, at (epoch, batch), write ``reached`` and wait until this rank has
  noted a stop request (tntrun's watcher thread ``tntrun-stop-request`` ends when the
  request is noted), so the ranks stop at that step or the next, never later.
"""

PACE = """
import os
import threading
import time
from pathlib import Path

import keras


class Pace(keras.callbacks.Callback):
    def __init__(self, step_s, until, hold_at_step=None):
        super().__init__()
        self.step_s, self.until, self.hold_at_step = step_s, until, hold_at_step

    def on_train_batch_end(self, batch, logs=None):
        if os.path.exists(self.until):
            return
        step = int(self.model.optimizer.iterations.numpy())
        if step == self.hold_at_step:
            while not os.path.exists(self.until):
                time.sleep(0.05)
        time.sleep(self.step_s)


class HoldForStop(keras.callbacks.Callback):
    def __init__(self, epoch, batch, reached):
        super().__init__()
        self.epoch, self.batch, self.reached = epoch, batch, Path(reached)
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self._epoch, batch) != (self.epoch, self.batch) or self.reached.exists():
            return  # once: a resumed run keeps its config, this callback included
        self.reached.write_text(f"epoch {self._epoch} batch {batch}")
        while any(t.name == "tntrun-stop-request" for t in threading.enumerate()):
            time.sleep(0.05)
"""
