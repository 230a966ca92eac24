"""The Gloo rendezvous server beside a job whose ranks another launcher starts (srun, mpirun).

horovodrun runs its own; ranks started by srun or mpirun meet at tntrun's
(``tntrun.launch.rendezvous_server``, a child process, so the driver never
imports Horovod), whose address and port reach them as HOROVOD_GLOO_* variables.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tntrun.planning.plan import Plan

# The variables the ranks find the server by (known only once it listens).
RENDEZVOUS_VARIABLES = ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "HOROVOD_GLOO_RENDEZVOUS_PORT")


@contextmanager
def serving_rendezvous(plan: Plan) -> Iterator[dict[str, str]]:
    """Run the Gloo rendezvous server for the plan's hosts; yield the ranks' variables."""
    hosts = ",".join(f"{host}:{slots}" for host, slots in plan.hosts)
    server = subprocess.Popen(
        [sys.executable, "-m", "tntrun.launch.rendezvous_server", hosts],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = server.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            raise RuntimeError(f"the rendezvous server did not start (said {line!r})")
        address = driver_address(plan.settings.horovod.network_interface)
        yield dict(zip(RENDEZVOUS_VARIABLES, (address, line[1]), strict=True))
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()


def driver_address(network_interface: str | None) -> str:
    """The address ranks reach the driver at: the NIC's IPv4, else the hostname's."""
    if network_interface:
        import psutil

        for address in psutil.net_if_addrs().get(network_interface, []):
            if address.family == socket.AF_INET:
                return address.address
        raise RuntimeError(f"horovod.network_interface={network_interface} has no IPv4 address")
    return socket.gethostbyname(socket.gethostname())
