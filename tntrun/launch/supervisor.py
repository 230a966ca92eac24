"""The ranks' life on the driver: start, follow, restart, heartbeat, stop signals.

The :class:`Supervisor` starts the ranks through the plan's launcher, follows
them to their end, restarts them from the newest checkpoint after a failure
(``faults.max_restarts``), keeps the driver's heartbeat beating for them and turns
a stop signal into a checkpoint (:mod:`tntrun.launch.preemption`). It returns an
:class:`Outcome`, whose status is decided here alone (:func:`ended_status`), and owns the
current plan (:attr:`Supervisor.plan`: a restart or an elastic resize re-plans), which the
recorder and the driver read from it. What happens beside the ranks (the tracked run) hears of them
through :class:`RankEvents`; the supervisor knows nothing of tracking.
"""

from __future__ import annotations

import logging
import os
import shlex
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tntrun.contract import run_files
from tntrun.contract.checkpoint_integrity import newest_intact
from tntrun.contract.checkpoints import read_meta
from tntrun.contract.clock import process_start_time
from tntrun.contract.driver_alive import DriverHeartbeat
from tntrun.contract.rank_logs import RankLogWriter
from tntrun.contract.run_status import RunStatus
from tntrun.errors import PlanError
from tntrun.launch.attempt_logs import archive_attempt
from tntrun.launch.console_relay import ConsoleRelay
from tntrun.launch.discovery import Hosts
from tntrun.launch.elastic import ElasticHosts
from tntrun.launch.launcher import Launcher
from tntrun.launch.preemption import StopOnSignals
from tntrun.launch.rank_job import LaunchResult, RankJob, StallWatch
from tntrun.planning.plan import Plan
from tntrun.planning.rank_map import shows_every_rank
from tntrun.planning.resume import ResumePoint

log = logging.getLogger(__name__)

# A new plan from a checkpoint: the same layout, or (an elastic resize) on other hosts.
Replan = Callable[[ResumePoint, "Hosts | None"], Plan]

DRIVER_START = process_start_time()  # ranks report their first step relative to it


@dataclass(frozen=True)
class Outcome:
    """How the ranks ended."""

    status: RunStatus  # FINISHED, FAILED or KILLED (ended_status)
    stalled: str | None = None  # why the stall watchdog ended them
    refused: tuple[str, ...] = ()  # the launcher's pre-flight problems: no rank started
    stop_signal: signal.Signals | None = None  # the signal that asked them to checkpoint
    preempted: bool = False  # they stopped together on a stop request and checkpointed there
    ended_by: signal.Signals | None = None  # KILLED: the signal that ended the run
    disk: str | None = None  # FAILED: a full or failing disk under the run directory

    def __post_init__(self) -> None:
        # The status as a RunStatus even where a caller still passes its string.
        object.__setattr__(self, "status", RunStatus(self.status))

    @property
    def exit_code(self) -> int:
        """0 FINISHED, 1 FAILED, and as shells and schedulers expect for a run a signal
        ended: 128 + its number (130 Ctrl-C, 143 SIGTERM, after the preemption checkpoint)."""
        if self.status == RunStatus.FINISHED:
            return 0
        if self.status == RunStatus.KILLED:
            return 128 + int(self.ended_by or signal.SIGINT)
        return 1


class RankEvents(Protocol):
    """What the supervisor tells whoever records the run, as the ranks live."""

    def refused(self, problems: Sequence[str]) -> None: ...

    def ranks_started(self, stop_ranks: Callable[[], None]) -> None:
        """The ranks import TensorFlow now; ``stop_ranks`` stops them from any thread."""
        ...

    def restarting(self) -> int:
        """The number of the restart about to happen, counted over the run's whole life."""
        ...

    def restarted(self, number: int, detail: str, plan: Plan) -> None: ...

    def ranks_ended(self) -> None:
        """The ranks are gone for good (raising here ends the launch with the error)."""
        ...


