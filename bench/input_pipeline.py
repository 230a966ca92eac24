"""Input pipeline: real datasets versus `synthetic_images` of the same shape.

    .venv/bin/python bench/input_pipeline.py [--repeats 5] [--datasets digits,image_folder,imagenet]
        [--image-model "model=resnet18 model.stem=small"]

For each dataset, `tntrun` (2 ranks, the default layout) trains the same
model with the same global batch twice: on the real data and on
`dataset=synthetic_images` with the same input shape, classes and sample
counts, so only where samples come from differs. Image sets are generated
once into a temporary folder (deterministic). Steady-state throughput (the
run's `steady_samples_per_s`: epochs after the first); real and synthetic
runs interleaved in pairs (alternating which goes first); ratio = median over
pairs of real / synthetic. Target: >= 0.97.

The machine is shared: each run first waits (at most 10 s) for other
processes to go quiet and is repeated (`--retries`) when they took more than
0.25 cores meanwhile; pairs still disturbed are left out of the table
(`pairs` says how many were used; `pair ratios` gives their range). A second
table shows each training stream's CPU cost alone (`bench/pipeline_cost.py`:
rank 0's stream, no model, 1 TensorFlow thread) and its time to the first
batch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from machine_load import run, wait_for_quiet  # noqa: E402
from pipeline_data import write_image_folder, write_imagenet_records  # noqa: E402
from runs import finished_run, tntrun_command  # noqa: E402

GLOBAL_BATCH = 64
IMAGE_SIZE, CLASSES = 64, 10
MAX_FOREIGN = 0.25  # cores other processes may take without a run counting as disturbed


@dataclass(frozen=True)
class Case:
    """One dataset: its overrides, the model, epochs and the matching synthetic set."""

    real: tuple[str, ...]
    model: tuple[str, ...]
    epochs: int
    shape: tuple[int, int]  # synthetic image_size, channels
    counts: tuple[int, int]  # training and validation samples

    def synthetic(self) -> tuple[str, ...]:
        (size, channels), (train, val) = self.shape, self.counts
        return (
            "dataset=synthetic_images",
            f"dataset.image_size={size}",
            f"dataset.channels={channels}",
            f"dataset.num_classes={CLASSES}",
            f"dataset.num_train={train}",
            f"dataset.num_val={val}",
        )


def cases(data: Path, names: list[str], image_model: tuple[str, ...]) -> dict[str, Case]:
    """The benchmark's datasets, generating the image sets the chosen ones need; the
    image datasets train ``image_model``."""
    from tntrun.datasets.digits import DigitsDataset
    from tntrun.datasets.image_folder import ImageFolderDataset
    from tntrun.datasets.imagenet import ImagenetDataset

    found: dict[str, Case] = {}
    for name in names:
        if name == "digits":
            info = DigitsDataset().info()
            # The MLP flattens its input, so 8x8x1 synthetic images equal digits' 64 features.
            found[name] = Case(
                ("dataset=digits",), ("model=mlp",), 60, (8, 1), (info.num_train, info.num_val)
            )
        elif name == "image_folder":
            folder = write_image_folder(data / "folder", CLASSES, per_class=300)
            info = ImageFolderDataset(str(folder), image_size=IMAGE_SIZE).info()
            found[name] = Case(
                (
                    "dataset=image_folder",
                    f"dataset.data_dir={folder}",
                    f"dataset.image_size={IMAGE_SIZE}",
                ),
                image_model,
                4,
                (IMAGE_SIZE, 3),
                (info.num_train, info.num_val),
            )
        elif name == "imagenet":
            records = write_imagenet_records(data / "imagenet", CLASSES, (8, 300), (2, 100))
            info = ImagenetDataset(str(records), image_size=IMAGE_SIZE).info()
            found[name] = Case(
                (
                    "dataset=imagenet",
                    f"dataset.data_dir={records}",
                    f"dataset.image_size={IMAGE_SIZE}",
                    f"dataset.num_classes={CLASSES}",
                ),
                image_model,
                4,
                (IMAGE_SIZE, 3),
                (info.num_train, info.num_val),
            )
        else:
            raise SystemExit(f"unknown dataset {name!r}: use digits, image_folder, imagenet")
    return found


def throughput(work: Path, args: tuple[str, ...], retries: int) -> tuple[float, float]:
    """(steady-state global samples/s, cores other processes took) of one `tntrun` run.

    Repeated up to ``retries`` times while others took more than ``MAX_FOREIGN`` cores.
    """
    for attempt in range(retries + 1):
        wait_for_quiet(MAX_FOREIGN, patience_s=10.0)
        done = run(tntrun_command(work, f"global_batch_size={GLOBAL_BATCH}", *args), cwd=work)
        if done.foreign_cores <= MAX_FOREIGN or attempt == retries:
            break
    client, run_id = finished_run(work, done.stdout)
    return client.get_run(run_id).data.metrics["steady_samples_per_s"], done.foreign_cores


def stream_cost(args: tuple[str, ...]) -> dict[str, float]:
    """Rank 0's input stream alone: CPU us per training sample, seconds to the first batch."""
    wait_for_quiet(MAX_FOREIGN, patience_s=10.0)
    script = Path(__file__).resolve().parent / "pipeline_cost.py"
    out = run([sys.executable, str(script), f"global_batch_size={GLOBAL_BATCH}", *args]).stdout
    return json.loads(out.splitlines()[-1])


