"""What a run is asked to do (:class:`Experiment`) and what became of it (:class:`RunResult`).

The CLI, the Python API and the driver share these; they import nothing that runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR
from tntrun.contract.run_status import RunStatus

if TYPE_CHECKING:
    from tntrun.planning.plan import Plan


@dataclass(frozen=True)
class Experiment:
    """A composed config and what it was composed from."""

    config: DictConfig
    overrides: tuple[str, ...] = ()
    choices: Mapping[str, str] = field(default_factory=dict)  # group -> option
    run_dir: Path | None = None
    parent_run_id: str | None = None  # the sweep's parent run
    job: int | None = None  # the job's number in a sweep


@dataclass(frozen=True)
class RunResult:
    """What became of a run."""

    status: RunStatus  # FINISHED, FAILED, KILLED; INVALID (config error) or PLANNED (dry run)
    exit_code: int
    run_dir: Path | None
    run_id: str | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)
    problems: tuple[str, ...] = ()  # the config errors of an INVALID run, one line each
    plan: Plan | None = None
    batch_advice: tuple[str, ...] = ()  # what the gradient noise scale says (FINISHED runs)

    def __post_init__(self) -> None:
        # The status as a RunStatus even where a caller still passes its string.
        object.__setattr__(self, "status", RunStatus(self.status))

    def objective(self, key: str) -> float:
        """The final value of metric ``key`` for a sweeper: NaN for a run that did not
        finish (the sweeper's failed trial); :class:`MissingObjective` for a finished run
        that logged no such metric (a misspelt ``tracking.objective`` would otherwise feed
        the sweeper NaN for every job)."""
        if self.status != RunStatus.FINISHED:
            return float("nan")
        if key not in self.metrics:
            raise MissingObjective(key, sorted(self.metrics))
        return float(self.metrics[key])


class MissingObjective(KeyError):
    """A finished run logged no metric named by ``tracking.objective``."""

    def __init__(self, key: str, logged: list[str]) -> None:
        super().__init__(key)
        self.key, self.logged = key, logged

    def __str__(self) -> str:
        return (
            f"tracking.objective={self.key}: the run logged no such metric; set it to one it "
            f"logs ({', '.join(self.logged) or 'none'})"
        )


def config_error(problems: list[str], run_dir: Path | None = None) -> RunResult:
    """An INVALID run: bad input, found before any rank started."""
    return RunResult(RunStatus.INVALID, EXIT_CONFIG_ERROR, run_dir, problems=tuple(problems))
