"""The tracked run of one launch: opened while the ranks start, fed, and always ended.

The :class:`Recorder` opens the run (or reopens a resumed one) in the tracking
thread while the ranks import TensorFlow, relays rank 0's metrics into it, records
restarts, and at the end delivers the outputs and the final status, through an
outage of the store if need be (then ``tntrun sync`` completes it). It hears of the
ranks through the supervisor's events (``ranks_started``, ``restarting``,
``restarted``, ``ranks_ended``, ``refused``) and knows nothing of how they run.

The tracking thread, the relay's thread and the main thread all touch its state
(the restart count, whether opening waits for the store), so that state lives under
one lock. The plan is the supervisor's (a restart or an elastic resize re-plans): the
recorder reads the current one from it.
"""

from __future__ import annotations

import logging
import shlex
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tntrun.contract import run_files
from tntrun.contract.disk import disk_errno
from tntrun.contract.metrics import MetricPoint, last_values
from tntrun.contract.run_status import RunStatus
from tntrun.datasets.base import DatasetInfo
from tntrun.planning.plan import Plan
from tntrun.planning.resume import ResumedRun
from tntrun.planning.schedule_chart import write_schedule_chart
from tntrun.tracking import Browsable, Tracker
from tntrun.tracking.delivery import Delivery, deliver_or_leave_pending, run_models
from tntrun.tracking.metrics_stream import MetricsRelay
from tntrun.tracking.opening import (
    RunOrigin,
    log_run_params,
    new_run_tags,
    resume_tags,
    run_name,
    user_tags,
)
from tntrun.tracking.outage import Pending, describe, failing, is_outage, sync_line, working_again
from tntrun.tracking.run_advice import advice_lines
from tntrun.tracking.run_record import failure_reason, start_layout_tags
from tntrun.tracking.session import TrackingSession

log = logging.getLogger(__name__)

SHOWN_METRICS = ("val_accuracy", "val_loss", "bleu", "bleu_uncased")


@dataclass(frozen=True)
class Recorded:
    """What the store holds of a run once it ended."""

    run_id: str | None
    metrics: Mapping[str, float] = field(default_factory=dict)
    tracked: bool = True  # False: never opened, or left to the tracking thread (Ctrl-C twice)
    pending: bool = False  # the store was unreachable: `tntrun sync` delivers the rest
    batch_advice: tuple[str, ...] = ()  # what the gradient noise scale says (FINISHED runs)


