"""Where the suite's CPU goes: ``make test ARGS="-p tests.helpers.cpu_report"``.

Under ``pytest -n`` the cores are shared, so ``--durations`` measures a test together with
whatever ran beside it (the battery's in-process rows took 564 s of wall in the suite and
67 s alone). The CPU a test uses is its own: each worker adds up, per test (set-up, call
and teardown), its own CPU time and that of the processes it started and reaped (``tntrun``,
horovodrun, the local ranks), and the report ends with the tests and files that used most.
Not counted: processes reaped by someone else, such as ranks started over ssh on the
network-namespace hosts (their sshd reaps them) or a daemon a fixture leaves running.
"""

from __future__ import annotations

import resource
from collections import Counter
from collections.abc import Generator

import pytest

SHOWN = 30  # tests listed; files: every one with at least 1% of the total


def cpu_s() -> float:
    """CPU seconds of this process and its reaped descendants so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + reaped.ru_utime + reaped.ru_stime


_started: dict[str, float] = {}  # worker side: a test's CPU at its start
_used: Counter[str] = Counter()  # controller side: CPU seconds by test id


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem) -> Generator[None, object, object]:
    _started[item.nodeid] = cpu_s()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call) -> Generator[None, object, object]:
    report = yield
    if call.when == "teardown" and item.nodeid in _started:
        # An attribute of the report travels from an xdist worker to the controller.
        report.cpu_s = cpu_s() - _started.pop(item.nodeid)
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "teardown" and hasattr(report, "cpu_s"):
        _used[report.nodeid] += report.cpu_s


def pytest_terminal_summary(terminalreporter) -> None:
    if not _used:
        return
    total = sum(_used.values())
    write = terminalreporter.write_line
    terminalreporter.section(f"CPU used, {total:,.0f} s in {len(_used)} tests")
    by_file = Counter()
    for nodeid, seconds in _used.items():
        by_file[nodeid.split("::", 1)[0]] += seconds
    for path, seconds in by_file.most_common():
        if seconds < total / 100:
            break
        write(f"{seconds:8.1f} s {100 * seconds / total:5.1f}%  {path}")
    write("")
    for nodeid, seconds in _used.most_common(SHOWN):
        write(f"{seconds:8.1f} s  {nodeid}")
