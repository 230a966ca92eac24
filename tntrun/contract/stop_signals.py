"""Signal names in the config (``faults.preempt_signals``), checked and resolved."""

from __future__ import annotations

import signal


def signal_number(name: str) -> signal.Signals:
    """``SIGUSR1``, ``USR1`` or ``10`` as a signal; ValueError names the choices."""
    text = str(name).strip().upper()
    try:
        if text.isdigit():
            return signal.Signals(int(text))
        return signal.Signals[text if text.startswith("SIG") else f"SIG{text}"]
    except (KeyError, ValueError):
        raise ValueError(f"no such signal {name!r}: use e.g. SIGTERM, SIGUSR1") from None
