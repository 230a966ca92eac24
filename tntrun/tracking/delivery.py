"""The end of a run's record: what the store has not received, delivered once, through an outage.

One piece for both who end a record: the driver when the ranks have ended
(:class:`~tntrun.tracking.recorder.Recorder`) and ``tntrun sync`` later
(:mod:`tntrun.tracking.sync`). Each gives a :class:`Delivery` its relay, the status
and how to open the run; :func:`deliver_or_leave_pending` retries it through an
outage of the store (:mod:`tntrun.tracking.outage`) and, if the store is still down
when the time is up, leaves what is left in ``tracking_pending.json`` for the next
``tntrun sync``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tntrun.contract.run_status import RunStatus
from tntrun.planning.plan import Plan
from tntrun.tracking import Tracker
from tntrun.tracking.logged_model import ModelPublishing
from tntrun.tracking.metrics_stream import MetricsRelay
from tntrun.tracking.outage import Pending, describe, is_outage
from tntrun.tracking.run_record import record_outputs

RETRY_EVERY_S = 2.0  # between attempts to deliver the rest at the end of a run


def run_models(plan: Plan, parent_run_id: str | None) -> ModelPublishing:
    """What the end of the run of ``plan`` does with its models (a sweep's job registers
    none)."""
    in_sweep = parent_run_id is not None
    return ModelPublishing.of(plan.settings.tracking, plan.config_hash, in_sweep=in_sweep)


class Delivery:
    """The rest of a run's record: metrics past the relay's offset, the outputs, the status.

    ``open_run`` creates the run (and logs its params) if that has not happened yet;
    each attempt repeats only what has not reached the store.
    """

    def __init__(
        self,
        tracker: Tracker,
        run_dir: Path,
        relay: MetricsRelay,
        status: RunStatus,
        stalled: str | None = None,
        prefix: str | None = None,
        open_run: Callable[[], None] = lambda: None,
        outputs_logged: bool = False,
        models: ModelPublishing | None = None,  # a FINISHED run's models (None: not logged)
        disk: str | None = None,  # a full disk under the run directory (failure.disk)
    ) -> None:
        self.tracker, self.run_dir, self.relay = tracker, run_dir, relay
        self.status, self.stalled, self.prefix = status, stalled, prefix
        self.open_run, self.outputs_logged = open_run, outputs_logged
        self.models, self.disk = models, disk

    def attempt(self) -> None:
        """Deliver what is left and set the status; raises the first failure."""
        self.open_run()
        try:
            self.relay.drain()
            if not self.outputs_logged:
                record_outputs(
                    self.tracker, self.run_dir, self.status, self.prefix, self.stalled, self.disk
                )
                if self.models is not None:
                    self.models.record(self.tracker, self.run_dir, self.status)
                self.outputs_logged = True
        except Exception as err:
            if not is_outage(err, self.tracker.store):  # a bad output: the status all the same
                self.tracker.finish(self.status)
            raise
        self.tracker.finish(self.status)

    def within(self, grace_s: float) -> BaseException | None:
        """Attempt until everything is delivered (None) or ``grace_s`` has passed (the
        outage's last error). Other errors are raised; Ctrl-C stops waiting."""
        deadline = time.monotonic() + max(0.0, grace_s)
        while True:
            try:
                self.attempt()
                return None
            except Exception as err:
                if not is_outage(err, self.tracker.store):
                    raise
                last = err
            left = deadline - time.monotonic()
            if left <= 0:
                return last
            try:
                time.sleep(min(RETRY_EVERY_S, left))
            except KeyboardInterrupt:
                return last


def deliver_or_leave_pending(
    delivery: Delivery, grace_s: float, pending: Callable[[], Pending]
) -> Pending | None:
    """Deliver the rest within ``grace_s`` (None: all delivered); else save in the run
    directory what is still missing, the record ``pending()`` describes with the
    delivery's progress, for ``tntrun sync``, and return it."""
    error = delivery.within(grace_s)
    if error is None:
        return None
    left = pending()
    left.metrics_offset, left.outputs_logged = delivery.relay.offset, delivery.outputs_logged
    left.reason = describe(error)
    left.save(delivery.run_dir)
    return left
