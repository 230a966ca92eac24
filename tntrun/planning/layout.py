"""Hardware layout: which hosts, how many ranks on each, and where each rank sits.

Pure functions of the config and of facts passed in (environment, file text),
so they are unit-tested without a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

LOCALHOST = "localhost"


class LayoutError(ValueError):
    """A layout that cannot run; the message names the key and the fix."""


@dataclass(frozen=True)
class RankPlacement:
    rank: int
    host: str
    local_rank: int
    socket: int | None
    gpu: int | None


def ranks_per_node(gpus: int, cpu_ranks: int) -> int:
    """One rank per GPU, or ``ranks_per_node`` CPU ranks when ``gpus=0``."""
    if gpus < 0:
        raise LayoutError(f"gpus={gpus}: give the GPUs per node, or gpus=0 for CPU ranks")
    if gpus > 0:
        return gpus
    if cpu_ranks < 1:
        raise LayoutError(
            f"ranks_per_node={cpu_ranks}: nodes x ranks per node must be at least 1; "
            "set ranks_per_node=1 or more"
        )
    return cpu_ranks


def parse_hostfile(text: str, source: str = "hostfile") -> list[tuple[str, int | None]]:
    """Hosts and optional slots from a hostfile.

    One host per line, Tarantella style (``host``), colon style (``host:4``) or
    Horovod/MPI style (``host slots=4``); ``#`` starts a comment.
    """
    hosts: list[tuple[str, int | None]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)(?::(\d+)|\s+slots\s*=\s*(\d+))?", line)
        if match is None:
            raise LayoutError(
                f"hostfile={source} line {number} ({raw.strip()!r}) is malformed: "
                "write one host per line as 'host', 'host:SLOTS' or 'host slots=SLOTS'"
            )
        slots = match.group(2) or match.group(3)
        hosts.append((match.group(1), None if slots is None else int(slots)))
    if not hosts:
        raise LayoutError(f"hostfile={source} lists no host: write one host per line")
    return hosts


def expand_slurm_nodelist(nodelist: str) -> list[str]:
    """Expand a Slurm node list such as ``node[01-03,07],gpu5`` without calling scontrol."""
    hosts: list[str] = []
    for match in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?([^,\[]*)", nodelist):
        prefix, ranges, suffix = match.group(1), match.group(2), match.group(3)
        if not prefix.strip():
            continue
        if ranges is None:
            hosts.append(prefix + suffix)
            continue
        for part in ranges.split(","):
            first, _, last = part.partition("-")
            if not last:
                hosts.append(f"{prefix}{first}{suffix}")
                continue
            width = len(first)
            hosts.extend(
                f"{prefix}{str(i).zfill(width)}{suffix}" for i in range(int(first), int(last) + 1)
            )
    return hosts


def _host_list(cfg: Mapping[str, Any], env: Mapping[str, str]) -> tuple[str, list[tuple]] | None:
    """Where the hosts come from and the raw (host, slots) list, or None for none given."""
    if cfg.get("hosts"):
        return "hosts", [(str(h), None) for h in cfg["hosts"]]
    if cfg.get("hostfile"):
        path = Path(cfg["hostfile"])
        if not path.is_file():
            raise LayoutError(
                f"hostfile={path} does not exist: give an existing file with one host per line"
            )
        return "hostfile", parse_hostfile(path.read_text(), str(path))
    if env.get("SLURM_JOB_NODELIST"):
        return "SLURM_JOB_NODELIST", [
            (h, None) for h in expand_slurm_nodelist(env["SLURM_JOB_NODELIST"])
        ]
    return None


def resolve_hosts(
    cfg: Mapping[str, Any], per_node: int, env: Mapping[str, str]
) -> tuple[tuple[str, int], ...]:
    """(host, slots) per node from ``hosts``, ``hostfile``, a Slurm allocation or localhost."""
    nodes = int(cfg["nodes"])
    if nodes < 1:
        raise LayoutError(f"nodes={nodes}: nodes x ranks per node must be at least 1; set nodes=1")
    given = _host_list(cfg, env)
    if given is None:
        if nodes == 1:
            return ((LOCALHOST, per_node),)
        raise LayoutError(
            f"nodes={nodes} needs the hosts to run on: give hosts=[h1,h2,...], "
            "hostfile=PATH, or run inside a Slurm allocation"
        )
    source, hosts = given
    if source == "SLURM_JOB_NODELIST":
        if len(hosts) < nodes:
            raise LayoutError(
                f"nodes={nodes} but the Slurm allocation has {len(hosts)} node(s): "
                f"set nodes={len(hosts)} or allocate more nodes"
            )
        hosts = hosts[:nodes]
    elif len(hosts) > nodes:
        raise LayoutError(
            f"{source} lists {len(hosts)} hosts but nodes={nodes}: "
            f"set nodes={len(hosts)} or list {nodes} host(s)"
        )
    elif len(hosts) < nodes:
        raise LayoutError(
            f"nodes={nodes} but {source} lists only {len(hosts)} host(s): list one host per node"
        )
    for host, slots in hosts:
        if slots is not None and slots < per_node:
            raise LayoutError(
                f"{source}: host {host} has {slots} slot(s) but each node runs {per_node} ranks: "
                f"raise its slots or lower ranks_per_node/gpus to {slots}"
            )
    return tuple((host, per_node) for host, _ in hosts)


def place_ranks(
    hosts: tuple[tuple[str, int], ...], gpus: int, sockets: int | None
) -> tuple[RankPlacement, ...]:
    """Rank -> host, local rank, socket (when pinning) and GPU (when gpus > 0)."""
    placements = []
    rank = 0
    for host, slots in hosts:
        for local in range(slots):
            placements.append(
                RankPlacement(
                    rank=rank,
                    host=host,
                    local_rank=local,
                    socket=None if sockets is None else local % sockets,
                    gpu=local if gpus > 0 else None,
                )
            )
            rank += 1
    return tuple(placements)


def _first_count(value: str) -> int:
    """Slurm's per-node counts look like "4", "4(x2)" or "gpu:a100:4": the count."""
    return int(re.findall(r"\d+", value.split("(")[0])[-1])


