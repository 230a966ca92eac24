"""The one error type of bad input: config values that cannot make a valid run."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tntrun.console import ensure_console

log = logging.getLogger(__name__)


class PlanError(ValueError):
    """One or more config values that cannot make a valid plan, one line each.

    Each line names the key and the fix; the driver prints them as
    ``tntrun: config error: ...`` and exits 2 before any rank starts.
    """

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def print_problems(problems: Sequence[str]) -> None:
    """The driver's form of bad input: one ``tntrun: config error: ...`` line each (on
    stderr; in Hydra's job log too when there is one)."""
    ensure_console()
    for problem in problems:
        log.error(f"tntrun: config error: {problem}")
