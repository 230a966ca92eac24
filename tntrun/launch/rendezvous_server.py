"""Horovod's Gloo rendezvous server for ranks started by ``srun`` (not horovodrun).

    python -m tntrun.launch.rendezvous_server host1:4,host2:4

Prints ``port <N>`` once listening and serves until stdin closes or it is
terminated. Started by the driver as a child process, so the driver itself
never imports Horovod.
"""

from __future__ import annotations

import signal
import sys


def main(argv: list[str]) -> int:
    from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
    from horovod.runner.http.http_server import RendezvousServer

    hosts = parse_hosts(argv[1])
    server = RendezvousServer(verbose=0)
    port = server.start()
    server.init(get_host_assignments(hosts, sum(h.slots for h in hosts)))
    # Before the port is told: from then on the driver may end us.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"port {port}", flush=True)
    sys.stdin.read()  # the driver closes our stdin when the job is over
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
