"""Checkpoint folders of a run: naming, metadata, atomic publication, retention.

Only paths and JSON here (no TensorFlow), so the driver can find and vet a
checkpoint before it starts ranks. A checkpoint is a folder
``<run_dir>/checkpoints/epoch-0003/`` holding TensorFlow's checkpoint files
(model and optimizer state) and ``meta.json``; it appears under that name only
once complete, because it is written under a temporary name and renamed; its
``meta.json`` lists a checksum of each of its files (``checksums``), which the driver
verifies before it resumes from it (:mod:`tntrun.contract.checkpoint_integrity`). A
preempted run stops inside an epoch: ``epoch-0003.batch-00017`` holds the state
after 3 epochs and 17 batches of the 4th (names sort in training order).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from tntrun.contract.disk import disk_error_of
from tntrun.contract.run_files import CHECKPOINTS

META = "meta.json"
STATE_PREFIX = "state"
BEST = "best"  # checkpoints/best: the best by checkpoint.monitor
BEST_META = "best.json"
CHECKSUMS = "checksums"  # meta.json's key: {file name: "sha256:<hex>"} (none before 0.2)
DAMAGED = ".damaged"  # suffix of a checkpoint found damaged: kept, never resumed from
DIGEST = "sha256"  # OpenSSL's, with the CPU's SHA instructions: twice blake2b here
CHUNK = 1 << 20
# Keys that may change between an interrupted run and its resumption.
VOLATILE_KEYS = (
    "train",
    "eval",  # eval and faults were train's keys: volatile as train is, so a hash stays
    "faults",
    "dry_run",
    "output_root",
    "tracking",
    "checkpoint",
    "resume",
    "resume_allow_layout_change",
    "callbacks",
    "elastic",  # how the run may resize, not what it trains
)
# Keys that only say where the ranks run: the same experiment on another layout has the same
# hash, so resume=auto finds it; the checkpoint's world size tells the layout changed.
LAYOUT_KEYS = (
    "nodes",
    "gpus",
    "ranks_per_node",
    "threads_per_rank",
    "sockets_per_node",
    "pin_to_socket",
    "hosts",
    "hostfile",
    "launcher",
)


@dataclass(frozen=True)
class CheckpointMeta:
    epoch: int  # epochs completed
    step: int  # training steps taken (the optimizer's iteration counter)
    world_size: int
    global_batch_size: int
    config_hash: str
    batch: int = 0  # batches trained of epoch ``epoch`` (a preempted run's mid-epoch state)


def config_hash(config: Mapping[str, Any]) -> str:
    """A short hash of the parts of a resolved config that define the training problem:
    neither what may change on resumption nor the layout."""
    stable = {k: v for k, v in config.items() if k not in (*VOLATILE_KEYS, *LAYOUT_KEYS)}
    return hashlib.sha256(json.dumps(stable, sort_keys=True, default=str).encode()).hexdigest()[:16]


def checkpoint_dir(run_dir: Path, epoch: int, batch: int = 0) -> Path:
    within = f".batch-{batch:05d}" if batch else ""
    return run_dir / CHECKPOINTS / f"epoch-{epoch:04d}{within}"


def list_checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    found = root.glob("epoch-[0-9]*")
    return sorted(p for p in found if not p.name.endswith(DAMAGED) and (p / META).is_file())


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = list_checkpoints(run_dir)
    return found[-1] if found else None


def read_meta(checkpoint: Path) -> CheckpointMeta:
    """The checkpoint's metadata (raises ValueError or OSError for a damaged meta.json)."""
    raw = json.loads((checkpoint / META).read_text())
    known = {field.name for field in fields(CheckpointMeta)}
    try:
        return CheckpointMeta(**{k: v for k, v in raw.items() if k in known})
    except TypeError as err:  # a key missing: not a meta.json tntrun wrote whole
        raise ValueError(f"{checkpoint / META}: {err}") from None


def file_digest(path: Path) -> str:
    """The checksum of one file, streamed (a checkpoint's files may be gigabytes)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return f"{DIGEST}:{digest.hexdigest()}"


def folder_checksums(folder: Path) -> dict[str, str]:
    """Each file of a checkpoint folder but meta.json (which holds them): its checksum."""
    return {
        p.name: file_digest(p) for p in sorted(folder.iterdir()) if p.is_file() and p.name != META
    }


def _write_atomically(
    final: Path,
    meta: CheckpointMeta,
    write_state: Callable[[str], None],
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write a checkpoint folder under a temporary name and rename it to ``final``; on a
    failure (a full disk) remove the temporary folder: the previous checkpoints stand."""
    tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir(parents=True)
        write_state(str(tmp / STATE_PREFIX))
        if extra is not None:
            (tmp / BEST_META).write_text(json.dumps(dict(extra), indent=2))
        described = {**asdict(meta), CHECKSUMS: folder_checksums(tmp)}
        (tmp / META).write_text(json.dumps(described, indent=2))
    except Exception as err:
        shutil.rmtree(tmp, ignore_errors=True)
        disk = disk_error_of(err, tmp)
        if disk is not None:
            raise disk from err
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    return final


def publish(
    run_dir: Path, meta: CheckpointMeta, write_state: Callable[[str], None], keep: int
) -> Path:
    """Write a checkpoint under a temporary name, rename it into place, prune old ones.

    ``write_state`` receives the file prefix to write TensorFlow's state to.
    """
    final = _write_atomically(checkpoint_dir(run_dir, meta.epoch, meta.batch), meta, write_state)
    for old in list_checkpoints(run_dir)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def adopt(checkpoint: Path, run_dir: Path) -> Path:
    """Give a resumed run's directory the checkpoint it starts from (hard links where the
    filesystem allows, else copies), so the newest run directory always holds the run's
    newest checkpoint, even before it writes one."""
    final = run_dir / CHECKPOINTS / checkpoint.name
    if not final.exists():

        def link(source: str, target: str) -> None:
            try:
                os.link(source, target)
            except OSError:
                shutil.copy2(source, target)

        tmp = final.with_name(f".{final.name}.tmp-{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(checkpoint, tmp, copy_function=link)
        os.replace(tmp, final)
    return final


def publish_best(
    run_dir: Path,
    meta: CheckpointMeta,
    write_state: Callable[[str], None],
    monitor: str,
    value: float,
) -> Path:
    """Replace ``checkpoints/best`` (kept apart from the newest ``keep``; resume ignores it)."""
    best = {"monitor": monitor, "value": value, "epoch": meta.epoch, "step": meta.step}
    return _write_atomically(run_dir / CHECKPOINTS / BEST, meta, write_state, best)


def best_checkpoint(run_dir: Path) -> tuple[Path, dict[str, Any]] | None:
    """The best checkpoint and its ``best.json`` (monitor, value, epoch), if any."""
    folder = run_dir / CHECKPOINTS / BEST
    if not (folder / BEST_META).is_file():
        return None
    return folder, json.loads((folder / BEST_META).read_text())
