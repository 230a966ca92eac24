"""The ``tntrun`` command: a Hydra app that plans, tracks and launches a run.

This process is the driver. It never imports TensorFlow: it composes the
config, derives the plan, creates the MLflow run, starts the ranks with
``horovodrun`` and ends the run from their exit status.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from tntrun.launch import run_ranks
from tntrun.plan import Plan, PlanError, build_plan
from tntrun.tracking import RunTracker, flatten, tracking_uri, ui_command

EXIT_CONFIG_ERROR = 2


def _horovodrun() -> str:
    """The horovodrun next to this interpreter (a venv need not be activated)."""
    beside = Path(sys.executable).parent / "horovodrun"
    if beside.exists():
        return str(beside)
    found = shutil.which("horovodrun")
    if found is None:
        raise PlanError("horovodrun not found: run `make setup` (scripts/setup_env.sh) first")
    return found


def _raise_keyboard_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def make_plan(cfg: DictConfig, run_dir: Path) -> Plan:
    """Resolve the dataset's shape and derive the plan (no TensorFlow involved)."""
    dataset = instantiate(cfg.dataset)
    plain = OmegaConf.to_container(cfg, resolve=True)
    return build_plan(
        plain,
        dataset.info(),
        cores_per_node=os.cpu_count() or 1,
        python=sys.executable,
        horovodrun=_horovodrun(),
        run_dir=run_dir,
    )


def train(cfg: DictConfig) -> int:
    """Plan, track and launch one run; return the process exit code."""
    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir).resolve()
    try:
        plan = make_plan(cfg, run_dir)
    except (PlanError, ValueError) as err:
        print(f"tntrun: config error: {err}", file=sys.stderr)
        return EXIT_CONFIG_ERROR

    output_root = Path(cfg.output_root)
    uri = tracking_uri(cfg.tracking.uri, output_root)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    plan.save(run_dir / "plan.json")

    tracker = RunTracker(uri, cfg.tracking.experiment_name, output_root / "mlartifacts")
    choices = {
        f"choice.{k}": str(v)
        for k, v in hydra_cfg.runtime.choices.items()
        if not k.startswith("hydra/")
    }
    run_id = tracker.start(
        cfg.tracking.run_name,
        tags={
            "world_size": str(plan.world_size),
            "launch_command": " ".join(plan.launch_command),
            "run_dir": str(run_dir),
            "hydra.overrides": " ".join(hydra_cfg.overrides.task),
            **choices,
        },
    )
    status = "FAILED"
    signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    try:
        params = dict(flatten(OmegaConf.to_container(cfg, resolve=True)))
        params.update(plan.summary_params())
        tracker.log_params(params)
        tracker.log_artifact(run_dir / "config.yaml")
        tracker.log_artifact(run_dir / "plan.json")

        print(
            f"tntrun: {plan.world_size} ranks on {', '.join(f'{h}:{s}' for h, s in plan.hosts)}; "
            f"global batch {plan.global_batch_size} = {plan.world_size} x {plan.micro_batch_size}; "
            f"{plan.steps_per_epoch} steps/epoch x {plan.epochs} epochs; lr {plan.scaled_lr:g}"
        )
        print(f"tntrun: MLflow run {run_id} in {uri}")
        env = {**dict(plan.launch_env), "MLFLOW_RUN_ID": run_id, "MLFLOW_TRACKING_URI": uri}
        result = run_ranks(plan.launch_command, env, run_dir / "ranks.log")
        status = result.status
        tracker.log_artifact(run_dir / "ranks.log")
    except KeyboardInterrupt:
        status = "KILLED"
    finally:
        tracker.finish(status)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

    _report(tracker, status, uri, run_dir)
    return 0 if status == "FINISHED" else 1


def _report(tracker: RunTracker, status: str, uri: str, run_dir: Path) -> None:
    metrics = tracker.metrics()
    print()
    print(f"tntrun: run {status}")
    for key in ("val_accuracy", "val_loss"):
        if key in metrics:
            print(f"tntrun: final {key}: {metrics[key]:.4f}")
    print(f"tntrun: MLflow run id: {tracker.run_id}")
    print(f"tntrun: run directory: {run_dir}")
    print(f"tntrun: open the MLflow UI with: {ui_command(uri)}")


_failed_jobs: list[int] = []


@hydra.main(version_base="1.3", config_path="pkg://tntrun.conf", config_name="config")
def _hydra_entry(cfg: DictConfig) -> None:
    code = train(cfg)
    if not code:
        return
    if HydraConfig.get().mode == RunMode.RUN:
        sys.exit(code)
    _failed_jobs.append(code)  # a sweep goes on with its other jobs


def main() -> None:
    """Console-script entry point; a sweep exits non-zero if any of its jobs failed."""
    _hydra_entry()
    if _failed_jobs:
        print(f"tntrun: {len(_failed_jobs)} sweep job(s) failed", file=sys.stderr)
        sys.exit(max(_failed_jobs))


if __name__ == "__main__":
    main()
