"""Driver side of ``resume=``: find the run, rebuild its config, pick its checkpoint."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from tntrun.checkpoints import latest_checkpoint, read_meta
from tntrun.plan import PlanError, ResumePoint
from tntrun.schema import TntrunConfig

RUN_ID_FILE = "mlflow_run_id"
RESUME_KEYS = ("resume", "resume_allow_layout_change")


@dataclass(frozen=True)
class ResumedRun:
    run_dir: Path
    mlflow_run_id: str
    config: DictConfig
    point: ResumePoint


def find_run_dir(reference: str, tracking_uri: str) -> Path:
    """A run directory given as a path, or the one recorded on an MLflow run."""
    path = Path(reference).expanduser()
    if path.is_dir():
        return path.resolve()
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    try:
        run = MlflowClient(tracking_uri).get_run(reference)
    except MlflowException:
        raise PlanError(
            f"resume={reference}: neither a run directory nor an MLflow run id in "
            f"{tracking_uri}: give the run directory printed by the run"
        ) from None
    recorded = run.data.tags.get("run_dir")
    if not recorded or not Path(recorded).is_dir():
        raise PlanError(f"resume={reference}: the run's directory {recorded} is gone")
    return Path(recorded)


def merge_overrides(base: DictConfig, overrides: Iterable[str], groups: Iterable[str]) -> None:
    """Apply the command line's ``key=value`` overrides to a stored config, in place.

    Group choices (``model=...``) cannot change a run being resumed.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    groups = set(groups)
    for override in parser.parse_overrides(list(overrides)):
        key = override.key_or_group
        if key in RESUME_KEYS or key.startswith("hydra."):
            continue
        if key in groups:
            raise PlanError(
                f"{key}={override.value()}: a resumed run keeps its {key}; "
                "start a new run to change it"
            )
        # Replace, not merge: `callbacks={}` drops the run's extra callbacks.
        OmegaConf.update(base, key, override.value(), merge=False,
                         force_add=key.startswith("callbacks."))  # fmt: skip


def load_resumed_run(
    reference: str, tracking_uri: str, overrides: Iterable[str], groups: Iterable[str],
    allow_layout_change: bool,
) -> ResumedRun:  # fmt: skip
    """Everything the driver needs to continue the referenced run."""
    run_dir = find_run_dir(reference, tracking_uri)
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        raise PlanError(
            f"resume={reference}: {run_dir} holds no complete checkpoint "
            "(checkpoint.every_epochs=0, or the run stopped before its first one)"
        )
    run_id_file = run_dir / RUN_ID_FILE
    if not run_id_file.is_file():
        raise PlanError(f"resume={reference}: {run_dir} was not made by tntrun (no {RUN_ID_FILE})")
    config = OmegaConf.merge(
        OmegaConf.structured(TntrunConfig), OmegaConf.load(run_dir / "config.yaml")
    )
    merge_overrides(config, overrides, groups)
    config.resume = reference
    config.resume_allow_layout_change = allow_layout_change
    return ResumedRun(
        run_dir=run_dir,
        mlflow_run_id=run_id_file.read_text().strip(),
        config=config,
        point=ResumePoint(str(checkpoint), read_meta(checkpoint), allow_layout_change),
    )
