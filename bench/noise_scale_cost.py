"""What measuring the gradient noise scale costs: the default run and the cnn with
``train.gradient_noise_scale`` on and off, interleaved.

    .venv/bin/python bench/noise_scale_cost.py [--repeats 3] [--cnn-epochs 5]

Per repeat (the order of on and off alternates) and setting, two runs on 2 ranks
(horovodrun, Gloo, localhost):

- the default experiment as a user runs it (``tntrun``: MLP on digits, 20 epochs, nothing
  else turned off): wall time of the ``tntrun`` process and the MLP's steady step time
  (``steady_step_time_ms``: wall per step, epochs after the first);
- ``tntrun model=cnn`` quiet (no system metrics, checkpoints or step metrics), for the
  cnn's steady step time.

Medians per setting, the ratio on / off, and each setting's spread (max - min over repeats)
to judge whether a difference is measurable on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

from runs import BIN, QUIET, finished_run, timed_tntrun

KEYS = {"wall_s": "default run wall s", "mlp_step_ms": "mlp step ms", "cnn_step_ms": "cnn step ms"}
SETTINGS = {"on": "train.gradient_noise_scale=true", "off": "train.gradient_noise_scale=false"}


def tntrun(work: Path, *overrides: str) -> tuple[float, dict[str, float]]:
    """Wall seconds of one ``tntrun`` (outputs and store in ``work``), its run's metrics."""
    wall, _, out = timed_tntrun(BIN / "tntrun", work, *overrides)
    client, run_id = finished_run(work, out)
    return wall, client.get_run(run_id).data.metrics


def measure(work: Path, setting: str, cnn_epochs: int) -> dict[str, float]:
    wall, metrics = tntrun(work, setting)
    if setting == SETTINGS["on"] and "gradient_noise_scale" not in metrics:
        raise RuntimeError("the run with the noise scale on logged no gradient_noise_scale")
    _, cnn = tntrun(work, "model=cnn", f"train.epochs={cnn_epochs}", setting, *QUIET)
    return {
        "wall_s": wall,
        "mlp_step_ms": metrics["steady_step_time_ms"],
        "cnn_step_ms": cnn["steady_step_time_ms"],
    }


def report(results: dict[str, list[dict[str, float]]]) -> None:
    print("| train.gradient_noise_scale | " + " | ".join(KEYS.values()) + " | n |")
    print(f"|---|{'---|' * len(KEYS)}---|")
    medians = {
        name: {key: statistics.median(row[key] for row in rows) for key in KEYS}
        for name, rows in results.items()
    }
    for name, rows in results.items():
        spread = {k: max(r[k] for r in rows) - min(r[k] for r in rows) for k in KEYS}
        cells = " | ".join(f"{medians[name][k]:.3f} (spread {spread[k]:.3f})" for k in KEYS)
        print(f"| {name} | {cells} | {len(rows)} |")
    ratios = ", ".join(f"{KEYS[k]} {medians['on'][k] / medians['off'][k]:.3f}" for k in KEYS)
    print(f"\non / off: {ratios}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cnn-epochs", type=int, default=5)
    args = parser.parse_args()
    names = list(SETTINGS)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(args.repeats):
            for name in names[repeat % 2 :] + names[: repeat % 2]:
                results[name].append(measure(Path(tmp), SETTINGS[name], args.cnn_epochs))
                print(name, repeat, results[name][-1], file=sys.stderr, flush=True)
    report(results)


if __name__ == "__main__":
    main()
