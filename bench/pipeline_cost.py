"""CPU cost of one rank's training input stream alone (no model), as JSON.

    .venv/bin/python bench/pipeline_cost.py [--epochs 5] [--size 2] OVERRIDE...

Composes tntrun's config with the overrides, builds rank 0's training stream
the way the engine does (automatic or the dataset's own distribution) with
TensorFlow's thread pools at 1 thread, as for 2 ranks on 2 cores, and reads
it for ``epochs`` epochs after the first (which pays for building and
caching). Prints the process CPU time per training sample of the cheapest
epoch (the machine is shared) and the time to the first batch (building the
stream, decoding a cache).
"""

from __future__ import annotations

import argparse
import json
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--size", type=int, default=2, help="ranks (the stream is rank 0's)")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()

    import tensorflow as tf
    from hydra import compose, initialize_config_module

    from tntrun.config.zoo import build_dataset, distributes_automatically
    from tntrun.engine.data import distribute_train

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    with initialize_config_module(config_module="tntrun.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=args.overrides)
    built = time.perf_counter()
    dataset = build_dataset(cfg.dataset)
    info = dataset.info()
    micro = int(cfg.global_batch_size) // args.size
    steps = info.num_train // (micro * args.size)
    if distributes_automatically(cfg.dataset):
        stream = distribute_train(
            dataset.load()[0],
            num_samples=info.num_train,
            micro_batch=micro,
            steps_per_epoch=steps,
            rank=0,
            size=args.size,
            seed=int(cfg.seed),
            first_epoch=0,
            epochs=args.epochs + 1,
        )
    else:
        train, _ = dataset.load_for_rank(
            rank=0, size=args.size, micro_batch=micro, val_micro_batch=micro, seed=int(cfg.seed)
        )
        stream = train.repeat()
    batches = iter(stream)
    next(batches)
    built = time.perf_counter() - built  # building the stream (decoding a cache) + 1 batch
    for _ in range(steps - 1):  # the rest of the first epoch: page cache, autotuning
        next(batches)
    cpu = []  # per epoch: on a shared machine the least disturbed epoch is the cost
    for _ in range(args.epochs):
        start = time.process_time()
        for _ in range(steps):
            next(batches)
        cpu.append((time.process_time() - start) * 1e6 / (steps * micro))
    print(json.dumps({"cpu_us_per_sample": min(cpu), "build_s": built}))


if __name__ == "__main__":
    main()
