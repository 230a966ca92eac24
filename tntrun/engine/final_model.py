"""What a rank leaves when training ended: the final weights and clean model (rank 0), the
MLflow model folders, and the scaling prediction."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from tntrun.config.zoo import build_model
from tntrun.contract.run_files import FINAL_MODEL, FINAL_WEIGHTS, MLFLOW_MODEL
from tntrun.engine import precision
from tntrun.engine.mlflow_model import save_mlflow_models
from tntrun.planning.plan import Plan


def save_final(model, plan: Plan, info, run_dir: Path, val_batches) -> None:
    """Master rank: final weights as NumPy arrays, a clean, uncompiled Keras model and, with
    tracking.log_model, MLflow Model folders of it and of the best model (the driver logs
    them; ``val_batches`` give the input example)."""
    np.savez(run_dir / FINAL_WEIGHTS, *model.get_weights())
    tracking = plan.settings.tracking
    clean = save_clean_model(model, plan.settings.model, info, run_dir / FINAL_MODEL)
    if not tracking.log_model:
        return
    if clean is None:  # MLflow's Keras flavour saves through Keras too
        print(f"tntrun: note: no {MLFLOW_MODEL} either (tracking.log_model)", flush=True)
        return
    save_mlflow_models(clean, run_dir, val_batches, tracking.check_model_loads)


def save_clean_model(model, section: Mapping[str, Any], info, path: Path) -> Any | None:
    """``model``'s weights in a freshly built, uncompiled model (the ``model`` ``section``'s,
    without the data-parallel optimizer), saved at ``path``; that model, or None when Keras
    cannot serialise it."""
    with precision.policy("float32"):  # the weights are float32 in every train.precision
        # Built as in training (a subclassed model is called on an input to make its weights).
        clean = precision.float32_outputs(build_model(section, info), info.input_shape)
    clean.set_weights(model.get_weights())
    if getattr(clean, "optimizer", None) is not None and not clean.optimizer.built:
        # A builder that compiles: its optimizer saved with its variables, so it loads whole.
        clean.optimizer.build(clean.trainable_variables)
    try:
        clean.save(path)
        return clean
    except NotImplementedError as unserialisable:  # a subclassed model without get_config
        path.unlink(missing_ok=True)
        why = str(unserialisable).strip().splitlines()[0]
        note = (
            f"no {path.name}: Keras cannot serialise {type(clean).__name__} ({why} ...: give "
            f"it a get_config()); its weights are in {FINAL_WEIGHTS} and the checkpoints"
        )
        print(f"tntrun: note: {note}", flush=True)
        return None


def predict_scaling(
    model, plan: Plan, task: str, throughput, run_dir: Path, metrics_log, batches
) -> None:
    """Profile this run on every rank; rank 0 prints, writes and logs the prediction."""
    from tntrun.engine import scaling_profile

    measured_s = throughput.steady_state()["steady_step_time_ms"] / 1e3
    profile = scaling_profile.profile_run(model, plan, task, batches, measured_s)
    if metrics_log is not None:
        scaling_profile.report(profile, run_dir, metrics_log.log, plan.epochs - 1)
