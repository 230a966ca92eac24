"""The ranks' output on the driver's console: every line as it comes (beyond
``FULL_VIEW_MAX_RANKS`` ranks, rank 0's lines and the other ranks' errors), and rank 0's
live progress line (``LIVE_PREFIX``) redrawn in place on a terminal.

A live line is only for the eyes: it is not written to any log, and the next ordinary line
first erases it, so a terminal shows the run's lines plus one line that moves. What the
console leaves out of a large run is in the per-rank logs, which keep every line.
"""

from __future__ import annotations

import re
import sys
from typing import TextIO

from tntrun.console import ERASE
from tntrun.contract.disk import DISK_MARK
from tntrun.contract.rank_logs import HOROVOD_SHUT_DOWN, PEER_LOST, RANK_LINE
from tntrun.contract.run_files import LIVE_PREFIX

# A line of a rank other than 0 that a large run's console shows: the exception ending a
# traceback, a logged error, a fatal signal, a disk error.
ERROR_LINE = re.compile(
    r"^(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b"
    r"|\b(?:ERROR|FATAL|CRITICAL)\b|Segmentation fault|core dumped|\bKilled\b|\bAborted\b"
    rf"|{re.escape(DISK_MARK)}"
)
# What the other ranks raise once one rank failed: a consequence, shown by rank 0 alone.
CONSEQUENCES = (HOROVOD_SHUT_DOWN, PEER_LOST)


def shown_of_many(line: str) -> bool:
    """Whether a large run's console shows ``line``: the launcher's own, rank 0's, and
    another rank's errors but the consequences of one rank's failure."""
    match = RANK_LINE.match(line)
    if match is None:
        return True
    if (match.group(1) or match.group(2)) == "0":
        return True
    text = match.group(3)
    return bool(ERROR_LINE.search(text)) and not any(c in text for c in CONSEQUENCES)


def live_text(line: str) -> str | None:
    """The text of a live progress line (with or without the launcher's rank label)."""
    match = RANK_LINE.match(line)
    text = match.group(3) if match else line
    if not text.startswith(LIVE_PREFIX):
        return None
    return text[len(LIVE_PREFIX) :].strip()


class ConsoleRelay:
    """Writes the job's lines to ``out``, drawing live lines in place; every rank's lines,
    or (``every_rank=False``) rank 0's and the others' errors."""

    def __init__(self, out: TextIO | None = None, every_rank: bool = True) -> None:
        self.out = out or sys.stdout
        self.every_rank = every_rank
        self._live_shown = False

    def live(self, text: str) -> None:
        width = 200  # a long line would wrap, and \r would then redraw only its last part
        self.out.write(f"{ERASE}{text[:width]}")
        self.out.flush()
        self._live_shown = True

    def line(self, line: str) -> None:
        if not (self.every_rank or shown_of_many(line)):
            return
        if self._live_shown:
            self.out.write(ERASE)
            self._live_shown = False
        self.out.write(line)
        self.out.flush()  # live through pipes (tee, a test, Slurm logs)

    def close(self) -> None:
        if self._live_shown:
            self.line("")
