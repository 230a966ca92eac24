"""What a checkpoint's checksums cost on a realistic checkpoint: ResNet-50 (ImageNet head)
with SGD momentum, written as a run writes it.

    .venv/bin/python bench/checkpoint_checksum.py [--repeats 5]

Builds tntrun's ResNet-50 and an SGD optimizer with momentum (one slot per weight), writes
their state with TensorFlow as rank 0 does (``state_checkpoint(...).write``) into a scratch
folder, then times, interleaved and ``repeats`` times each: TensorFlow's write of the
state; the checksums rank 0 adds at publication (:func:`folder_checksums`, reading back
what it just wrote, so from the page cache); the driver's check before it resumes
(:func:`damage`: meta.json and every file's checksum; page cache warm, as right after a
preemption on the same host). Medians; the state's size and the checksums' throughput.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from tntrun.contract.checkpoint_integrity import damage
from tntrun.contract.checkpoints import META, STATE_PREFIX, folder_checksums


def resnet50_state():
    """ResNet-50's model and optimizer state, the optimizer's slots built."""
    import keras

    from tntrun.engine.precision import state_checkpoint
    from tntrun.models.resnet import build_resnet

    model = build_resnet((224, 224, 3), 1000, depth=50)
    optimizer = keras.optimizers.SGD(learning_rate=0.1, momentum=0.9)
    optimizer.build(model.trainable_variables)
    return state_checkpoint(model, optimizer), model.count_params()


def timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    state, params = resnet50_state()
    times: dict[str, list[float]] = {"write": [], "checksums": [], "verify": []}
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "epoch-0001"
        folder.mkdir()
        for _ in range(args.repeats):
            times["write"].append(timed(lambda: state.write(str(folder / STATE_PREFIX))))
            start = time.perf_counter()
            sums = folder_checksums(folder)
            times["checksums"].append(time.perf_counter() - start)
            meta = {"epoch": 1, "step": 1, "world_size": 1, "global_batch_size": 256}
            meta |= {"config_hash": "x", "batch": 0, "checksums": sums}
            (folder / META).write_text(json.dumps(meta))
            times["verify"].append(timed(lambda: assert_intact(folder)))
        size = sum(p.stat().st_size for p in folder.iterdir() if p.name != META)
    mib = size / 2**20
    print(f"ResNet-50 + SGD momentum: {params / 1e6:.1f} M parameters, state {mib:.0f} MiB")
    print("| step | median s | MiB/s | n |")
    print("|---|---|---|---|")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"| {name} | {median:.3f} | {mib / median:.0f} | {len(values)} |")


def assert_intact(folder: Path) -> None:
    found = damage(folder)
    assert found is None, found


if __name__ == "__main__":
    main()
