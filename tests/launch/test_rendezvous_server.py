"""``python -m tntrun.launch.rendezvous_server``: the driver's child that serves Horovod's
Gloo rendezvous. Started here as the driver starts it (in its own session, always ended)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from tntrun.launch import rendezvous_server

pytestmark = pytest.mark.slow  # each test starts the server


@contextmanager
def server(hosts: str) -> Iterator[subprocess.Popen]:
    """The server for ``hosts`` (host:slots,...), killed with its session if still there."""
    process = subprocess.Popen(
        [sys.executable, "-m", rendezvous_server.__name__, hosts],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            stream.close()


def port_said(process: subprocess.Popen) -> int:
    word, port = process.stdout.readline().split()
    assert word == "port"
    return int(port)


def test_it_says_its_port_and_serves_until_its_stdin_closes():
    with server("localhost:2,otherhost:2") as process:
        assert 1024 <= port_said(process) < 65536
        with pytest.raises(subprocess.TimeoutExpired):
            process.wait(timeout=0.5)
        process.stdin.close()
        assert process.wait(timeout=10) == 0


def test_it_ends_cleanly_when_terminated():
    with server("localhost:1") as process:
        port_said(process)
        process.terminate()
        assert process.wait(timeout=10) == 0


def test_hosts_it_cannot_read_end_it_before_it_says_a_port():
    with server("localhost:two") as process:
        assert process.wait(timeout=30) != 0
        assert process.stdout.read() == ""
        assert "invalid literal for int()" in process.stderr.read()
