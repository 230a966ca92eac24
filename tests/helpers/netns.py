"""The test hosts: network namespaces with sshd each (scripts/netns_hosts.sh), 2 to 32."""

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
    """scripts/netns_hosts.sh's hosts: addresses, names, sshd port and the key it takes."""

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
            f"nodes={len(self.addresses)}",
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


def netns_hosts_up(state: Path, count: int = 2, spare: int = SPARE_HOSTS) -> NetnsHosts:
    """Start the hosts, their state in ``state``: the ``count`` every multi-host test uses,
    and ``spare`` ones that only the elastic runs use."""
    env = {**os.environ, "TNT_HOSTS": str(count + spare)}
    up = subprocess.run(
        ["bash", NETNS_HOSTS, "up", str(state)], capture_output=True, text=True, env=env
    )
    assert_succeeded(up)
    lines = [line.split() for line in up.stdout.splitlines()]
    addresses = tuple(line[0] for line in lines)
    port, key = lines[0][1], lines[0][2]
    names = tuple(f"tnt-h{i}" for i in range(1, count + 1))
    return NetnsHosts(addresses[:count], names, port, key, addresses[count:])


def netns_hosts_down(state: Path) -> None:
    subprocess.run(["bash", NETNS_HOSTS, "down", str(state)], check=True)


def netns_hosts_in_use() -> bool:
    """Whether scripts/netns_hosts.sh's hosts are up already (another session has them:
    its ``up`` would take them down under it, the names being fixed)."""
    return Path("/run/netns/tnt-h1").exists()


def processes_on_hosts(state: Path) -> dict[str, list[str]]:
    """Each host's processes but its sshd listener (pid and command line): what a run left
    there. ``ip netns pids`` sees every process in the host's network namespace."""
    found = {}
    for pid_file in sorted(state.glob("sshd.*.pid")):
        host = f"tnt-h{pid_file.name.split('.')[1]}"
        listed = subprocess.run(["ip", "netns", "pids", host], capture_output=True, text=True)
        pids = set(listed.stdout.split()) - {pid_file.read_text().strip()}
        found[host] = [f"{pid} {_command_line(pid)}" for pid in sorted(pids, key=int)]
    return {host: left for host, left in found.items() if left}


def _command_line(pid: str) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(gone)"
    return raw.replace(b"\0", b" ").decode(errors="replace")[:200]