class Supervisor:
    """The ranks of one launch (see the module doc)."""

    def __init__(self, plan: Plan, run_dir: Path, replan: Replan, launcher: Launcher) -> None:
        self.plan, self.run_dir = plan, run_dir  # the current plan: read it here
        self.replan = replan  # the plan to continue from a checkpoint with (raises PlanError)
        self.launcher = launcher  # the one that rendered the plan's command
        self.job: RankJob | None = None
        self.restarts = 0  # of the ranks after a failure in this launch (faults.max_restarts)
        self.elastic = ElasticHosts(plan, self.ask_ranks_to_stop) if plan.elastic_nodes else None
        self.too_few_hosts = False  # an elastic run below min_nodes for too long
        faults = plan.settings.faults
        self.stopping = StopOnSignals(
            run_dir,
            faults.preempt_signals,
            faults.preempt_grace_s,
            ranks_running=lambda: self.job is not None,
            stop_ranks=self.stop_ranks,
        )

    def run(self, events: RankEvents) -> Outcome:
        """Pre-flight, start and follow the ranks (restarting them as allowed); how they ended."""
        result: LaunchResult | None = None
        refused: tuple[str, ...] = ()
        interrupted = False
        try:
            with self.stopping.installed():
                try:
                    self.launcher.preflight(self.plan, self.run_dir)  # before any rank
                except PlanError as err:  # recorded on a FAILED run, reported as a config error
                    refused = tuple(err.problems)
                    events.refused(refused)
                else:
                    result = self.follow(events)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            if self.job is not None:
                self.job.stop()
        stopping, preempted = self.stopping, self.preempted()
        status = ended_status(result, interrupted, self.signalled(), preempted)
        stalled, disk = (result.stalled, result.disk) if result else (None, None)
        received = stopping.received
        ended_by = stopping.interrupted_by or received or stopping.after_training  # else Ctrl-C
        return Outcome(status, stalled, refused, received, preempted, ended_by, disk)

    def signalled(self) -> bool:
        """Whether a stop signal came while the ranks ran (before or after the last step)."""
        return bool(self.stopping.received or self.stopping.after_training)

    def preempted(self) -> bool:
        """Whether the ranks stopped together on a stop request and checkpointed there."""
        return (self.run_dir / run_files.PREEMPTED).is_file()

    def stop_ranks(self) -> None:
        """Stop the ranks from another thread; :meth:`follow` then returns."""
        if self.job is not None:
            self.job.terminate()

    def follow(self, events: RankEvents) -> LaunchResult:
        """Start the ranks, follow them until they end, restart them after a failure."""
        env = {  # the plan's own variables join at each attempt: a resize re-plans
            run_files.ENV_DRIVER_START: repr(DRIVER_START),
            run_files.ENV_USER_PATH: os.getcwd(),
            run_files.ENV_LIVE_PROGRESS: "1" if sys.stdout.isatty() else "0",
        }
        heartbeat = DriverHeartbeat(self.run_dir)  # the ranks end within seconds of ours
        heartbeat.start()
        try:
            outcome = self.attempt(env, lambda: events.ranks_started(self.stop_ranks))
            while self.restart_if_due(outcome, events):
                outcome = self.attempt(env)
            return outcome
        finally:
            heartbeat.stop()
            events.ranks_ended()

    def attempt(
        self, env: Mapping[str, str], started: Callable[[], None] = lambda: None
    ) -> LaunchResult:
        """Start the ranks once and follow them, with what their launcher serves beside them
        (srun's and mpirun's Gloo rendezvous: a fresh one each attempt, so no entry of a
        failed attempt meets the next one's ranks)."""
        watching = self.elastic.watching(self.plan.hosts) if self.elastic else nullcontext()
        with self.launcher.running(self.plan) as extra, watching:
            self.job = self.start_ranks({**dict(self.plan.launch_env), **env, **extra})
            started()
            return self.job.follow()

    def start_ranks(self, env: Mapping[str, str]) -> RankJob:
        log.debug("tntrun: launching the ranks: %s", shlex.join(self.plan.launch_command))
        every_rank = shows_every_rank(self.plan.world_size)
        if not every_rank:
            log.info(
                f"tntrun: the console shows rank 0's lines and the other ranks' errors; "
                f"every rank's lines: {self.run_dir / run_files.LOGS}/rank.<N>.log"
            )
        return RankJob(
            self.plan.launch_command,
            env,
            self.run_dir / run_files.RANKS_LOG,
            RankLogWriter(self.run_dir / run_files.LOGS),
            StallWatch(
                self.run_dir / run_files.HEARTBEATS,
                self.plan.world_size,
                self.plan.settings.faults.stall_timeout_s,
            ),
            ConsoleRelay(every_rank=every_rank),
        )

    def restart_if_due(self, outcome: LaunchResult, events: RankEvents) -> bool:
        """After an attempt, restart the ranks where it is due (whether they restarted): an
        elastic run goes on with the hosts it has now; after a failed attempt, re-plan from
        the newest checkpoint (faults.max_restarts)."""
        if self.signalled():
            return False
        if self.elastic is not None and self.elastic.growing and self.preempted():
            self.clear_stop_marks()  # stopped for the hosts that came, not preempted
            return self.restart(outcome, events, self.elastic.growing)
        hosts = self.hosts_after_failure(outcome)
        if hosts is not None:
            return self.restart(outcome, events, hosts)
        limit = self.plan.settings.faults.max_restarts
        if not outcome.failed or self.restarts >= limit or self.too_few_hosts:
            return False
        if outcome.disk:  # a restart would meet the same full disk
            log.warning(f"tntrun: not restarting the ranks: {outcome.disk}")
            return False
        return self.restart(outcome, events)

    def clear_stop_marks(self) -> None:
        for name in (run_files.PREEMPTED, run_files.STOP_REQUEST):
            (self.run_dir / name).unlink(missing_ok=True)

    def hosts_after_failure(self, outcome: LaunchResult) -> Hosts | None:
        """The hosts an elastic run goes on with after a failed attempt (None: the same
        ones, not elastic, or too few: :attr:`too_few_hosts`)."""
        if self.elastic is None or not outcome.failed:
            return None
        hosts = self.elastic.after_failure(self.plan.hosts)
        self.too_few_hosts = hosts is None
        return hosts if hosts and set(hosts) != set(self.plan.hosts) else None

    def ask_ranks_to_stop(self, why: str) -> None:
        """Ask the ranks to stop together at the next step and checkpoint there."""
        (self.run_dir / run_files.STOP_REQUEST).write_text(why)
        log.info(f"tntrun: {why}: the ranks stop at the next step, checkpoint it and go on")

    def restart(self, outcome: LaunchResult, events: RankEvents, hosts: Hosts | None = None):
        """Re-plan from the newest checkpoint (on ``hosts``: an elastic resize, else the same
        layout: a restart) and go on in the same run; False when that cannot be planned."""
        checkpoint, damaged = newest_intact(self.run_dir)
        for line in damaged:
            log.warning(f"tntrun: {line}")
        try:
            if checkpoint is None:
                raise PlanError("the run wrote no intact checkpoint to restart from")
            point = ResumePoint(str(checkpoint), read_meta(checkpoint), hosts is not None)
            plan = self.replan(point, hosts)
        except PlanError as err:
            log.warning(f"tntrun: not restarting the ranks: {'; '.join(err.problems)}")
            return False
        number = events.restarting()
        why = archive_attempt(self.run_dir, number, outcome.stalled)
        if hosts is None:
            self.restarts += 1
            limit = self.plan.settings.faults.max_restarts
            said = f"{why}; restart {self.restarts} of {limit} (faults.max_restarts)"
        else:
            why = said = resize_reason(self.plan, plan)
        self.plan = plan
        plan.save(self.run_dir / run_files.PLAN)
        (self.run_dir / run_files.TRAINED).unlink(missing_ok=True)  # training goes on again
        log.info(f"tntrun: {said} from {checkpoint.name}, in the same run")
        events.restarted(number, f"{why}; from {checkpoint.name}", plan)
        return True


