"""Fault injection for rehearsing failures: make one rank raise, exit, die, stall, be
preempted, or hold still while something else breaks.

Add it as a user callback on all ranks, e.g.::

    tntrun +callbacks.fault._target_=tntrun.engine.faults.InjectFault \\
           +callbacks.fault.ranks=all_ranks +callbacks.fault.rank=1 \\
           +callbacks.fault.at_step=30 +callbacks.fault.kind=kill

``kind=hold`` with ``+callbacks.fault.release=<file>`` pauses every rank after step
``at_step`` (the run's last step too) until ``<file>`` exists, rank ``rank`` having
written ``<file>.held`` first: a test breaks something (the tracking store, say) at a
known step while the ranks wait idle (none spins in a collective), then releases them.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import horovod.tensorflow as hvd
import keras

KINDS = ("raise", "exit", "kill", "stall", "nan_loss", "preempt", "hold")
HOLD_POLL_S = 0.05


class InjectFault(keras.callbacks.Callback):
    """At training step ``at_step`` on rank ``rank``: raise, exit(3), SIGKILL itself, sleep,
    (``nan_loss``, once) set a weight to NaN, so that step's loss on that rank is NaN, or
    (``preempt``) SIGTERM itself as Slurm preempts a task: the handler runs before ``os.kill``
    returns, so with SIGTERM in ``faults.preempt_signals`` the ranks stop together after
    step ``at_step + 2`` and checkpoint it."""

    def __init__(
        self,
        rank: int,
        at_step: int,
        kind: str = "raise",
        once_file: str | None = None,
        release: str | None = None,
    ) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"callbacks.fault.kind={kind!r}: choose one of {', '.join(KINDS)}")
        if (kind == "hold") != (release is not None):
            raise ValueError("callbacks.fault.release=<file> goes with kind=hold, and only")
        self.rank, self.at_step, self.kind = rank, at_step, kind
        # With once_file, once across processes too: restarted ranks pass the step again.
        self.once_file = Path(once_file) if once_file else None
        self.release = Path(release) if release else None
        self.fired = False

    def on_train_batch_end(self, batch, logs=None):
        """``hold``: after step ``at_step``, wait for the release file."""
        step = int(self.model.optimizer.iterations.numpy())
        if self.release is None or step != self.at_step or self.fired:
            return
        self.fired = True
        if hvd.rank() == self.rank:
            print(f"rank {self.rank}: holding after step {step} until {self.release}", flush=True)
            self.release.with_name(f"{self.release.name}.held").write_text(f"step {step}\n")
        while not self.release.exists():
            time.sleep(HOLD_POLL_S)

    def on_train_batch_begin(self, batch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        if self.kind == "hold" or hvd.rank() != self.rank or step != self.at_step or self.fired:
            return
        self.fired = True  # once: a rolled-back run passes this step again
        if self.once_file is not None:
            if self.once_file.exists():
                return
            self.once_file.write_text(f"rank {self.rank} step {step} {self.kind}\n")
        print(f"rank {self.rank}: injecting fault '{self.kind}' at step {step}", flush=True)
        if self.kind == "nan_loss":  # the output layer's last weight: NaN logits, NaN loss
            weight = self.model.trainable_variables[-1]
            weight.assign(weight * float("nan"))
            return
        if self.kind == "raise":
            raise RuntimeError(f"injected failure on rank {self.rank} at step {step}")
        if self.kind == "exit":
            sys.exit(3)
        if self.kind == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.kind == "preempt":
            os.kill(os.getpid(), signal.SIGTERM)
            return
        while True:  # stall
            time.sleep(3600)
