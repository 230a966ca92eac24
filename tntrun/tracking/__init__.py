"""Tracking side: where a run's params, metrics, status and outputs go.

The tracker is chosen by ``tracking._target_`` (tntrun's MLflow tracker by
default) and only the driver uses it: the ranks write metrics into the run
directory and the driver relays them. A tracker must end every run it opened
(FINISHED, FAILED or KILLED), so no store keeps a run RUNNING after tntrun exits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tntrun.tracking.runs_table import DatasetRecord

# (key, value, timestamp in ms, step): one metric point
MetricPoint = tuple[str, float, int, int]


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

    def reopen(self, run_id: str, tags: Callable[[Mapping[str, str]], Mapping[str, str]]) -> str:
        """Mark an existing run RUNNING again (a resumed run continues in it), without the
        tags that said how it ended (``driver_lost``, ``preempted``), and set the tags that
        ``tags`` makes of the ones it had (after ending the store's lost runs)."""
        ...

    def end_lost_runs(self) -> list[str]:
        """End the store's RUNNING runs whose driver is gone (KILLED, ``driver_lost``); their
        ids. Every tntrun command on a store does it."""
        ...

    def unfinished_runs(self, tags: Mapping[str, str]) -> list[tuple[str, str | None]]:
        """(run id, run directory) of the runs with ``tags`` that ended KILLED or FAILED,
        newest first (``resume=auto``, a requeued Slurm job)."""
        ...

    def attach(self, run_id: str) -> None:
        """Work on an existing run (raises LookupError when the store has none by that id)."""
        ...

    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_dataset(self, dataset: DatasetRecord) -> None:
        """Record the dataset the run trains on (name, source, digest, sizes)."""
        ...

    def log_metrics(self, points: Sequence[MetricPoint]) -> None: ...
    def log_artifact(self, path: Path, artifact_path: str | None = None) -> None: ...
    def set_tag(self, key: str, value: str) -> None: ...
    def tags(self) -> dict[str, str]: ...
    def metrics(self) -> dict[str, float]: ...
    def children(self) -> list[Any]: ...

    def system_metrics(
        self, enabled: bool, interval_s: float, node_id: str | None
    ) -> AbstractContextManager[None]: ...

    def finish(self, status: str) -> None:
        """End the run with FINISHED, FAILED or KILLED."""
        ...

    def ui_command(self) -> list[str]:
        """The command that shows the store in a browser."""
        ...

    def ui_url(self) -> str:
        """The run's page in the browser once ``ui_command()`` runs."""
        ...


def tracker_for(settings: Mapping[str, Any], output_root: Path) -> Tracker:
    """The tracker named by ``tracking._target_``, given the whole ``tracking`` config."""
    from hydra.utils import get_class

    from tntrun.errors import PlanError

    target = str(settings.get("_target_") or "")
    try:
        cls = get_class(target)
    except Exception:
        raise PlanError(
            f"tracking._target_={target}: no such class; use "
            "tntrun.tracking.mlflow_tracker.MlflowTracker or your own Tracker class"
        ) from None
    return cls(settings, output_root)


def flatten(tree: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Dotted ``key.sub`` pairs of a nested mapping (lists stay values)."""
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from flatten(value, f"{name}.")
        else:
            yield name, value
