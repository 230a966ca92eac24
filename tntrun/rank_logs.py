"""Per-rank logs from horovodrun's combined output, and what a failed rank said.

horovodrun prefixes every line a rank prints with ``[<rank>]<stdout>:`` or
``[<rank>]<stderr>:``; lines without a prefix are the launcher's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

# horovodrun: "[3]<stdout>:text"; srun --label: "3: text".
RANK_LINE = re.compile(r"^(?:\[(\d+)\]<(?:stdout|stderr)>:|\s*(\d+): )(.*)$", re.DOTALL)
FIRST_FAILED = re.compile(r"first process to do so was:\s*Process name:\s*(\d+)", re.MULTILINE)
LAUNCHER = "launcher"
TAIL_LINES = 8


class RankLogWriter:
    """Splits combined output into ``<dir>/rank.<N>.log`` files and ``launcher.log``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, TextIO] = {}

    def _file(self, name: str) -> TextIO:
        if name not in self._files:
            self._files[name] = (self.directory / f"{name}.log").open("a")
        return self._files[name]

    def write(self, line: str) -> None:
        match = RANK_LINE.match(line)
        if match:
            self._file(f"rank.{match.group(1) or match.group(2)}").write(match.group(3))
        else:
            self._file(LAUNCHER).write(line)

    def close(self) -> None:
        for handle in self._files.values():
            handle.close()


@dataclass(frozen=True)
class RankFailure:
    rank: int
    traceback: str

    @property
    def last_lines(self) -> str:
        lines = [line for line in self.traceback.splitlines() if line.strip()]
        return "\n".join(lines[-TAIL_LINES:])


def find_failure(directory: Path) -> RankFailure | None:
    """The rank that failed first: the one horovodrun names, else the first with a traceback.

    A rank killed by a signal leaves no traceback; its last output stands in.
    """
    launcher = directory / f"{LAUNCHER}.log"
    launcher_text = launcher.read_text() if launcher.exists() else ""
    named = FIRST_FAILED.search(launcher_text)
    if named:
        rank = int(named.group(1))
        log = directory / f"rank.{rank}.log"
        text = log.read_text(errors="replace") if log.exists() else ""
        if traceback := last_traceback(text):
            return RankFailure(rank, traceback)
        exit_code = re.search(r"Exit code:\s*(-?\d+)", launcher_text)
        tail = "\n".join(text.splitlines()[-50:]) or "(no output)"
        code = f" (exit code {exit_code.group(1)})" if exit_code else ""
        return RankFailure(
            rank, f"rank {rank} ended without a traceback{code}; last output:\n{tail}"
        )
    for log in sorted(directory.glob("rank.*.log"), key=lambda p: int(p.stem.split(".")[1])):
        if traceback := last_traceback(log.read_text(errors="replace")):
            return RankFailure(int(log.stem.split(".")[1]), traceback)
    return None


def last_traceback(text: str) -> str | None:
    """The last Python traceback in a log, to its end; None without one."""
    start = text.rfind("Traceback (most recent call last)")
    return text[start:] if start >= 0 else None
