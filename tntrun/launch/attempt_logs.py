"""A failed attempt's logs, archived before the ranks restart (``faults.max_restarts``).

The driver restarts the ranks from the run's newest checkpoint in the same run
directory and tracked run; each failed attempt's logs move to
``restarts/attempt-<N>/`` (logged with the run), with the failing rank's traceback.
"""

from __future__ import annotations

from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.rank_logs import find_failure


def archive_attempt(run_dir: Path, attempt: int, stalled: str | None) -> str:
    """Move the failed attempt's logs to ``restarts/attempt-<attempt>``; why it failed."""
    folder = run_dir / run_files.RESTARTS / f"attempt-{attempt}"
    folder.mkdir(parents=True, exist_ok=True)
    failure = find_failure(run_dir / run_files.LOGS)
    if failure is not None:
        (folder / run_files.traceback_file(failure.rank)).write_text(failure.traceback)
    for name in (run_files.LOGS, run_files.RANKS_LOG, run_files.HEARTBEATS):
        if (run_dir / name).exists():
            (run_dir / name).rename(folder / name)
    if stalled:
        return stalled
    if failure is None:
        return "the ranks failed"
    last = failure.last_lines.splitlines()[-1:] or ["no output"]
    return f"rank {failure.rank} failed: {last[0].strip()}"
