"""The one error type of bad input: config values that cannot make a valid run."""

from __future__ import annotations

import sys
from collections.abc import Sequence


class PlanError(ValueError):
    """One or more config values that cannot make a valid plan, one line each.

    Each line names the key and the fix; the driver prints them as
    ``tntrun: config error: ...`` and exits 2 before any rank starts.
    """

    def __init__(self, problems: str | list[str]) -> None:
        self.problems = [problems] if isinstance(problems, str) else list(problems)
        super().__init__("\n".join(self.problems))


def print_problems(problems: Sequence[str]) -> None:
    """The driver's form of bad input: one ``tntrun: config error: ...`` line each, on
    stderr whatever logging is set up (they come before any job's log exists, from a
    sweep's callbacks too)."""
    for problem in problems:
        print(f"tntrun: config error: {problem}", file=sys.stderr, flush=True)
