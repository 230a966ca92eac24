"""Sweep reports: throughput, step time and scaling efficiency versus world size.

``tntrun report <sweep dir | parent run id>`` (also written automatically at
the end of every ``tntrun -m`` sweep) reads the sweep's child runs from MLflow
and writes ``report.csv``, ``report.md`` and PNG plots, logged to the parent
run under ``report/``. Scaling efficiency of a child with world size N is
T_N / ((N / N_0) x T_0), with T the steady-state throughput (samples/s) and
N_0, T_0 those of the sweep's smallest world size (the median when several
children share it). Jobs that differ only by ``seed`` also get their mean and spread
per configuration (``seeds.md``, :mod:`~tntrun.tracking.seed_groups`). A sweep over the
global batch also gets each run's measured steps to a common training loss next to the
gradient noise scale's prediction (:mod:`~tntrun.tracking.batch_sweep`).
"""

from __future__ import annotations

import argparse
import csv
import statistics
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tntrun.tracking import RunSummary, Tracker, TrackerSettings, children_of, tracker_for
from tntrun.tracking.batch_sweep import steps_to_loss
from tntrun.tracking.seed_groups import seed_groups, seeds_markdown
from tntrun.tracking.sweep_parent import parent_run_id

COLUMNS = (
    "run_name",
    "run_id",
    "status",
    "world_size",
    "nodes",
    "ranks_per_node",
    "global_batch_size",
    "steady_samples_per_s",
    "steady_step_time_ms",
    "step_time_p50_ms",
    "step_time_p95_ms",
    "epoch_time_s",
    "scaling_efficiency",
    "val_accuracy",
    "val_loss",
    "gradient_noise_scale",
    "steps_to_target",  # optimizer steps to the sweep's common training loss (batch_sweep)
    "predicted_steps",  # the same, predicted from the gradient noise scale
)


def rows_of(children: Iterable[RunSummary]) -> list[dict[str, Any]]:
    """One row per child run, sorted by world size, with scaling efficiency filled in."""
    rows = []
    for run in children:
        params, metrics = run.params, run.metrics
        row: dict[str, Any] = {
            "run_name": run.name,
            "run_id": run.run_id,
            "status": run.status,
            "world_size": int(params.get("plan.world_size", 0)),
            "nodes": params.get("nodes"),
            "ranks_per_node": params.get("plan.ranks_per_node"),
            "global_batch_size": params.get("plan.global_batch_size"),
        }
        for key in COLUMNS[7:]:
            if key in metrics:
                row[key] = metrics[key]
        rows.append(row)
    rows.sort(key=lambda r: (r["world_size"], r["run_name"] or ""))
    measured = [r for r in rows if r.get("steady_samples_per_s") and r["world_size"]]
    if measured:
        base_size = min(r["world_size"] for r in measured)
        base = statistics.median(
            r["steady_samples_per_s"] for r in measured if r["world_size"] == base_size
        )
        for r in measured:
            r["scaling_efficiency"] = r["steady_samples_per_s"] / (
                r["world_size"] / base_size * base
            )
    return rows


def add_steps_to_loss(rows: list[dict[str, Any]], children: Sequence[RunSummary]) -> str:
    """Fill in each row's measured and predicted steps to the sweep's common training loss;
    the report's section on them (empty: not a sweep over the global batch)."""
    steps = steps_to_loss(children)
    if steps is None:
        return ""
    for row in rows:
        measured, predicted = steps.steps.get(row["run_id"], (None, None))
        row["steps_to_target"], row["predicted_steps"] = measured, predicted
    return f"\n## Steps to a common training loss\n\n{steps.note()}\n"


def _markdown(rows: list[dict[str, Any]]) -> str:
    def cell(value: Any) -> str:
        return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(r.get(c)) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def _plot(rows: list[dict[str, Any]], key: str, label: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = [(r["world_size"], r[key]) for r in rows if key in r]
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=100)
    ax.plot([p[0] for p in points], [p[1] for p in points], "o-")
    if key == "scaling_efficiency":
        ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
        ax.set_ylim(0, 1.1)
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel(label)
    ax.set_xticks(sorted({p[0] for p in points}))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_steps_to_loss(rows: list[dict[str, Any]], path: Path) -> Path:
    """Measured and predicted steps to the common loss against the batch (log-log)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = sorted(
        ((int(r["global_batch_size"]), r) for r in rows if r.get("steps_to_target") is not None),
        key=lambda pair: pair[0],
    )
    fig, ax = plt.subplots(figsize=(5, 3.5), dpi=100)
    batches = [batch for batch, _ in measured]
    ax.plot(batches, [r["steps_to_target"] for _, r in measured], "o", label="measured")
    predicted = [(b, r["predicted_steps"]) for b, r in measured if r.get("predicted_steps")]
    if predicted:
        ax.plot(*zip(*predicted, strict=True), "-", label="S_min (1 + B_noise / B)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("global batch (samples)")
    ax.set_ylabel("optimizer steps to the common loss")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_report(tracker: Tracker, children: Sequence[RunSummary], out_dir: Path) -> Path:
    """Write the table and plots for ``children`` and log them to the parent run."""
    out_dir.mkdir(parents=True, exist_ok=True)
    rows = rows_of(children)
    steps_note = add_steps_to_loss(rows, children)
    with (out_dir / "report.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    markdown = _markdown(rows) + steps_note
    groups = seed_groups(children)
    if groups:  # repeats: the mean and spread over seeds of each configuration
        (out_dir / "seeds.md").write_text(seeds_markdown(groups))
        markdown += "\n## Repeats over seeds\n\n" + seeds_markdown(groups)
    (out_dir / "report.md").write_text(markdown)
    for key, label in (
        ("steady_samples_per_s", "throughput (samples/s)"),
        ("steady_step_time_ms", "step time (ms)"),
        ("scaling_efficiency", "scaling efficiency"),
    ):
        _plot(rows, key, label, out_dir / f"{key}.png")
    if steps_note:
        plot_steps_to_loss(rows, out_dir / "steps_to_target.png")
    tracker.log_artifact(out_dir, "report")
    return out_dir


def find_parent(reference: str, uri: str | None) -> Tracker:
    """The parent run of a sweep directory (its marker file) or a parent run id, in the
    default tracker's store at ``uri``."""
    run_id = parent_run_id(Path(reference)) or reference
    tracker = tracker_for(TrackerSettings.at(uri))
    tracker.attach(run_id)
    return tracker


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tntrun report", description="Scaling report of a sweep (tntrun -m ...)."
    )
    parser.add_argument("sweep", help="sweep directory (outputs/multirun/...) or parent run id")
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow store (default: $MLFLOW_TRACKING_URI or outputs/mlflow.db)",
    )
    parser.add_argument("--out", default=None, help="output folder (default: <sweep dir>/report)")
    args = parser.parse_args(argv)
    try:
        tracker = find_parent(args.sweep, args.tracking_uri)
    except LookupError as err:
        print(f"tntrun report: {args.sweep} is neither a sweep directory nor a run ({err})")
        return 2
    children = children_of(tracker)
    if not children:
        print(f"tntrun report: run {tracker.run_id} has no child runs")
        return 2
    default = Path(args.sweep) / "report" if Path(args.sweep).is_dir() else Path("report")
    out = write_report(tracker, children, Path(args.out) if args.out else default)
    print((out / "report.md").read_text())
    print(f"tntrun report: written to {out} and logged to run {tracker.run_id}")
    return 0