def host_list_layout(cfg: Mapping[str, Any], given: set[str]) -> dict[str, int]:
    """``nodes`` from ``hosts=[...]`` or ``hostfile=`` when not given on the command line:
    one node per listed host (``tntrun -m 'hosts=[a],[a,b]'`` sweeps 1 and 2 nodes)."""
    if "nodes" in given:
        return {}
    try:
        listed = _host_list(cfg, {})
    except LayoutError:
        return {}  # a missing hostfile: planning reports it
    return {"nodes": len(listed[1])} if listed and listed[1] else {}


def given_layout(cfg: Mapping[str, Any], env: Mapping[str, str], given: set[str]) -> dict[str, int]:
    """Layout keys not given on the command line that the hosts fill in: an explicit host
    list sets ``nodes``, else a Slurm allocation sets what it allocated."""
    if cfg.get("hosts") or cfg.get("hostfile"):
        return host_list_layout(cfg, given)
    return allocation_layout(env, given)


def allocation_layout(env: Mapping[str, str], given: set[str]) -> dict[str, int]:
    """Layout keys taken from a Slurm allocation, for those not given on the command line."""
    if not env.get("SLURM_JOB_NODELIST"):
        return {}
    if env.get("SUBMITIT_EXECUTOR") == "slurm":  # sized from this very config (tntrun_slurm)
        return {}
    layout = {}
    if "nodes" not in given:
        layout["nodes"] = len(expand_slurm_nodelist(env["SLURM_JOB_NODELIST"]))
    if "gpus" not in given and env.get("SLURM_GPUS_PER_NODE"):
        layout["gpus"] = _first_count(env["SLURM_GPUS_PER_NODE"])
    tasks = allocated_tasks_per_node(env)
    if "ranks_per_node" not in given and tasks:
        layout["ranks_per_node"] = min(tasks)
    return layout


def allocated_tasks_per_node(env: Mapping[str, str]) -> list[int]:
    """The allocation's tasks on each node, from SLURM_TASKS_PER_NODE (set for every
    allocation), else SLURM_NTASKS_PER_NODE; [] outside one."""
    return _per_node_counts(env.get("SLURM_TASKS_PER_NODE") or env.get("SLURM_NTASKS_PER_NODE"))


def allocated_cpus_per_node(env: Mapping[str, str]) -> list[int]:
    """The allocation's CPUs on each node (SLURM_JOB_CPUS_PER_NODE); [] outside one."""
    return _per_node_counts(env.get("SLURM_JOB_CPUS_PER_NODE"))


def _per_node_counts(value: str | None) -> list[int]:
    """Slurm's compressed per-node counts: "2(x3),1" -> [2, 2, 2, 1]; [] if absent."""
    counts: list[int] = []
    for part in filter(None, (value or "").split(",")):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            return []
        counts += [int(match[1])] * int(match[2] or 1)
    return counts
