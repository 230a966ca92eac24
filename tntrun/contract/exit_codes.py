"""The exit codes of tntrun's processes, each stated once (docs/running.md lists them).

The driver's (what ``tntrun`` exits with) and the ranks' (what the launcher sees) share
the config-error code: a rank whose hardware does not match the plan is refused as the
driver refuses bad input.
"""

from __future__ import annotations

# The driver: 0 FINISHED, 1 FAILED, 128 + N killed by signal N.
EXIT_CONFIG_ERROR = 2  # refused before any rank started (the ranks: hardware not as planned)
EXIT_TRACKING_PENDING = 3  # FINISHED, its record waiting for `tntrun sync`
EXIT_INTERRUPTED = 130  # Ctrl-C (SIGINT)

# A rank.
EXIT_NONFINITE = 3  # every rank stopped at a non-finite loss or training batch
EXIT_DRIVER_LOST = 75  # the driver stopped the run, or is gone (contract.driver_alive)
