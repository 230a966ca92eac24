"""A test not marked ``slow`` that starts a process fails, telling to mark it, so ``make check``
stays in-process whatever a new test does (tests/helpers/process_guard.py, wired in by
tests/conftest.py's hooks). Each case runs in an inner pytest session, in this process."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

UNMARKED = """
import os
import subprocess
import threading

import pytest


def test_runs_a_command():
    subprocess.run(["true"])


def test_swallows_the_failure_in_a_thread():
    def start():
        try:
            subprocess.run(["true"])
        except BaseException:
            pass

    thread = threading.Thread(target=start)
    thread.start()
    thread.join()


def test_calls_os_system():
    os.system("true")


@pytest.fixture
def server():
    return subprocess.Popen(["sleep", "30"])


def test_with_a_fixture_that_starts_a_server(server):
    pass


def test_stays_in_process(tmp_path):
    (tmp_path / "x").write_text("in-process")


@pytest.mark.slow
def test_marked_slow_is_left_alone(request):
    refusal = getattr(subprocess.Popen._execute_child, "refuses_for", None)
    assert refusal != request.node.nodeid
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.RunResult:
    """The tests of UNMARKED run by pytest with tntrun's conftest as a plugin."""
    pytester.makepyfile(test_inner=UNMARKED)
    return pytester.runpytest_inprocess("-p", "tests.conftest", "-p", "no:cacheprovider", "-rfE")


def test_starting_a_process_in_a_test_not_marked_slow_fails_it(inner):
    inner.assert_outcomes(passed=2, failed=3, errors=1)
    text = inner.stdout.str()
    assert (
        "test_inner.py::test_runs_a_command starts a process (_execute_child ['true'])"
        " but is not marked slow: mark it @pytest.mark.slow"
    ) in text
    assert "test_inner.py::test_calls_os_system starts a process (system true)" in text


def test_a_swallowed_or_threaded_attempt_still_fails_the_test(inner):
    text = inner.stdout.str()
    assert "FAILED test_inner.py::test_swallows_the_failure_in_a_thread" in text
    assert "test_inner.py::test_swallows_the_failure_in_a_thread starts a process" in text


def test_a_fixture_that_starts_a_process_makes_its_test_an_error(inner):
    text = inner.stdout.str()
    assert "ERROR test_inner.py::test_with_a_fixture_that_starts_a_server" in text
    assert "test_with_a_fixture_that_starts_a_server starts a process" in text
