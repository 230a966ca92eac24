"""Tracking side: where a run's params, metrics, status and outputs go.

The tracker is chosen by ``tracking._target_`` (tntrun's MLflow tracker by
default) and only the driver uses it: the ranks write metrics into the run
directory and the driver relays them. A tracker must end every run it opened
(FINISHED, FAILED or KILLED), so no store keeps a run RUNNING after tntrun exits.

A tracker implements :class:`Tracker`, the core every run needs; what only some
stores can do (a browser UI, dataset inputs, lost-run clean-up, a sweep's child
runs) is a capability of its own, checked with ``isinstance``.
Outside ``tracking/mlflow*`` runs are :class:`RunSummary` values, never a store's objects.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from tntrun.config.schema import TRACKING_KEYS, TrackingConfig
from tntrun.config.settings import Settings, tracking_settings
from tntrun.contract.metrics import MetricPoint
from tntrun.contract.run_status import RunStatus

if TYPE_CHECKING:
    from tntrun.tracking.logged_model import LocalModel
    from tntrun.tracking.runs_table import DatasetRecord


@dataclass(frozen=True)
class RunSummary:
    """A tracked run as tntrun reads it back: who it is, how it ended, what it recorded."""

    run_id: str
    name: str | None = None
    status: RunStatus = RunStatus.RUNNING  # RUNNING, FINISHED, FAILED or KILLED
    params: Mapping[str, str] = field(default_factory=dict)
    metrics: Mapping[str, float] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)


class Tracker(Protocol):
    """One run in a store. Constructing it is cheap; the store is opened on first use."""

    label: str  # what to call it in messages ("MLflow")
    store: str  # where runs go, for messages (e.g. the tracking URI)
    run_id: str | None

    def problems(self) -> list[str]:
        """Why the store cannot be used, checked cheaply before any rank starts."""
        ...

    def start(
        self, run_name: str | None, tags: Mapping[str, str], parent_run_id: str | None = None
    ) -> str: ...

    def reopen(self, run_id: str) -> dict[str, str]:
        """Mark an existing run RUNNING again (a resumed run continues in it), without the
        tags that said how it ended (``driver_lost``, ``preempted``); the tags it had."""
        ...

    def attach(self, run_id: str) -> None:
        """Work on an existing run (raises LookupError when the store has none by that id)."""
        ...

    def unfinished_runs(self, tags: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """(run id, run directory) of the runs with ``tags`` that ended KILLED or FAILED,
        newest first (``resume=auto``, a requeued Slurm job)."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...
    def log_metrics(self, points: Sequence[MetricPoint]) -> None: ...
    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...
    def set_tag(self, key: str, value: str) -> None: ...

    def summary(self) -> RunSummary:
        """The run as the store holds it now (its final metrics, the tags it recorded)."""
        ...

    def finish(self, status: RunStatus) -> None:
        """End the run with FINISHED, FAILED or KILLED."""
        ...


@runtime_checkable
class Browsable(Protocol):
    """A store with a UI: the driver prints how to open it at the end of a run."""

    def ui_command(self) -> list[str]:
        """The command that shows the store in a browser ([] when the store is its own UI)."""
        ...

    def ui_url(self) -> str:
        """The run's page in the browser once ``ui_command()`` runs."""
        ...


@runtime_checkable
class DatasetLogging(Protocol):
    """A tracker that records the dataset a run trains on as a structured input."""

    def log_dataset(self, dataset: DatasetRecord) -> None:
        """Record the dataset the run trains on (name, source, digest, sizes)."""
        ...


@runtime_checkable
class LostRunCleanup(Protocol):
    """A store whose RUNNING runs can outlive a killed driver, and a way to end them."""

    def end_lost_runs(self) -> list[str]:
        """End the store's RUNNING runs whose driver is gone (KILLED, ``driver_lost``); their
        ids. Every tntrun command on a store does it."""
        ...


@runtime_checkable
class ModelRegistry(Protocol):
    """A store that keeps a run's trained models and registers them under a name
    (:mod:`tntrun.tracking.logged_model`)."""

    def log_model(self, model: LocalModel) -> str:
        """Log a model folder as a model of the run, with its tags and metrics; its id.
        The run's model of the same role, logged before, is reused, not doubled."""
        ...

    def run_model(self, run_id: str, role: str) -> str | None:
        """The id of a run's logged model of ``role`` (None: it has none)."""
        ...

    def register_model(
        self, model_id: str, name: str, alias: str | None, tags: Mapping[str, str]
    ) -> str:
        """Register a logged model as a new version of ``name`` (with ``alias`` and
        ``tags``); the version."""
        ...


@runtime_checkable
class NestedRuns(Protocol):
    """A store that nests runs: a sweep's parent run and a child run per job."""

    def children(self) -> list[RunSummary]:
        """The runs nested under this one."""
        ...


def children_of(tracker: Tracker) -> list[RunSummary]:
    """The runs nested under the tracker's run (a sweep's jobs); only a :class:`NestedRuns`
    tracker can tell."""
    if not isinstance(tracker, NestedRuns):
        raise TypeError(f"{type(tracker).__name__} cannot list a sweep's child runs")
    return tracker.children()


@dataclass(frozen=True)
class TrackerSettings:
    """What a tracker is made from, the same from a run and from a sweep: the typed
    ``tracking`` section, where outputs go (the default store's folder) and the keys only
    another tracker than MLflow's takes (``+tracking.<key>``)."""

    tracking: TrackingConfig
    output_root: Path
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, settings: Settings) -> TrackerSettings:
        """A run's: its settings already typed the section, so nothing is serialised."""
        return cls(settings.tracking, Path(settings.output_root), settings.tracker_options)

    @classmethod
    def of_section(cls, tracking: Mapping[str, Any], output_root: str | Path) -> TrackerSettings:
        """A composed ``tracking`` section not yet typed (a sweep's, before any job)."""
        plain = dict(tracking)
        options = {key: value for key, value in plain.items() if key not in TRACKING_KEYS}
        return cls(tracking_settings(plain), Path(output_root), options)

    @classmethod
    def at(cls, uri: str | None, output_root: str | Path = "outputs") -> TrackerSettings:
        """The default tracker on the store at ``uri`` (a command that names only the store)."""
        return cls(TrackingConfig(uri=uri), Path(output_root))


def tracker_for(settings: TrackerSettings) -> Tracker:
    """The tracker named by ``tracking._target_``, made from ``settings``."""
    from tntrun.errors import PlanError
    from tntrun.registry import find_class

    target = settings.tracking._target_
    cls = find_class(target, {})
    if cls is None:
        raise PlanError(
            f"tracking._target_={target}: no such class; use "
            "tntrun.tracking.mlflow_tracker.MlflowTracker or your own Tracker class"
        )
    return cls(settings)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted ``key.sub`` pairs of a nested mapping (lists stay values)."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        else:
            yield name, value
