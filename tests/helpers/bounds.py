"""Time bounds of the tests that wait for a run to end, each derived from the timeouts that
govern the ending, plus one stated margin: never a bare constant.

The margin covers what no timeout bounds: process start-up and exit, MLflow's final
writes and thread wake-ups on a shared 2-core machine (measured endings stay well inside).
"""

from __future__ import annotations

from horovod.runner.common.util.safe_shell_exec import GRACEFUL_TERMINATION_TIME_S

from tntrun.contract.driver_alive import BEAT_S, LOST_AFTER_S

BUSY_MARGIN_S = 10.0

# A rank fails: horovodrun SIGTERMs the others and SIGKILLs them after its grace (5 s); a
# rank on another host ends by the driver's last beat, which it reads every half beat.
AFTER_RANK_FAILURE_S = GRACEFUL_TERMINATION_TIME_S + BEAT_S / 2 + BUSY_MARGIN_S

# Ctrl-C: the driver's last beat says stopped (ranks read it every half beat); horovodrun
# ends a rank that ignores SIGTERM after its grace.
AFTER_CTRL_C_S = BEAT_S / 2 + GRACEFUL_TERMINATION_TIME_S + BUSY_MARGIN_S

# The driver SIGKILLed: its beat stops (the last one up to a beat before the kill); the
# ranks end LOST_AFTER_S after it, noticed within half a beat.
AFTER_DRIVER_KILLED_S = BEAT_S + LOST_AFTER_S + BEAT_S / 2 + BUSY_MARGIN_S


def after_stall_s(stall_timeout_s: float) -> float:
    """A stalled rank: the watchdog fires ``stall_timeout_s`` after the last progress, then
    the ranks end as after a failure."""
    return stall_timeout_s + AFTER_RANK_FAILURE_S


def after_scancel_s(kill_wait_s: float) -> float:
    """``scancel``: Slurm SIGTERMs the job and SIGKILLs it after KillWait."""
    return kill_wait_s + BUSY_MARGIN_S
