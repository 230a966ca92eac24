"""Run under ``horovodrun -np 2``: the weight-sync guard passes in-sync ranks and
stops ranks whose weights drifted apart (what an update that bypasses the averaging, or
Horovod's Keras layer under Keras 3, silently causes)."""

import os
import sys

os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})

import horovod.tensorflow as hvd  # noqa: E402
import keras  # noqa: E402

from tntrun.engine.weight_sync import WeightSyncGuard  # noqa: E402

hvd.init()
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
hvd.broadcast_variables([v.value for v in model.variables], root_rank=0)
guard = WeightSyncGuard(every_epochs=1)
guard.set_model(model)
guard.on_epoch_end(0)  # in sync: no error
print(f"rank {hvd.rank()}: in-sync check passed, spread {guard.final_spread}", flush=True)

model.layers[-1].bias.assign_add([hvd.rank() * 1e-3] * 3)  # rank 1 drifts
try:
    guard.on_epoch_end(1)
except RuntimeError as err:
    print(f"rank {hvd.rank()}: guard fired: {err}", flush=True)
    sys.exit(0)
print(f"rank {hvd.rank()}: guard did not fire", flush=True)
sys.exit(1)