def summary(pairs: list[dict[str, tuple[float, float]]]) -> dict[str, float]:
    """Medians (real, synthetic, pair ratio), the ratios' range and the pairs used: those
    in which no run was disturbed (all pairs when every one was)."""
    calm = [p for p in pairs if all(f <= MAX_FOREIGN for _, f in p.values())] or pairs
    real, synthetic = ([p[v][0] for p in calm] for v in ("real", "synthetic"))
    ratios = [r / s for r, s in zip(real, synthetic, strict=True)]
    return {
        "real": statistics.median(real),
        "synthetic": statistics.median(synthetic),
        "ratio": statistics.median(ratios),
        "low": min(ratios),
        "high": max(ratios),
        "used": len(calm),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--datasets", default="digits,image_folder,imagenet")
    parser.add_argument(
        "--image-model",
        default="model=cnn",
        help="the image datasets' model, as overrides separated by spaces",
    )
    parser.add_argument(
        "--epochs-scale",
        type=float,
        default=1.0,
        help="multiply every dataset's epoch count (at least 2)",
    )
    parser.add_argument(
        "--retries",
        type=int,
        default=1,
        help="repeat a run disturbed by other processes (at most this often)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="DATASET:KEY=VALUE",
        help="an extra override for one dataset's real runs",
    )
    args = parser.parse_args()
    log = sys.stderr
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)  # one MLflow store for all runs, as in everyday use
        started = time.perf_counter()
        chosen = cases(work / "data", args.datasets.split(","), tuple(args.image_model.split()))
        print(f"generated data in {time.perf_counter() - started:.0f} s", file=log)
        extra = [item.split(":", 1) for item in args.override]
        variants = {
            name: {
                "real": (*case.real, *(o for d, o in extra if d == name)),
                "synthetic": case.synthetic(),
            }
            for name, case in chosen.items()
        }
        cost = {
            name: {v: stream_cost(o) for v, o in pair.items()} for name, pair in variants.items()
        }
        pairs: dict[str, list[dict[str, tuple[float, float]]]] = {name: [] for name in chosen}
        for i in range(args.repeats):
            for name, case in chosen.items():
                epochs = max(2, round(case.epochs * args.epochs_scale))
                common = (
                    *case.model,
                    f"train.epochs={epochs}",
                    f"eval.every_epochs={epochs}",
                )
                pair = {}
                for variant in sorted(variants[name], reverse=bool(i % 2)):
                    speed, foreign = throughput(
                        work, (*common, *variants[name][variant]), args.retries
                    )
                    pair[variant] = (speed, foreign)
                    print(
                        f"{name} {variant} #{i}: {speed:.0f} samples/s, others {foreign:.2f} "
                        f"cores ({time.perf_counter() - started:.0f} s)",
                        file=log,
                    )
                pairs[name].append(pair)
    print(
        "| dataset | model | real samples/s | synthetic samples/s | ratio | pair ratios | pairs |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, found in pairs.items():
        m = summary(found)
        model = chosen[name].model[0].split("=")[1]
        print(
            f"| {name} | {model} | {m['real']:.0f} | {m['synthetic']:.0f} | {m['ratio']:.3f} "
            f"| {m['low']:.2f}-{m['high']:.2f} | {m['used']} of {len(found)} |"
        )
    print(
        "\n| dataset | stream CPU us/sample: real | synthetic "
        "| s to first batch: real | synthetic |"
    )
    print("|---|---|---|---|---|")
    for name, pair in cost.items():
        real, synthetic = pair["real"], pair["synthetic"]
        print(
            f"| {name} | {real['cpu_us_per_sample']:.0f} | {synthetic['cpu_us_per_sample']:.0f} "
            f"| {real['build_s']:.2f} | {synthetic['build_s']:.2f} |"
        )


if __name__ == "__main__":
    main()
