"""Checkpoints that fail safe: the driver verifies a checkpoint before it resumes from it.

A checkpoint's ``meta.json`` lists a checksum of each of its files (written at publication,
:func:`tntrun.contract.checkpoints.folder_checksums`). Before the driver resumes or restarts
from a checkpoint it checks them here, without TensorFlow; a damaged one (a file changed,
cut short or gone, a ``meta.json`` that does not parse) is kept under ``<name>.damaged``,
out of every later search, and the one before it is tried. A checkpoint written before
checksums existed is checked for what it can be: its metadata and its state index.
"""

from __future__ import annotations

import json
from pathlib import Path

from tntrun.contract.checkpoints import (
    CHECKSUMS,
    DAMAGED,
    META,
    STATE_PREFIX,
    file_digest,
    list_checkpoints,
    read_meta,
)


def damage(checkpoint: Path) -> str | None:
    """Why ``checkpoint`` cannot be resumed from (one phrase), or None: it is intact."""
    try:
        read_meta(checkpoint)
        sums = json.loads((checkpoint / META).read_text()).get(CHECKSUMS)
    except (OSError, ValueError) as err:
        return f"its {META} cannot be read: {type(err).__name__}: {str(err)[:120]}"
    if sums is None:  # written before checksums: its state must at least be there
        index = checkpoint / f"{STATE_PREFIX}.index"
        return None if index.is_file() else f"{index.name} is missing"
    for name, expected in sorted(sums.items()):
        path = checkpoint / name
        try:
            if file_digest(path) != expected:
                return f"{name} does not match its checksum"
        except OSError as err:
            return f"{name} cannot be read: {err.strerror or err}"
    return None


def set_aside(checkpoint: Path) -> Path:
    """Rename a damaged checkpoint to ``<name>.damaged`` (kept for a look, never resumed)."""
    target = checkpoint.with_name(checkpoint.name + DAMAGED)
    number = 1
    while target.exists():
        number += 1
        target = checkpoint.with_name(f"{checkpoint.name}{DAMAGED}-{number}")
    checkpoint.rename(target)
    return target


def newest_intact(run_dir: Path) -> tuple[Path | None, list[str]]:
    """The newest intact checkpoint of a run (None: none is), and one line for each newer
    one found damaged and set aside."""
    notes = []
    for checkpoint in reversed(list_checkpoints(run_dir)):
        why = damage(checkpoint)
        if why is None:
            return checkpoint, notes
        try:
            kept = f"kept as {set_aside(checkpoint).name}"
        except OSError as err:  # a read-only run directory: skipped all the same
            kept = f"left in place ({err.strerror})"
        notes.append(
            f"checkpoint {checkpoint.name} of {run_dir} is damaged ({why}): {kept}, "
            "falling back to the one before"
        )
    return None, notes
