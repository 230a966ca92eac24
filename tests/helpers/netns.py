"""The test hosts: network namespaces with sshd each (scripts/netns_hosts.sh)."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tests.helpers.asserts import assert_succeeded
from tests.helpers.components import require_commands, require_root
from tests.helpers.paths import SCRIPTS

NETNS_HOSTS = str(SCRIPTS / "netns_hosts.sh")
SPARE_HOSTS = 1


@dataclass(frozen=True)
class NetnsHosts:
    """scripts/netns_hosts.sh's two hosts: addresses, names, sshd port and the key it takes."""

    addresses: tuple[str, ...]
    names: tuple[str, ...]
    port: str
    key: str
    spare: tuple[str, ...] = ()  # the hosts beyond the two (tnt-h3): elastic runs grow there

    def ssh_overrides(self) -> tuple[str, ...]:
        return (
            f"horovod.ssh_port={self.port}",
            f"horovod.ssh_identity_file={self.key}",
            "horovod.network_interface=tnt0",
        )

    def one_rank_per_host(self) -> tuple[str, ...]:
        """The overrides of a run with one rank on each host, reached over ssh."""
        return (
            "nodes=2",
            f"hosts=[{','.join(self.addresses)}]",
            "ranks_per_node=1",
            *self.ssh_overrides(),
        )


def require_netns_hosts() -> None:
    """Root and the commands the hosts need (missing: fail or skip, naming them)."""
    require_root("network-namespace hosts")
    require_commands(
        "ip",
        "unshare",
        "ssh",
        "/usr/sbin/sshd",
        fix="apt-get install iproute2 util-linux openssh-server",
    )


def netns_hosts_up(state: Path) -> NetnsHosts:
    """Start the hosts, their state in ``state``: the two every multi-host test uses, and a
    third that only the elastic runs use (``spare``)."""
    env = {**os.environ, "TNT_HOSTS": str(2 + SPARE_HOSTS)}
    up = subprocess.run(
        ["bash", NETNS_HOSTS, "up", str(state)], capture_output=True, text=True, env=env
    )
    assert_succeeded(up)
    lines = [line.split() for line in up.stdout.splitlines()]
    addresses = tuple(line[0] for line in lines)
    port, key = lines[0][1], lines[0][2]
    return NetnsHosts(addresses[:2], ("tnt-h1", "tnt-h2"), port, key, addresses[2:])


def netns_hosts_down(state: Path) -> None:
    subprocess.run(["bash", NETNS_HOSTS, "down", str(state)], check=True)
