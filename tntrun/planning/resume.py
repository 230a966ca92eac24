"""``resume=``: the checkpoint a run continues from, and where in training it continues.

:func:`resume_position` is pure (the planner calls it); :func:`load_resumed_run`
finds the run directory, rebuilds its config and picks its newest checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from tntrun.config.settings import stored_config
from tntrun.contract import run_files
from tntrun.contract.checkpoint_integrity import newest_intact
from tntrun.contract.checkpoints import CheckpointMeta, latest_checkpoint, read_meta
from tntrun.contract.run_lock import live_holder
from tntrun.errors import PlanError

RESUME_KEYS = ("resume", "resume_allow_layout_change")
AUTO = "auto"  # resume=auto: the newest unfinished run of the same config
# A tracked run's id -> the run directory recorded on it; raises LookupError for no such run.
RunDirLookup = Callable[[str], "str | None"]


@dataclass(frozen=True)
class ResumePoint:
    """The checkpoint a run continues from."""

    checkpoint: str
    meta: CheckpointMeta
    allow_layout_change: bool = False


def resume_position(
    resume: ResumePoint,
    *,
    world: int,
    global_batch: int,
    updates_per_epoch: float,
    epochs: int,
    samples_follow_steps: bool = True,
) -> tuple[int, int, int]:
    """(epoch, training step, batch within that epoch) to continue from, after checking the
    layout still fits.

    Another world size with the same global batch continues at the checkpoint's step: global
    step k trains the same samples on any number of ranks (``samples_follow_steps``: tntrun's
    own sharding, see :mod:`tntrun.engine.data`). Another global batch, or a dataset that
    shards itself, continues at the start of the checkpoint's epoch."""
    meta = resume.meta
    if meta.epoch >= epochs:
        raise PlanError(
            f"resume: the checkpoint already completed {meta.epoch} epochs and "
            f"train.epochs={epochs}: raise train.epochs to train further"
        )
    if (meta.world_size, meta.global_batch_size) == (world, global_batch):
        return meta.epoch, meta.step, meta.batch
    if not resume.allow_layout_change:
        raise PlanError(
            f"resume: the checkpoint was trained on {meta.world_size} ranks with global batch "
            f"{meta.global_batch_size}, this run has {world} ranks and global batch "
            f"{global_batch}: keep the layout or set resume_allow_layout_change=true"
        )
    if meta.global_batch_size == global_batch and samples_follow_steps:
        return meta.epoch, meta.step, meta.batch
    return meta.epoch, round(meta.epoch * updates_per_epoch), 0


@dataclass(frozen=True)
class ResumedRun:
    run_dir: Path
    run_id: str  # the tracked run it continues
    config: DictConfig
    point: ResumePoint
    how: str = ""  # how the run was chosen (resume=..., a requeued Slurm job)
    damaged: tuple[str, ...] = ()  # newer checkpoints found damaged and set aside, a line each


def find_run_dir(reference: str, lookup: RunDirLookup, store: str) -> Path:
    """A run directory given as a path, or the one recorded on a tracked run's id."""
    path = Path(reference).expanduser()
    if path.is_dir():
        return path.resolve()
    try:
        recorded = lookup(reference)
    except LookupError:
        raise PlanError(
            f"resume={reference}: neither a run directory nor a run id in {store}: "
            "give the run directory printed by the run"
        ) from None
    if not recorded or not Path(recorded).is_dir():
        raise PlanError(f"resume={reference}: the run's directory {recorded} is gone")
    return Path(recorded)


def merge_overrides(
    base: DictConfig,
    overrides: Iterable[str],
    groups: Iterable[str],
    kept: Mapping[str, str] | None = None,
) -> None:
    """Apply the command line's ``key=value`` overrides to a stored config, in place.

    Group choices (``model=...``) cannot change a run being resumed; repeating the
    run's own choice (``kept``: a requeued job's command line) is fine.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    groups = set(groups)
    for override in parser.parse_overrides(list(overrides)):
        key = override.key_or_group
        if key in RESUME_KEYS or key.startswith("hydra."):
            continue
        if key in groups and (kept or {}).get(key) == str(override.value()):
            continue
        if key in groups:
            raise PlanError(
                f"{key}={override.value()}: a resumed run keeps its {key}; "
                "start a new run to change it"
            )
        # Replace, not merge: `callbacks={}` drops the run's extra callbacks.
        OmegaConf.update(
            base, key, override.value(), merge=False, force_add=key.startswith("callbacks.")
        )


def load_resumed_run(
    reference: str,
    lookup: RunDirLookup,
    store: str,
    overrides: Iterable[str],
    groups: Iterable[str],
    allow_layout_change: bool,
    how: str = "",
) -> ResumedRun:
    """Everything the driver needs to continue the referenced run."""
    run_dir = find_run_dir(reference, lookup, store)
    checkpoint, damaged = resumable_checkpoint(reference, run_dir)
    run_id = run_files.read_run_id(run_dir)
    if run_id is None:
        raise PlanError(
            f"resume={reference}: {run_dir} was not made by tntrun (no {run_files.RUN_ID})"
        )
    config = stored_config(run_dir / run_files.CONFIG)
    merge_overrides(config, overrides, groups, recorded_choices(run_dir))
    config.resume = reference
    config.resume_allow_layout_change = allow_layout_change
    return ResumedRun(
        run_dir=run_dir,
        run_id=run_id,
        config=config,
        point=ResumePoint(str(checkpoint), read_meta(checkpoint), allow_layout_change),
        how=how or f"resume={reference}",
        damaged=tuple(damaged),
    )


def resumable_checkpoint(reference: str, run_dir: Path) -> tuple[Path, list[str]]:
    """The newest intact checkpoint of a run no driver runs now, and a line for each newer
    one found damaged (set aside); PlanError, one line, when there is none."""
    holder = live_holder(run_dir)
    if holder is not None:
        raise PlanError(
            f"resume={reference}: {run_dir} is still running ({holder}): wait for it to end "
            "or stop it first"
        )
    checkpoint, damaged = newest_intact(run_dir)
    if checkpoint is None and damaged:
        names = ", ".join(line.split()[1] for line in damaged)
        raise PlanError(
            f"resume={reference}: every checkpoint of {run_dir} is damaged ({names}; kept as "
            "*.damaged): nothing to resume from, start a new run"
        )
    if checkpoint is None:
        raise PlanError(
            f"resume={reference}: {run_dir} holds no complete checkpoint "
            "(checkpoint.every_epochs=0, or the run stopped before its first one)"
        )
    return checkpoint, damaged


def recorded_choices(run_dir: Path) -> dict[str, str]:
    """The group choices a run was composed with (Hydra's record in ``.hydra``)."""
    record = run_dir / run_files.HYDRA / "hydra.yaml"
    if not record.is_file():
        return {}
    choices = OmegaConf.load(record).hydra.runtime.get("choices") or {}
    return {str(group): str(option) for group, option in choices.items()}


def first_resumable(candidates: Iterable[tuple[str, str | None]]) -> str | None:
    """The first (run id, run directory) whose directory holds a checkpoint: its run id."""
    for run_id, run_dir in candidates:
        if run_dir and latest_checkpoint(Path(run_dir)) is not None:
            return run_id
    return None
