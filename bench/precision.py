"""Step time of ``train.precision`` and ``train.jit_compile`` on this machine, against float32.

    .venv/bin/python bench/precision.py [--repeats 3] [--models cnn,resnet18]
                                        [--variants "float32,mixed_bfloat16,..."]

Every model trains on 2 ranks (horovodrun, Gloo, localhost, 1 thread each) in
each variant: float32, mixed_bfloat16, mixed_float16, and each of them with
XLA (jit_compile). The variants are interleaved: a round runs each once, in a
rotated order, and there are ``repeats`` rounds. Per run:
``steady_step_time_ms`` (wall time per step over the epochs after the first,
so tracing and XLA compilation are left out), final ``val_accuracy``, the
matmul peak in the variant's compute dtype and ``mfu``. Reported: medians
over rounds, and the median over rounds of each run's step time divided by
the float32 run's of the same round. Each run first waits for the machine to
be quiet and records the cores other processes took meanwhile.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from machine_load import run, wait_for_quiet
from runs import finished_run, tntrun_command

MAX_FOREIGN = 0.3  # cores other processes may take during a run before it is retried
VARIANTS = {
    "float32": (),
    "mixed_bfloat16": ("train.precision=mixed_bfloat16",),
    "mixed_float16": ("train.precision=mixed_float16",),
    "float32 + XLA": ("train.jit_compile=true",),
    "mixed_bfloat16 + XLA": ("train.precision=mixed_bfloat16", "train.jit_compile=true"),
    "mixed_float16 + XLA": ("train.precision=mixed_float16", "train.jit_compile=true"),
}
MODELS = {
    # LeNet-style CNN on 8x8 digits, global batch 64: 22 steps per epoch.
    "cnn": ("model=cnn", "train.epochs=4"),
    # ResNet-18 (3x3 stem) on 16x16 random images, global batch 64: 8 steps per epoch.
    "resnet18": (
        "model=resnet18",
        "model.stem=small",
        "dataset=synthetic_images",
        "dataset.image_size=16",
        "dataset.num_train=512",
        "dataset.num_val=128",
        "train.epochs=3",
    ),
}


def measure(work: Path, args: tuple[str, ...], retries: int = 2) -> dict[str, float]:
    """One run's metrics, retried while other processes took more than MAX_FOREIGN cores."""
    for attempt in range(retries + 1):
        wait_for_quiet(MAX_FOREIGN, patience_s=30.0)
        done = run(tntrun_command(work, *args), cwd=work)
        if done.foreign_cores <= MAX_FOREIGN or attempt == retries:
            break
    client, run_id = finished_run(work, done.stdout)
    return {**client.get_run(run_id).data.metrics, "foreign_cores": done.foreign_cores}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--variants", default=",".join(VARIANTS), help="float32 is always run")
    args = parser.parse_args()
    names = ["float32", *(v for v in args.variants.split(",") if v != "float32")]
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for model in args.models.split(","):
            rounds: list[dict[str, dict[str, float]]] = []
            for i in range(args.repeats):
                order = names[i % len(names) :] + names[: i % len(names)]
                found = {}
                for name in order:
                    found[name] = measure(work, (*MODELS[model], *VARIANTS[name]))
                    m = found[name]
                    print(
                        f"{model} round {i + 1} {name}: {m['steady_step_time_ms']:.1f} ms/step,"
                        f" val_accuracy {m['val_accuracy']:.4f}, others "
                        f"{m['foreign_cores']:.2f} cores",
                        flush=True,
                    )
                rounds.append(found)
            print(f"\n{model}, {args.repeats} interleaved rounds (medians):\n")
            print(
                "| variant | step ms | step time / float32 | val_accuracy | peak GFLOP/s "
                "(compute dtype) | mfu | others' cores (max) |"
            )
            print("|---|---|---|---|---|---|---|")
            for name in names:
                runs = [r[name] for r in rounds]
                ratio = statistics.median(
                    r[name]["steady_step_time_ms"] / r["float32"]["steady_step_time_ms"]
                    for r in rounds
                )

                def med(key: str, runs=runs) -> float:
                    return statistics.median(r.get(key, float("nan")) for r in runs)

                print(
                    f"| {name} | {med('steady_step_time_ms'):.1f} | {ratio:.2f} | "
                    f"{med('val_accuracy'):.4f} | {med('peak_flops_per_s') / 1e9:.0f} | "
                    f"{med('mfu'):.3f} | {max(r['foreign_cores'] for r in runs):.2f} |"
                )
            print(flush=True)


if __name__ == "__main__":
    main()
