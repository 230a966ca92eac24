"""The ranks' output on the driver's console: every line as it comes, and rank 0's live
progress line (``LIVE_PREFIX``) redrawn in place on a terminal.

A live line is only for the eyes: it is not written to any log, and the next ordinary line
first erases it, so a terminal shows the run's lines plus one line that moves.
"""

from __future__ import annotations

import sys
from typing import TextIO

from tntrun.console import ERASE
from tntrun.contract.rank_logs import RANK_LINE
from tntrun.contract.run_files import LIVE_PREFIX


def live_text(line: str) -> str | None:
    """The text of a live progress line (with or without the launcher's rank label)."""
    match = RANK_LINE.match(line)
    text = match.group(3) if match else line
    if not text.startswith(LIVE_PREFIX):
        return None
    return text[len(LIVE_PREFIX) :].strip()


class ConsoleRelay:
    """Writes the job's lines to ``out``, drawing live lines in place."""

    def __init__(self, out: TextIO | None = None) -> None:
        self.out = out or sys.stdout
        self._live_shown = False

    def live(self, text: str) -> None:
        width = 200  # a long line would wrap, and \r would then redraw only its last part
        self.out.write(f"{ERASE}{text[:width]}")
        self.out.flush()
        self._live_shown = True

    def line(self, line: str) -> None:
        if self._live_shown:
            self.out.write(ERASE)
            self._live_shown = False
        self.out.write(line)
        self.out.flush()  # live through pipes (tee, a test, Slurm logs)

    def close(self) -> None:
        if self._live_shown:
            self.line("")
