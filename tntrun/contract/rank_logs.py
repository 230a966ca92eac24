"""Per-rank logs from horovodrun's combined output, and what a failed rank said.

horovodrun prefixes every line a rank prints with ``[<rank>]<stdout>:`` or
``[<rank>]<stderr>:`` (srun and the MPIs with their own labels, :data:`RANK_LINE`);
lines without a prefix are the launcher's own.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from tntrun.contract.run_files import RANK_DONE

# horovodrun: "[3]<stdout>:text"; Open MPI's --tag-output: "[1,3]<stdout>:text" (job, rank);
# MPICH's -prepend-rank: "[3] text"; srun --label: "3: text".
RANK_LINE = re.compile(
    r"^(?:\[(?:\d+,)?(\d+)\](?:<(?:stdout|stderr)>:| )|\s*(\d+): )(.*)$", re.DOTALL
)
# Open MPI labels every chunk it reads, so a long line may carry its label again inside.
CHUNK_LABEL = re.compile(r"\[\d+,\d+\]<(?:stdout|stderr)>:")
# The rank that ended first, as the launcher names it: horovodrun, then Open MPI.
FIRST_FAILED = re.compile(
    r"first process to do so was:\s*Process name:\s*(\d+)|noticed that process rank (\d+)",
    re.MULTILINE,
)
LAUNCHER = "launcher"
# What the other ranks' collectives raise once one rank failed: a consequence, not the cause.
HOROVOD_SHUT_DOWN = "Horovod has been shut down"
# What Horovod's background loop logs when another rank's connection is gone.
PEER_LOST = "Horovod background loop uncaught exception"
# The line that ends a whole traceback: "ValueError: ...", "KeyboardInterrupt" (at column 0).
EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(?::|$)", re.MULTILINE)
TAIL_LINES = 8
REASON_CHARS = 300  # a reason stays one readable line


class RankLogWriter:
    """Splits combined output into ``<dir>/rank.<N>.log`` files and ``launcher.log``."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._files: dict[str, TextIO] = {}
        self._file(LAUNCHER)  # there even when the launcher says nothing of its own

    def _file(self, name: str) -> TextIO:
        if name not in self._files:
            # Line-buffered: a full disk fails the write, not a flush at the end.
            self._files[name] = (self.directory / f"{name}.log").open("a", buffering=1)
        return self._files[name]

    def write(self, line: str) -> None:
        match = RANK_LINE.match(line)
        if match:
            text = CHUNK_LABEL.sub("", match.group(3))
            self._file(f"rank.{match.group(1) or match.group(2)}").write(text)
        else:
            self._file(LAUNCHER).write(line)

    def close(self) -> None:
        for handle in self._files.values():
            with contextlib.suppress(OSError):  # a full disk: its lines are lost, not the run
                handle.close()


@dataclass(frozen=True)
class RankFailure:
    rank: int
    traceback: str

    @property
    def reason(self) -> str:
        """One line: the rank and its exception line (or its report's first line)."""
        _, _, frames = self.traceback.partition("\n")
        found = list(EXCEPTION_LINE.finditer(frames)) if self.traceback.startswith("Trace") else []
        line = frames[found[-1].start() :] if found else self.traceback
        line = line.split("\n", 1)[0].removesuffix("; last output:").strip()
        return (line if line.startswith("rank ") else f"rank {self.rank}: {line}")[:REASON_CHARS]

    @property
    def last_lines(self) -> str:
        lines = [line for line in self.traceback.splitlines() if line.strip()]
        return "\n".join(lines[-TAIL_LINES:])


def find_failure(directory: Path) -> RankFailure | None:
    """The rank that caused a failed job, with its traceback (or last output).

    Ranks fail in a cascade: when one raises or dies, Horovod shuts down and the
    others' collectives raise "Horovod has been shut down". horovodrun names
    whichever rank exited first, which may be one of those. So the cause is, in
    horovodrun's order, then by rank: a rank with a whole traceback of its own; else
    a rank that ended with no traceback (killed by a signal), its last output
    standing in; else the first rank with any traceback. A traceback cut off before
    its exception line is a rank that the launcher killed while it reported a peer's
    loss (on another host, horovodrun's end of the ssh session kills it).
    """
    launcher = directory / f"{LAUNCHER}.log"
    launcher_text = launcher.read_text() if launcher.exists() else ""
    logs = {
        int(log.stem.split(".")[1]): log.read_text(errors="replace")
        for log in directory.glob("rank.*.log")
    }
    named = FIRST_FAILED.search(launcher_text)  # MPICH's Hydra names no rank
    first = int(named.group(1) or named.group(2)) if named else None
    # Then ranks whose log shows the failure of another (Horovod's lost connection) last.
    order = sorted(logs, key=lambda rank: (rank != first, after_another(logs[rank]), rank))
    tracebacks = {rank: last_traceback(logs[rank]) for rank in order}
    for rank in order:
        found = tracebacks[rank]
        if found and HOROVOD_SHUT_DOWN not in found and is_whole(found):
            return RankFailure(rank, found)
    for rank in order:
        if tracebacks[rank] is None and RANK_DONE not in logs[rank]:
            exit_code = re.search(r"Exit code:\s*(-?\d+)", launcher_text)
            code = f" (exit code {exit_code.group(1)})" if exit_code and rank == first else ""
            tail = "\n".join(logs[rank].splitlines()[-50:]) or "(no output)"
            return RankFailure(
                rank, f"rank {rank} ended without a traceback{code}; last output:\n{tail}"
            )
    return next((RankFailure(r, tracebacks[r]) for r in order if tracebacks[r]), None)


def after_another(log: str) -> bool:
    """Whether a rank's log shows that another rank failed first."""
    return HOROVOD_SHUT_DOWN in log or PEER_LOST in log


def is_whole(traceback: str) -> bool:
    """Whether ``traceback`` reaches its exception line (was not cut off)."""
    _, _, frames = traceback.partition("\n")
    return EXCEPTION_LINE.search(frames) is not None


def last_traceback(text: str) -> str | None:
    """The last Python traceback in a log, to its end; None without one."""
    start = text.rfind("Traceback (most recent call last)")
    return text[start:] if start >= 0 else None
