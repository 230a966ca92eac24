"""Pre-flight for multi-host runs: every remote host answers ssh and runs our stack.

Run by the driver before any rank starts, so an unreachable host, a wrong ssh
port or key, or a host with other versions is one clear error naming the host,
not a Horovod stack trace after a timeout.
"""

from __future__ import annotations

import ipaddress
import json
import secrets
import shlex
import socket
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tntrun.planning.plan import PlanError

# Printed by the remote python: the versions that must match this machine's.
# And the token the driver wrote into the run directory (argv[1]): the ranks write into the
# directory the driver reads, so every host must see it (a shared filesystem).
PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "def v(*names):\n"
    "    for n in names:\n"
    "        try: return m.version(n)\n"
    "        except m.PackageNotFoundError: pass\n"
    "try: token = open(sys.argv[1]).read()\n"
    "except OSError: token = None\n"
    "print(json.dumps({'tntrun': v('tntrun'), 'tensorflow': v('tensorflow-cpu', 'tensorflow'),"
    " 'horovod': v('horovod'), 'token': token}))"
)
SHARED_CHECK = ".shared-check"  # the token's file in the run directory, deleted afterwards
# Hosts checked at once: an ssh client each, mostly waiting on the network, so the
# pre-flight of up to this many hosts takes one check's time (was 16: 32 hosts took two).
PARALLEL_CHECKS = 64


def local_addresses() -> set[str]:
    """Names and addresses that mean this machine (horovodrun starts those without ssh)."""
    import psutil

    found = {"localhost", socket.gethostname(), socket.getfqdn()}
    for addresses in psutil.net_if_addrs().values():
        found.update(a.address for a in addresses if a.family in (socket.AF_INET, socket.AF_INET6))
    return found


def is_local(host: str, local: set[str]) -> bool:
    if host in local:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def ssh_options(port: int | None, identity: str | None) -> list[str]:
    """How tntrun's ssh reaches a host (horovodrun's checks, mpirun's agent): no prompt, no
    host-key question, the port and key of horovod.ssh_port / horovod.ssh_identity_file."""
    options = ["-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no"]
    if port:
        options += ["-p", str(port)]
    if identity:
        options += ["-i", identity]
    return options


def ssh_command(host: str, port: int | None, identity: str | None, timeout: int) -> list[str]:
    return ["ssh", "-o", f"ConnectTimeout={timeout}", *ssh_options(port, identity), host]


def check_host(
    host: str,
    python: str,
    expected: Mapping[str, str | None],
    port: int | None,
    identity: str | None,
    timeout: int,
    token: tuple[Path, str],
) -> str | None:
    """The problem with ``host`` as one line, or None when it is ready."""
    token_path, _ = token
    remote = f"{shlex.quote(python)} -c {shlex.quote(PROBE)} {shlex.quote(str(token_path))}"
    try:
        done = subprocess.run(
            [*ssh_command(host, port, identity, timeout), remote],
            capture_output=True,
            text=True,
            timeout=timeout + 5,
        )
    except subprocess.TimeoutExpired:
        return (
            f"host {host}: no ssh answer within {timeout} s (horovod.start_timeout): "
            "check the host name, horovod.ssh_port and the network"
        )
    if done.returncode != 0:
        return failed_probe(host, python, port, done)
    try:
        found = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"host {host}: unexpected answer from {python}: {done.stdout[-200:]!r}"
    return answer_problem(host, found, expected, token)


def failed_probe(
    host: str, python: str, port: int | None, done: subprocess.CompletedProcess
) -> str:
    """Why the probe failed: ssh itself (exit 255: host, port or key), or ``python`` there."""
    if done.returncode == 255:
        why = (done.stderr.strip().splitlines() or ["ssh failed"])[-1]
        port_text = f"port {port}" if port else "port 22"
        return (
            f"host {host}: unreachable by ssh ({port_text}): {why}; check hosts, "
            "horovod.ssh_port and horovod.ssh_identity_file"
        )
    why = (done.stderr.strip().splitlines() or ["no output"])[-1]
    return (
        f"host {host}: {python} does not run there ({why}): install the same "
        "environment at the same path on every host"
    )


def answer_problem(
    host: str, found: Mapping, expected: Mapping[str, str | None], token: tuple[Path, str]
) -> str | None:
    """What the probe's answer ``found`` shows wrong: versions other than ``expected``, or a
    run directory that is not the driver's (it cannot read back ``token``)."""
    token_path, token_text = token
    different = [f"{k} {found.get(k)} (here {v})" for k, v in expected.items() if found.get(k) != v]
    if different:
        return f"host {host} runs {', '.join(different)}: install the same versions on every host"
    if found.get("token") != token_text:
        return (
            f"host {host} does not see the run directory {token_path.parent}: its ranks "
            "write there and the driver reads it; put output_root on a filesystem every "
            "host shares (NFS, Lustre, GPFS)"
        )
    return None


def preflight_hosts(
    hosts: Sequence[str],
    python: str,
    versions: Mapping[str, str | None],
    port: int | None,
    identity: str | None,
    timeout: int,
    run_dir: Path,
) -> None:
    """Raise PlanError listing every remote host that is not ready (checked in parallel):
    unreachable, other versions, or not seeing ``run_dir``."""
    local = local_addresses()
    remote = [h for h in hosts if not is_local(h, local)]
    if not remote:
        return
    token = (run_dir / SHARED_CHECK, secrets.token_hex(8))
    token[0].write_text(token[1])
    try:
        with ThreadPoolExecutor(max_workers=min(PARALLEL_CHECKS, len(remote))) as pool:
            problems = list(
                pool.map(
                    lambda h: check_host(h, python, versions, port, identity, timeout, token),
                    remote,
                )
            )
    finally:
        token[0].unlink(missing_ok=True)
    found = [p for p in problems if p]
    if found:
        raise PlanError(found)
