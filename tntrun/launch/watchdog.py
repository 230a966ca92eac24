"""The driver's stall watchdog: end a job whose ranks stopped making progress.

Horovod's own stall inspector does not fire under Gloo, so each rank records
its progress (``<step> <phase>``) in ``<run_dir>/heartbeats/rank.<N>`` and the
driver watches the files. When none has changed for ``timeout`` seconds the
job is stalled; the rank that got least far (the others wait for it inside
a collective) is named.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

PHASE_ORDER = {"end": 0, "eval": 0, "begin": 1}


def progress(directory: Path, world_size: int) -> dict[int, tuple[int, int] | None]:
    """Each rank's (step, phase rank) from its heartbeat, None before its first beat."""
    found: dict[int, tuple[int, int] | None] = {}
    for rank in range(world_size):
        try:
            step, phase = (directory / f"rank.{rank}").read_text().split()
            found[rank] = (int(step), PHASE_ORDER.get(phase, 0))
        except (OSError, ValueError):
            found[rank] = None
    return found


def describe_stall(directory: Path, world_size: int, idle: float) -> str:
    """One line naming the rank(s) that got least far."""
    state = progress(directory, world_size)
    key = {rank: (-1, -1) if p is None else p for rank, p in state.items()}
    least = min(key.values())
    behind = [rank for rank, k in key.items() if k == least]
    where = "before its first step" if least[0] < 0 else f"at step {least[0]}"
    if len(behind) == len(key):
        return (
            f"all {world_size} ranks stopped together {where} with no progress for "
            f"{idle:.0f} s: a collective or the input pipeline hangs on every rank"
        )
    names = ", ".join(map(str, behind))
    return (
        f"rank {names} stalled {where}: no progress for {idle:.0f} s while the other ranks "
        "wait for it"
    )


class StallWatchdog(threading.Thread):
    """Calls ``on_stall(message)`` once when no heartbeat changed for ``timeout`` seconds.

    Armed by the first heartbeat (start-up and model building are not watched).
    """

    def __init__(
        self,
        directory: Path,
        world_size: int,
        timeout: float,
        on_stall: Callable[[str], None],
        poll: float = 1.0,
    ) -> None:
        super().__init__(name="tntrun-stall-watchdog", daemon=True)
        self.directory, self.world_size, self.timeout = directory, world_size, timeout
        self.on_stall, self.poll = on_stall, poll
        self._stopped = threading.Event()

    def stop(self) -> None:
        self._stopped.set()

    def run(self) -> None:
        while not self._stopped.wait(self.poll):
            beats = list(self.directory.glob("rank.*"))
            if not beats:
                continue
            try:
                newest = max(p.stat().st_mtime for p in beats)
            except OSError:  # a heartbeat was being replaced
                continue
            idle = time.time() - newest
            if idle > self.timeout:
                self.on_stall(describe_stall(self.directory, self.world_size, idle))
                return