class Recorder:
    """One launch's tracked run (see the module doc)."""

    def __init__(
        self,
        tracker: Tracker,
        current_plan: Callable[[], Plan],
        recorded_config: Mapping[str, Any],
        run_dir: Path,
        origin: RunOrigin,
        resumed: ResumedRun | None = None,
        dataset: DatasetInfo | None = None,
    ) -> None:
        self.tracker, self.run_dir, self.origin = tracker, run_dir, origin
        self.recorded_config = recorded_config  # config.yaml's values: the run's params
        self.resumed = resumed
        self.dataset = dataset  # the sizes planned with, recorded with the run
        self.current_plan = current_plan  # the supervisor's: a restart or a resize re-plans
        self._lock = threading.RLock()  # guards everything below
        self._restarts = 0  # the run's restarts so far (failures, preemptions, resumptions)
        self._deferred = False  # the store was unreachable when the run was to be opened
        self._session: TrackingSession | None = None
        self._relay: MetricsRelay | None = None  # rank 0's metrics into the run
        self._pending: Pending | None = None  # what the store has not received at the end
        self._failure: str | None = None  # a failed run's reason, one line for the console

    @property
    def prefix(self) -> str | None:
        """The artifact folder of a resumed run's new outputs (its first ones stay apart)."""
        return f"resumed-{self.run_dir.name}" if self.resumed else None

    # The supervisor's events.

    def refused(self, problems: Sequence[str]) -> None:
        """The launcher's pre-flight refused the run: a FAILED run that says why."""
        self.open()
        self.tracker.set_tag("failure.preflight", "\n".join(problems)[:5000])

    def ranks_started(self, stop_ranks: Callable[[], None]) -> None:
        """The ranks import TensorFlow: open the run meanwhile, in a lower-priority thread
        (``stop_ranks`` if that fails)."""
        self._session = TrackingSession(self._open_tracked, self._relaying, stop_ranks)

    def restarting(self) -> int:
        """The number of the restart about to happen, counted over the run's whole life."""
        with self._lock:
            self._restarts += 1
            return self._restarts

    def restarted(self, number: int, detail: str, plan: Plan) -> None:
        """The ranks restarted from a checkpoint with ``plan``: tag why and from where."""
        with self._lock:
            if not self.tracker.run_id:
                return
            tags = {"restarts": str(self._restarts), f"restart.{number}": detail}
            tags |= start_layout_tags(plan)  # an elastic resize's
            try:
                for key, value in tags.items():
                    self.tracker.set_tag(key, value)
            except Exception as err:  # the ranks go on all the same
                store = self.tracker.store
                if not is_outage(err, store):
                    raise
                log.warning(
                    f"tntrun: the tracking store {store} {failing(store)} ({describe(err)}): "
                    f"restart {number} is not tagged"
                )

    def ranks_ended(self) -> None:
        """Let the relay send what is left; re-raises a failure to open the run."""
        if self._session is not None:
            self._session.close()

    # Opening the run.

    def open(self) -> None:
        """Create the tracked run (or reopen the resumed one) and log its params."""
        tracker, run_dir, plan = self.tracker, self.run_dir, self.current_plan()
        with self._lock:
            if tracker.run_id:  # created before the store went away: the rest again
                run_id = tracker.run_id
            elif self.resumed:
                run_id = self.resumed.run_id
                recorded = tracker.reopen(run_id)
                self._restarts = int(recorded.get("restarts", 0)) + 1
                tags = resume_tags(
                    self.resumed, plan, run_dir, self.origin, recorded, self._restarts
                ) | user_tags(plan.settings.tracking)
                tags["config_hash"] = plan.config_hash  # a run older than the hash's keys
                for key, value in tags.items():
                    tracker.set_tag(key, value)
            else:
                tags = new_run_tags(plan, run_dir, self.origin)
                name = run_name(plan, self.origin)
                run_id = tracker.start(name, tags, self.origin.parent_run_id)
            (run_dir / run_files.RUN_ID).write_text(run_id)
            if not self.resumed:
                config = self.recorded_config
                log_run_params(tracker, config, plan, self.origin, self.dataset)
        log.info(f"tntrun: {tracker.label} run {run_id} in {tracker.store}")

    def _open_tracked(self) -> tuple[Tracker, str | None]:
        """:meth:`open`; if the store went away since the pre-flight check, training goes
        on and the run is opened once the store answers (by the relay or at the end)."""
        try:
            self.open()
        except Exception as err:
            if not is_outage(err, self.tracker.store):
                raise
            with self._lock:
                self._deferred = True
            log.warning(
                f"tntrun: the tracking store {self.tracker.store} {failing(self.tracker.store)} "
                f"({describe(err)}); training goes on and the run is recorded once it works"
            )
        return self.tracker, self.prefix

    def _open_deferred(self) -> None:
        """Open the run now if the store was unreachable when it was to be opened."""
        with self._lock:
            if self._deferred:
                self.open()
                self._deferred = False

    # While the ranks run.

    def _send_metrics(self, points: list[MetricPoint]) -> None:
        self._open_deferred()
        self.tracker.log_metrics(points)

    def _metrics_relay(self) -> MetricsRelay:
        """The relay of rank 0's metrics; while the store is down they wait in the file."""
        store, path = self.tracker.store, self.run_dir / run_files.METRICS

        def down(err: BaseException) -> None:
            with self._lock:
                if self._deferred:  # _open_tracked said so already
                    return
            log.warning(
                f"tntrun: the tracking store {store} {failing(store)} ({describe(err)}); "
                f"training goes on and rank 0's metrics wait in {path} (the hosts' system "
                f"metrics in {path.parent / run_files.SYSTEM_METRICS})"
            )

        def back(lines: int) -> None:
            log.warning(
                f"tntrun: the tracking store {store} {working_again(store)}; {lines} metric lines "
                "caught up"
            )

        relay = self._run_relay(on_failure=down, on_recovery=back)
        with self._lock:
            self._relay = relay
        return relay

    def _run_relay(
        self,
        on_failure: Callable[[BaseException], None] | None = None,
        on_recovery: Callable[[int], None] | None = None,
    ) -> MetricsRelay:
        """Rank 0's metrics and each host's system metrics (sampled beside the ranks),
        named per node on a multi-node run."""
        per_node = self.current_plan().nodes > 1
        return MetricsRelay.of_run(
            self.run_dir,
            self._send_metrics,
            self._run_id,
            per_node,
            on_failure=on_failure,
            on_recovery=on_recovery,
        )

    def _run_id(self) -> str | None:
        return self.tracker.run_id

    @contextmanager
    def _relaying(self, tracker: Tracker) -> Iterator[None]:
        """While the ranks run: rank 0's metrics and each host's system metrics into the run."""
        with self._metrics_relay():
            yield

    # The end.

    def end(self, status: RunStatus, stalled: str | None, disk: str | None = None) -> None:
        """Attach the outputs and end the tracked run (never RUNNING while the store answers:
        :meth:`_settle`). A run left to the tracking thread is that thread's to end."""
        abandoned = self._session is not None and self._session.abandoned
        with self._lock:
            tracked = bool(self.tracker.run_id or self._deferred) and not abandoned
        plan = self.current_plan()
        if status == RunStatus.FAILED:
            self._failure = f"disk: {disk}" if disk else failure_reason(self.run_dir, stalled)
        if not tracked:
            return
        try:
            write_schedule_chart(plan, self.run_dir / run_files.LR_PLOT)  # after the run
        except OSError as err:
            if not (disk or disk_errno(err)):  # a full disk: the chart is the least of it
                raise
        finally:
            self._settle(status, stalled, disk)

    def _settle(self, status: RunStatus, stalled: str | None, disk: str | None = None) -> None:
        """Deliver the rest (metrics, outputs) and set the final status, retrying through an
        outage of the store for ``tracking.outage_grace_s``; then leave what is still pending
        in the run directory for ``tntrun sync``."""
        store, plan = self.tracker.store, self.current_plan()
        with self._lock:
            relay = self._relay or self._run_relay()
            waiting = relay.failure is not None or self._deferred
        delivery = Delivery(
            self.tracker,
            self.run_dir,
            relay,
            status,
            stalled,
            self.prefix,
            self._open_deferred,
            models=run_models(plan, self.origin.parent_run_id),
            disk=disk,
        )
        grace = plan.settings.tracking.outage_grace_s
        if waiting:
            log.warning(
                f"tntrun: waiting up to {grace:g} s (tracking.outage_grace_s) for "
                f"{store} to take the rest of the run"
            )
        pending = deliver_or_leave_pending(delivery, grace, lambda: self._left(status, stalled))
        with self._lock:
            self._pending = pending
        if pending is None and waiting:
            log.warning(
                f"tntrun: the tracking store {store} {working_again(store)}; metrics, "
                f"outputs and status {status} delivered"
            )

    def _left(self, status: RunStatus, stalled: str | None) -> Pending:
        """What the store has not received, as it stands now (the delivery adds its progress)."""
        tracker, plan = self.tracker, self.current_plan()
        with self._lock:
            return Pending(
                tracker.store,
                status,
                tracker.run_id,
                params_logged=not self._deferred,
                stalled=stalled,
                prefix=self.prefix,
                run_name=run_name(plan, self.origin),
                parent_run_id=self.origin.parent_run_id,
                tags=None if tracker.run_id else new_run_tags(plan, self.run_dir, self.origin),
            )

    def report(self, status: RunStatus) -> Recorded:
        """Print the run's outcome (its final metrics, where to see it) and return it."""
        abandoned = self._session is not None and self._session.abandoned
        with self._lock:
            pending = self._pending is not None
        if abandoned or (not self.tracker.run_id and not pending):
            return Recorded(self.tracker.run_id, tracked=False)
        outcome = f"{status}: {self._failure}" if self._failure else status
        advice = tuple(advice_lines(self.run_dir, status, self.current_plan()))
        return final_report(self.tracker, self.run_dir, outcome, pending, advice)


