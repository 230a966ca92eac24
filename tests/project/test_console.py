"""tntrun's lines through Python logging: plain on the console, stdout or stderr by level."""

from __future__ import annotations

import logging

import pytest

from tntrun.console import ConsoleHandler, ensure_console


@pytest.fixture
def logger():
    """A ``tntrun`` child logger with only the console handler, restored afterwards."""
    logger = logging.getLogger("tntrun.test_console")
    handler = ConsoleHandler()
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger
    logger.removeHandler(handler)
    logger.propagate = True
    logger.setLevel(logging.NOTSET)


def test_info_goes_to_stdout_and_warnings_to_stderr_as_written(logger, capsys):
    logger.info("tntrun: run FINISHED")
    logger.warning("tntrun: note: %s", "a note")
    out, err = capsys.readouterr()
    assert out == "tntrun: run FINISHED\n"
    assert err == "tntrun: note: a note\n"


def test_another_librarys_record_keeps_its_name_and_level(capsys):
    other = logging.getLogger("otherlib.test_console")
    handler = ConsoleHandler()
    other.addHandler(handler)
    other.propagate = False  # only this handler, whatever other tests set up
    try:
        other.warning("Context impl SQLiteImpl.")
    finally:
        other.removeHandler(handler)
        other.propagate = True
    assert (
        capsys.readouterr().err == "[otherlib.test_console][WARNING] - Context impl SQLiteImpl.\n"
    )


def test_a_process_that_configured_logging_is_left_alone(monkeypatch):
    tntrun = logging.getLogger("tntrun")
    monkeypatch.setattr(tntrun, "handlers", [])
    monkeypatch.setattr(logging.getLogger(), "handlers", [logging.NullHandler()])
    ensure_console()
    assert tntrun.handlers == []
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(tntrun, "level", logging.NOTSET)
    ensure_console()
    assert [type(h) for h in tntrun.handlers] == [ConsoleHandler]
    assert tntrun.level == logging.INFO
