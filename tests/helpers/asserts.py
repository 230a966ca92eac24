"""How a test checks a finished command's exit code: one failure message for every command
(what ran, its exit code, the end of its stdout and stderr), so a red test shows why."""

from __future__ import annotations

import shlex
import subprocess

TAIL = 3000  # characters of each stream shown: the end is where a command says what failed


def _tail(stream: str | bytes | None) -> str:
    if stream is None:
        return "(not captured)"
    text = stream.decode(errors="replace") if isinstance(stream, bytes) else stream
    return text[-TAIL:]


def exit_report(result: subprocess.CompletedProcess) -> str:
    """The command, its exit code and the tails of its stdout and stderr."""
    args = result.args
    command = args if isinstance(args, str) else shlex.join(str(a) for a in args)
    return (
        f"{command[:500]}\nexited {result.returncode}\n"
        f"--- stdout (end)\n{_tail(result.stdout)}\n--- stderr (end)\n{_tail(result.stderr)}"
    )


def assert_exit(result: subprocess.CompletedProcess, code: int) -> None:
    """``result`` exited with ``code``; else fail with :func:`exit_report`."""
    assert result.returncode == code, f"expected exit {code}: {exit_report(result)}"


def assert_succeeded(result: subprocess.CompletedProcess) -> None:
    """``result`` exited 0; else fail with :func:`exit_report`."""
    assert_exit(result, 0)