def ended_status(
    result: LaunchResult | None, interrupted: bool, signalled: bool, preempted: bool
) -> RunStatus:
    """The run's status, decided here only. KILLED: Ctrl-C (``interrupted``, or the job's
    own ``result.interrupted``), the ranks checkpointed on a stop request (``preempted``), or
    a stop signal came (``signalled``) and they did not finish; FINISHED when they ended
    well; FAILED otherwise, and when the launcher refused to start them (``result`` None)."""
    if interrupted:
        return RunStatus.KILLED
    if result is None:
        return RunStatus.FAILED
    if preempted or result.interrupted:
        return RunStatus.KILLED
    if result.ended_well:
        return RunStatus.FINISHED
    return RunStatus.KILLED if signalled else RunStatus.FAILED


def resize_reason(before: Plan, after: Plan) -> str:
    """How an elastic run changed size, for the log and the run's tags."""
    old, new = {h for h, _ in before.hosts}, {h for h, _ in after.hosts}
    change = [f"{', '.join(sorted(old - new))} lost"] if old - new else []
    change += [f"{', '.join(sorted(new - old))} joined"] if new - old else []
    return (
        f"elastic: {before.nodes} -> {after.nodes} node(s), {before.world_size} -> "
        f"{after.world_size} ranks ({'; '.join(change)}), global batch "
        f"{after.global_batch_size} = {after.world_size} x {after.micro_batch_size}"
    )
