"""Validate the scaling predictor: predicted versus measured 2-rank step time.

    .venv/bin/python bench/scaling_prediction.py [--repeats 5] [--epochs N]

For each workload, `tntrun ... predict_scaling=true` trains on 2 ranks (Gloo,
localhost, 1 thread each), then profiles compute and allreduce on the same
ranks and predicts the step time on 1..1024 ranks. The run logs its measured
steady step time and the prediction's error for 2 ranks (`prediction_error`).
Workloads (mlp on digits, cnn and resnet18 with the small stem on synthetic
32x32 images; `--workloads` picks some) are interleaved `repeats` times; the table shows medians.
Each workload trains its own number of epochs (`--epochs` sets one for all): the
measured step time is the mean over the epochs after the first, so a fast step
needs more epochs to be measured as steadily as the profile measures it.
Target: |error| <= 10 %. "apart" is the model without its interaction term
(compute and allreduce measured separately), i.e. before calibrating with the
distributed steps timed in the profile.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from runs import run_tntrun

WORKLOADS = {  # overrides, epochs
    "mlp": ((), 20),  # the default experiment: MLP on digits (22 steps per epoch)
    "cnn": (("model=cnn", "dataset=synthetic_images", "optimizer=sgd"), 3),
    "resnet18": (
        (
            "model=resnet18",
            "model.stem=small",
            "dataset=synthetic_images",
            "optimizer=sgd",
            "dataset.num_train=1024",
        ),
        3,
    ),
}


def one_run(work: Path, args: tuple[str, ...], epochs: int) -> dict[str, float]:
    client, run_id = run_tntrun(work, *args, "predict_scaling=true", f"train.epochs={epochs}")
    metrics = client.get_run(run_id).data.metrics
    history = client.get_metric_history(run_id, "predicted_efficiency")
    efficiency = {m.step: m.value for m in history}
    predicted = metrics["steady_step_time_ms"] * (1 + metrics["prediction_error"])
    return {
        "measured_ms": metrics["steady_step_time_ms"],
        "predicted_ms": predicted,
        "error": metrics["prediction_error"],
        "apart_error": (predicted - metrics["interaction_ms"]) / metrics["steady_step_time_ms"] - 1,
        "interaction_ms": metrics["interaction_ms"],
        "compute_ms": metrics["compute_step_time_ms"],
        "efficiency_64": efficiency[64],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=None, help="default: per workload")
    parser.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    args = parser.parse_args()
    found: dict[str, list[dict[str, float]]] = {name: [] for name in args.workloads}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for _ in range(args.repeats):
            for name in args.workloads:
                overrides, epochs = WORKLOADS[name]
                found[name].append(one_run(work, overrides, args.epochs or epochs))
    print(
        "| workload | measured 2-rank step ms | predicted ms | error | errors | error apart "
        "| interaction ms | compute ms | predicted efficiency at 64 ranks | n |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, rows in found.items():
        med = {key: statistics.median(r[key] for r in rows) for key in rows[0]}
        errors = sorted(r["error"] for r in rows)
        print(
            f"| {name} | {med['measured_ms']:.2f} | {med['predicted_ms']:.2f} | "
            f"{med['error']:+.1%} | {errors[0]:+.0%}..{errors[-1]:+.0%} | "
            f"{med['apart_error']:+.1%} | {med['interaction_ms']:+.2f} | "
            f"{med['compute_ms']:.2f} | {med['efficiency_64']:.3f} | {len(rows)} |"
        )


if __name__ == "__main__":
    main()
