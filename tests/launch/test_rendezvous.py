"""The Gloo rendezvous server beside an srun/mpirun job: the real server, started for a
plan's hosts, spoken to over HTTP on this machine as the ranks do."""

from __future__ import annotations

import http.client
import socket
from dataclasses import replace

import pytest

from tests.helpers.plans import plan_for
from tntrun.launch.rendezvous import RENDEZVOUS_VARIABLES, driver_address, serving_rendezvous


def request(address: str, port: int, method: str, path: str, body: bytes | None = None):
    """(status, body) of one HTTP request to the rendezvous server."""
    connection = http.client.HTTPConnection(address, port, timeout=10)
    try:
        connection.request(method, path, body=body)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def test_ranks_reach_the_driver_at_the_interfaces_address():
    assert driver_address("lo") == "127.0.0.1"
    assert driver_address(None) == socket.gethostbyname(socket.gethostname())
    with pytest.raises(RuntimeError, match="horovod.network_interface=nonic0 has no IPv4"):
        driver_address("nonic0")


@pytest.mark.slow
def test_the_server_serves_the_plans_ranks_and_is_gone_after_the_job(compose_cfg):
    plan = plan_for(compose_cfg, "ranks_per_node=2")
    with serving_rendezvous(plan) as variables:
        assert set(variables) == set(RENDEZVOUS_VARIABLES)
        address, port = variables[RENDEZVOUS_VARIABLES[0]], int(variables[RENDEZVOUS_VARIABLES[1]])
        assert request(address, port, "GET", "/global/0") == (404, b"")
        for rank in (0, 1):
            assert request(address, port, "PUT", f"/global/{rank}", f"r{rank}".encode())[0] == 200
        assert request(address, port, "GET", "/global/1") == (200, b"r1")
        # The global scope is the plan's 2 ranks: it is cleared once both are done with it.
        assert request(address, port, "DELETE", "/global/0")[0] == 200
        assert request(address, port, "GET", "/global/1") == (200, b"r1")
        assert request(address, port, "DELETE", "/global/1")[0] == 200
        assert request(address, port, "GET", "/global/1")[0] == 404
    with pytest.raises(ConnectionRefusedError):
        request(address, port, "GET", "/global/0")


@pytest.mark.slow
def test_a_server_that_does_not_start_is_an_error_naming_what_it_said(compose_cfg):
    plan = replace(
        plan_for(compose_cfg), hosts=(("not:a-host", 1),)
    )  # horovod reads "not:a-host:1" as no host
    said = r"the rendezvous server did not start \(said \[\]\)"
    with pytest.raises(RuntimeError, match=said), serving_rendezvous(plan):
        pytest.fail("the job ran without its rendezvous server")
