"""A finished run's batch advice, read from its run directory: the final gradient noise
scale (``metrics.jsonl``), the plan (``plan.json``) and the scaling prediction.

Read from files, not from the store, so the driver's end-of-run line, the MLflow tag
and ``tntrun sync`` after an outage all say the same (the arithmetic:
:mod:`tntrun.planning.batch_advice`).
"""

from __future__ import annotations

from pathlib import Path

from tntrun.contract import run_files
from tntrun.contract.metrics import last_values
from tntrun.contract.run_status import RunStatus
from tntrun.planning.batch_advice import BatchAdvice, NoAdvice, advise, final_noise_scale
from tntrun.planning.plan import Plan
from tntrun.planning.scaling_model import parse_csv

ADVICE_TAG = "batch_advice"


def run_advice(run_dir: Path, plan: Plan) -> BatchAdvice | NoAdvice:
    """The advice of the run of ``plan`` in ``run_dir``: its last logged noise scale, and the
    time to its loss per node count where ``predict_scaling=true`` wrote a prediction."""
    noise_scale = final_noise_scale(last_values(run_dir / run_files.METRICS))
    return advise(plan, noise_scale, predicted_step_times(run_dir))


def predicted_step_times(run_dir: Path) -> list[tuple[int, float]]:
    """(ranks, seconds per training step) of the run's scaling prediction (none: empty)."""
    path = run_dir / run_files.PREDICTION_CSV
    if not path.is_file():
        return []
    return [(row.world_size, row.step_s) for row in parse_csv(path.read_text())]


def advice_lines(run_dir: Path, status: RunStatus, plan: Plan | None = None) -> list[str]:
    """The advice of a FINISHED run (a run that failed or was stopped gets none), ``plan``
    read from ``run_dir`` when not given; none for a directory without a plan."""
    if status != RunStatus.FINISHED:
        return []
    if plan is None:
        plan_file = run_dir / run_files.PLAN
        if not plan_file.is_file():
            return []
        plan = Plan.load(plan_file)
    return run_advice(run_dir, plan).lines()


def advice_tags(run_dir: Path, status: RunStatus) -> dict[str, str]:
    """The ``batch_advice`` tag: the advice's lines, as the console shows them."""
    lines = advice_lines(run_dir, status)
    return {ADVICE_TAG: "\n".join(lines)} if lines else {}
