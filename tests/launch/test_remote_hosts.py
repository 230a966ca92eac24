"""The pre-flight of multi-host runs: the one line that says what is wrong with a host
(ssh, its python, its versions, the shared run directory). Real ssh against closed and
silent ports here; real hosts in tests/cluster/test_multihost.py."""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tntrun.errors import PlanError
from tntrun.launch.remote_hosts import (
    SHARED_CHECK,
    answer_problem,
    check_host,
    failed_probe,
    is_local,
    local_addresses,
    preflight_hosts,
    ssh_command,
)

VERSIONS = {"tntrun": "1.0", "horovod": "0.28.1"}
TOKEN = (Path("/runs/r/.shared-check"), "5eed")


def probe_ended(code: int, stderr: str) -> subprocess.CompletedProcess:
    """How the ssh probe ends: its exit code and what it said on stderr."""
    return subprocess.CompletedProcess(["ssh"], code, stdout="", stderr=stderr)


def test_this_machine_is_known_by_its_names_and_loopback():
    local = local_addresses()
    assert {"localhost", socket.gethostname()} <= local
    assert is_local("127.0.0.1", local) and is_local("127.3.0.1", local) and is_local("::1", set())
    assert not is_local("node17", local)


def test_ssh_asks_nothing_and_uses_the_configured_port_and_key():
    assert ssh_command("h", 2222, "/k", 7) == [
        *("ssh", "-o", "ConnectTimeout=7", "-o", "BatchMode=yes"),
        *("-o", "StrictHostKeyChecking=no", "-p", "2222", "-i", "/k", "h"),
    ]
    assert ssh_command("h", None, None, 7)[-1] == "h" and "-p" not in ssh_command(
        "h", None, None, 7
    )


def test_ssh_failing_names_the_host_and_port_else_the_remote_python():
    unreachable = failed_probe("h", "/py", 2222, probe_ended(255, "x\nConnection refused\n"))
    assert unreachable.startswith("host h: unreachable by ssh (port 2222): Connection refused;")
    assert "(port 22)" in failed_probe("h", "/py", None, probe_ended(255, ""))
    missing = failed_probe("h", "/py", None, probe_ended(127, "sh: /py: not found\n"))
    assert missing.startswith("host h: /py does not run there (sh: /py: not found): install")


def test_the_answer_must_show_the_same_versions_and_the_run_directory():
    ready = {**VERSIONS, "token": "5eed"}
    assert answer_problem("h", ready, VERSIONS, TOKEN) is None
    older = answer_problem("h", {**ready, "horovod": "0.27.0"}, VERSIONS, TOKEN)
    assert (
        older == "host h runs horovod 0.27.0 (here 0.28.1): install the same versions on every host"
    )
    apart = answer_problem("h", {**VERSIONS, "token": None}, VERSIONS, TOKEN)
    assert apart.startswith("host h does not see the run directory /runs/r: its ranks write")


def test_local_hosts_need_no_preflight(tmp_path):
    preflight_hosts(["localhost", "127.0.0.1"], "/py", VERSIONS, None, None, 1, tmp_path)
    assert list(tmp_path.iterdir()) == [], "no token written for local hosts"


@contextmanager
def port(listening: bool) -> Iterator[int]:
    """A localhost port that refuses connections, or accepts them and never answers."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        if listening:
            sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.slow
def test_a_closed_port_is_unreachable_by_ssh(tmp_path):
    with port(listening=False) as closed:
        said = check_host("127.0.0.1", "/py", VERSIONS, closed, None, 5, TOKEN)
    assert said.startswith(f"host 127.0.0.1: unreachable by ssh (port {closed}): ")
    assert "Connection refused" in said


@pytest.mark.slow
def test_a_port_that_never_answers_is_ssh_timing_out_within_the_timeout():
    """ssh's ConnectTimeout covers the wait for the server's greeting too."""
    with port(listening=True) as silent:
        said = check_host("127.0.0.1", "/py", VERSIONS, silent, None, 1, TOKEN)
    assert said.startswith(f"host 127.0.0.1: unreachable by ssh (port {silent}): ")
    assert "timed out" in said


@pytest.mark.slow
def test_every_host_not_ready_is_one_line_and_the_token_is_removed(tmp_path):
    with port(listening=False) as closed, pytest.raises(PlanError) as refused:
        preflight_hosts(
            ["localhost", "no-such-host.invalid"], "/py", VERSIONS, closed, None, 5, tmp_path
        )
    (line,) = refused.value.problems
    assert line.startswith("host no-such-host.invalid: unreachable by ssh")
    assert not (tmp_path / SHARED_CHECK).exists()


@pytest.mark.slow
def test_many_hosts_are_checked_at_once_in_one_check_s_time(tmp_path):
    """48 hosts that never answer (distinct ``user@`` names for one silent port): the
    pre-flight waits one ssh timeout, not one per wave of checks (16 at a time: 3 waves)."""
    timeout = 3
    hosts = [f"u{n}@127.0.0.1" for n in range(48)]
    with port(listening=True) as silent, pytest.raises(PlanError) as refused:
        started = time.monotonic()
        preflight_hosts(hosts, "/py", VERSIONS, silent, None, timeout, tmp_path)
    seconds = time.monotonic() - started
    assert len(refused.value.problems) == len(hosts)
    # One wave: 3 s and the spawning of 48 ssh clients (5.1 s at a load of 15); three
    # waves (the former bound of 16) cannot take less than 9 s (measured 9.9).
    assert seconds < 2.5 * timeout, f"{seconds:.1f} s for {len(hosts)} hosts"
