"""The run directory's file names and the ``TNTRUN_*`` variables: the driver-rank contract.

The driver writes ``config.yaml`` and ``plan.json`` (the ranks' only inputs)
into the run directory; the ranks write metrics, heartbeats, logs, checkpoints
and outputs beside them. Every module names these files through this one.
"""

from __future__ import annotations

from pathlib import Path

# Written by the driver before launch: the ranks' only inputs.
CONFIG = "config.yaml"
PLAN = "plan.json"
# The tracked run this directory belongs to (resume finds the run through it); directories
# made before tntrun named it after MLflow hold LEGACY_RUN_ID instead (read_run_id reads both).
RUN_ID = "run_id"
LEGACY_RUN_ID = "mlflow_run_id"
# What the tracking store has not received when it was unreachable at the end of a run
# (metrics offset, outputs, final status); `tntrun sync <run dir>` replays it, then deletes it.
TRACKING_PENDING = "tracking_pending.json"
# The driver's lock of the directory for the run's whole life: one run a directory
# (contract.run_lock); it names the holder (pid, host, since when) while a driver runs.
RUN_LOCK = "run.lock"
# Written while the ranks run.
DRIVER_ALIVE = "driver.alive"  # the driver's heartbeat: its ranks end when it stops
METRICS = "metrics.jsonl"  # rank 0's metrics, relayed into the run by the driver
SYSTEM_METRICS = "system"  # folder: <host>.jsonl, each host's system metrics (node_metrics.py)
HEARTBEATS = "heartbeats"  # folder: rank.<N> progress files for the stall watchdog
LOGS = "logs"  # folder: rank.<N>.log and launcher.log
RANKS_LOG = "ranks.log"  # the launcher's combined output
RESTARTS = "restarts"  # folder: attempt-<N>/ with the logs and traceback of each restarted failure
CHECKPOINTS = "checkpoints"  # folder: epoch-NNNN checkpoints, and best/ (checkpoint.monitor)
NONFINITE = "nonfinite.jsonl"  # rank 0: one line per non-finite loss (failure or rollback)
PRECISION = "precision.json"  # rank 0, at train begin: the dtypes its built model computes in
# rank 0: a callback (EarlyStopping, ...) stopped training at an epoch's end, agreed by all ranks
STOPPED_EARLY = "stopped_early.json"
# Preemption: the driver asks the ranks to stop (it got SIGTERM or faults.preempt_signals);
# rank 0 records where they stopped together and the checkpoint written there.
STOP_REQUEST = "stop.request"
PREEMPTED = "preempted.json"
# rank 0, once the run's last training step ended: no stop request can stop training now, so
# the driver lets the ranks finish (the final model saved) whatever signal comes.
TRAINED = "trained"
# Outputs.
FINAL_WEIGHTS = "final_weights.npz"
FINAL_MODEL = "model.keras"
# Rank 0's MLflow Model folders (MLflow's Keras flavour; tracking.log_model): the driver
# logs each as one of the run's logged models (not as a plain artifact).
MLFLOW_MODEL = "mlflow_model"  # the final model
MLFLOW_BEST_MODEL = "mlflow_model_best"  # the best by checkpoint.monitor (checkpoints/best)
# rank 0 (tracking.check_model_loads): whether MLFLOW_MODEL loads back and predicts as trained
MODEL_LOADS = "model_loads.json"
LOSS_SETUP = "loss_setup.txt"  # rank 0: why the loss does not fit the labels or the outputs
LR_PLOT = "lr_schedule.svg"
# A dry run beyond the console's view (planning.rank_map): the whole of what it summarises.
HOST_LIST = "hosts.txt"  # a hostfile: host slots=N, in rank order
RANK_MAP = "rank_map.txt"  # a line per rank: host, local rank, binding, GPU
LAUNCH_COMMAND = "launch_command.txt"  # the launch environment and command, unabridged
TIMELINE = "horovod_timeline.json"
AUTOTUNE_LOG = "horovod_autotune.csv"
TRANSLATIONS = "translations"
SCALING_PREDICTION = "scaling_prediction"  # folder: predict_scaling=true's outputs (rank 0)
PREDICTION_CSV = f"{SCALING_PREDICTION}/prediction.csv"  # the driver's batch advice reads it
TENSORBOARD = "tensorboard"
HYDRA = ".hydra"
# Logged to the run as artifacts when present (folders keep their name).
OUTPUT_FILES = (CONFIG, PLAN, FINAL_MODEL, TIMELINE, AUTOTUNE_LOG, LR_PLOT, PRECISION)
OUTPUT_FOLDERS = (
    (HYDRA, "hydra"),
    (LOGS, LOGS),
    (TRANSLATIONS, TRANSLATIONS),
    (SCALING_PREDICTION, SCALING_PREDICTION),
    (RESTARTS, RESTARTS),
)

# Environment the driver gives the ranks.
ENV_DRIVER_START = "TNTRUN_DRIVER_START"  # wall time the driver process started (start-up metric)
ENV_USER_PATH = "TNTRUN_USER_PATH"  # the driver's working directory: user modules import from it
ENV_PINNED = "TNTRUN_PINNED_TO_SOCKET"  # set once a rank re-executed itself under numactl
# The driver's console is a terminal: rank 0 also prints a live progress line every second,
# LIVE_PREFIX first, which the driver redraws in place and keeps out of the logs.
ENV_LIVE_PROGRESS = "TNTRUN_LIVE_PROGRESS"
LIVE_PREFIX = "tntrun-live:"
# The cluster environment whose task variables place a rank (launcher=srun: slurm), so the rank
# maps them to Horovod's before Horovod starts (tntrun.environments, rank_environment).
ENV_RANK_ENVIRONMENT = "TNTRUN_RANK_ENVIRONMENT"
# A rank's last line when it ended well (tntrun.engine.worker); the logs' reader knows it.
RANK_DONE = "done without opening the MLflow store"
# The ranks train Keras 3 on TensorFlow (tntrun.engine.data_parallel), whatever the user's
# environment says: `import keras` and `tf.keras` both give it.
RANK_KERAS = {"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"}


def read_run_id(run_dir: Path) -> str | None:
    """The id of the tracked run a run directory belongs to (None: it names none)."""
    for name in (RUN_ID, LEGACY_RUN_ID):
        path = run_dir / name
        if path.is_file():
            return path.read_text().strip()
    return None


def traceback_file(rank: int) -> str:
    return f"traceback_rank_{rank}.txt"
