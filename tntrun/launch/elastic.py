"""Elastic runs on the driver: which hosts the ranks go on with as hosts are lost or come.

The design: the supervisor re-plans and restarts the ranks at the new size from the
newest commit on disk (rank 0 commits every ``elastic.commit_every_steps`` steps,
:mod:`tntrun.engine.commits`). The users state the global batch, so the new plan has the
same global batch and LR schedule, another micro-batch and sharding.

- Shrinking: the ranks of a lost host end the attempt FAILED; the hosts discovery lists
  then (up to ``max_nodes``) go on, after waiting up to ``elastic.timeout_s`` while fewer
  than ``min_nodes`` are listed.
- Growing: while the ranks train, discovery is asked every
  ``elastic.discovery_interval_s``; a host it lists beyond the run's (up to
  ``max_nodes``) makes the driver ask the ranks to stop together at the next step and
  checkpoint there (the preemption path), and the run goes on with it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tntrun.errors import PlanError
from tntrun.launch.discovery import Hosts, available_hosts
from tntrun.planning.plan import Plan

log = logging.getLogger(__name__)


def names(hosts: Hosts) -> str:
    return ", ".join(host for host, _ in hosts) or "none"


class ElasticHosts:
    """An elastic run's hosts: what discovery lists, the wait below ``min_nodes``, and the
    hosts that came while the ranks train (``growing``)."""

    def __init__(self, plan: Plan, request_stop: Callable[[str], None]) -> None:
        assert plan.elastic_nodes is not None  # noqa: S101  # built for elastic plans only
        self.low, self.high = plan.elastic_nodes
        elastic = plan.settings.elastic
        self.command, self.timeout_s = elastic.discovery, elastic.timeout_s
        self.interval_s = elastic.discovery_interval_s
        self.own, self.per_node = plan.hosts, plan.ranks_per_node
        self.request_stop = request_stop
        self.growing: Hosts | None = None  # set once the ranks were asked to stop for them

    def available(self) -> Hosts:
        """What discovery lists now (nothing, with a warning, when it fails)."""
        try:
            return available_hosts(self.command, self.own, self.per_node)
        except PlanError as err:
            log.warning(f"tntrun: elastic: {'; '.join(err.problems)}")
            return ()

    def after_failure(self, current: Hosts) -> Hosts | None:
        """The hosts to go on with after the ranks failed (None: below ``min_nodes`` for
        longer than ``elastic.timeout_s``: the run ends)."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            hosts = self.available()
            if len(hosts) >= self.low:
                return hosts[: self.high]
            if time.monotonic() >= deadline:
                lost = tuple(h for h in current if h not in hosts)
                log.error(
                    f"tntrun: elastic: {len(hosts)} node(s) available ({names(hosts)}), "
                    f"fewer than elastic.min_nodes={self.low} for {self.timeout_s:g} s "
                    f"(elastic.timeout_s); hosts lost: {names(lost)}"
                )
                return None
            time.sleep(self.interval_s)

    @contextmanager
    def watching(self, current: Hosts) -> Iterator[None]:
        """While the block runs, ask discovery for hosts beyond ``current``; when one comes
        (up to ``max_nodes``), note the hosts to grow to and ask the ranks to stop."""
        self.growing = None
        done = threading.Event()
        watcher = threading.Thread(
            target=self._watch, args=(current, done), name="tntrun-elastic", daemon=True
        )
        if len(current) < self.high:
            watcher.start()
        try:
            yield
        finally:
            done.set()

    def _watch(self, current: Hosts, done: threading.Event) -> None:
        while not done.wait(self.interval_s):
            joining = tuple(h for h in self.available() if h not in current)
            if joining:
                self.growing = (*current, *joining)[: self.high]
                self.request_stop(f"elastic: {names(self.growing[len(current) :])} joins")
                return
