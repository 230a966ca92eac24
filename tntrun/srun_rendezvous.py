"""Driver side of ``launcher=srun``: run the Gloo rendezvous server beside the job."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from tntrun.plan import Plan


def driver_address(network_interface: str | None) -> str:
    """The address ranks reach the driver at: the NIC's IPv4, else the hostname's."""
    if network_interface:
        import psutil

        for address in psutil.net_if_addrs().get(network_interface, []):
            if address.family == socket.AF_INET:
                return address.address
        raise RuntimeError(f"horovod.network_interface={network_interface} has no IPv4 address")
    return socket.gethostbyname(socket.gethostname())


@contextmanager
def rendezvous(plan: Plan, network_interface: str | None) -> Iterator[dict[str, str]]:
    """Start ``tntrun.rendezvous`` for the plan's hosts; yield the ranks' variables."""
    hosts = ",".join(f"{host}:{slots}" for host, slots in plan.hosts)
    server = subprocess.Popen([sys.executable, "-m", "tntrun.rendezvous", hosts],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        line = server.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            raise RuntimeError(f"the rendezvous server did not start (said {line!r})")
        yield {"HOROVOD_GLOO_RENDEZVOUS_ADDR": driver_address(network_interface),
               "HOROVOD_GLOO_RENDEZVOUS_PORT": line[1]}  # fmt: skip
    finally:
        server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