def final_report(
    tracker: Tracker, run_dir: Path, outcome: str, pending: bool, advice: tuple[str, ...] = ()
) -> Recorded:
    """Print a run's outcome (its status, and why it failed), final metrics, the batch
    ``advice`` and where to see it; ``pending``: the store was unreachable, the metrics come
    from the file and ``tntrun sync`` delivers the rest."""
    metrics = last_values(run_dir / run_files.METRICS) if pending else tracker.summary().metrics
    log.info("")
    log.info(f"tntrun: run {outcome}")
    for key in SHOWN_METRICS:
        if key in metrics:
            log.info(f"tntrun: final {key}: {metrics[key]:.4f}")
    for line in advice:
        log.info(f"tntrun: {line}")
    if tracker.run_id:
        log.info(f"tntrun: {tracker.label} run id: {tracker.run_id}")
    log.info(f"tntrun: run directory: {run_dir}")
    if pending:  # the training's outcome stands; its record waits for `tntrun sync`
        log.info(sync_line(tracker.store, run_dir))
    elif isinstance(tracker, Browsable):
        if command := tracker.ui_command():
            log.info(f"tntrun: open the {tracker.label} UI with: {shlex.join(command)}")
        log.info(f"tntrun: the run in it: {tracker.ui_url()}")
    return Recorded(tracker.run_id, metrics, pending=pending, batch_advice=advice)
