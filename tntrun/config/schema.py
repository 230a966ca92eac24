"""Typed schema of tntrun's config, registered in Hydra's ConfigStore.

Every YAML under ``conf/`` names its schema in its defaults list (for example
``- /schema/optimizer/adam@_here_``), so a misspelt key or a value of the wrong
type fails at composition with Hydra's message naming the key. Model and
dataset schemas live next to their code: each zoo module may declare
``SCHEMAS = {"<config name>": <dataclass>}``, stored as ``schema/model/<name>``
or ``schema/dataset/<name>``.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from tntrun.environments.launchers import HOROVODRUN


class LrScaling(Enum):
    linear = "linear"
    sqrt = "sqrt"
    none = "none"


class ScheduleName(Enum):
    constant = "constant"
    warmup_piecewise = "warmup_piecewise"
    warmup_cosine = "warmup_cosine"
    warmup_poly = "warmup_poly"
    inverse_sqrt = "inverse_sqrt"


class OnNonFinite(Enum):
    fail = "fail"
    rollback = "rollback"


class MonitorMode(Enum):
    auto = "auto"
    max = "max"
    min = "min"


class Compression(Enum):
    none = "none"
    fp16 = "fp16"


class Precision(Enum):
    float32 = "float32"
    mixed_bfloat16 = "mixed_bfloat16"
    mixed_float16 = "mixed_float16"


@dataclass
class OptimizerBase:
    """What every optimizer states: tntrun's name for it, the learning rate and the batch
    it is right at, and the arguments every Keras 3 optimizer takes (Keras' defaults).
    Keras' ``gradient_accumulation_steps`` and ``loss_scale_factor`` are left out: tntrun
    accumulates (``horovod.backward_passes_per_step``) and scales the loss (``train.precision``)
    itself, over the ranks."""

    name: str = MISSING
    # The learning rate that is right at base_batch_size; scaled to the real global batch
    # (schedule.scaling). The two are one measurement, so the optimizer's YAML states both.
    base_lr: float = MISSING
    base_batch_size: int = MISSING
    weight_decay: float | None = None
    clipnorm: float | None = None
    clipvalue: float | None = None
    global_clipnorm: float | None = None
    use_ema: bool = False
    ema_momentum: float = 0.99
    ema_overwrite_frequency: int | None = None


# One dataclass per Keras 3 optimizer (keras.optimizers.<Class>), its own arguments with
# Keras' defaults; tests/config/test_optimizers.py holds them to Keras' signatures.
@dataclass
class AdamOptimizer(OptimizerBase):
    name: str = "adam"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7
    amsgrad: bool = False


@dataclass
class AdamWOptimizer(AdamOptimizer):
    name: str = "adamw"
    weight_decay: float | None = 0.004


@dataclass
class AdamaxOptimizer(OptimizerBase):
    name: str = "adamax"
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7


@dataclass
class NadamOptimizer(AdamaxOptimizer):
    name: str = "nadam"


@dataclass
class LambOptimizer(AdamaxOptimizer):
    name: str = "lamb"


@dataclass
class SgdOptimizer(OptimizerBase):
    name: str = "sgd"
    momentum: float = 0.0
    nesterov: bool = False


@dataclass
class LarsOptimizer(OptimizerBase):
    """tntrun's LARS (``tntrun.engine.lars.Lars``; Keras has none): You et al. 2017's trust
    coefficient, momentum and weight decay (inside the trust ratio) as its defaults."""

    name: str = "lars"
    momentum: float = 0.9
    trust_coefficient: float = 0.001
    epsilon: float = 0.0
    # Biases and normalisation scales/offsets (rank <= 1) train by plain momentum SGD.
    exclude_bias_and_norm: bool = True
    weight_decay: float | None = 0.0


@dataclass
class RmspropOptimizer(OptimizerBase):
    name: str = "rmsprop"
    rho: float = 0.9
    momentum: float = 0.0
    epsilon: float = 1e-7
    centered: bool = False


@dataclass
class AdagradOptimizer(OptimizerBase):
    name: str = "adagrad"
    initial_accumulator_value: float = 0.1
    epsilon: float = 1e-7


@dataclass
class AdadeltaOptimizer(OptimizerBase):
    name: str = "adadelta"
    rho: float = 0.95
    epsilon: float = 1e-7


@dataclass
class LionOptimizer(OptimizerBase):
    name: str = "lion"
    beta_1: float = 0.9
    beta_2: float = 0.99


@dataclass
class AdafactorOptimizer(OptimizerBase):
    name: str = "adafactor"
    beta_2_decay: float = -0.8
    epsilon_1: float = 1e-30
    epsilon_2: float = 1e-3
    clip_threshold: float = 1.0
    relative_step: bool = True


@dataclass
class FtrlOptimizer(OptimizerBase):
    name: str = "ftrl"
    learning_rate_power: float = -0.5
    initial_accumulator_value: float = 0.1
    l1_regularization_strength: float = 0.0
    l2_regularization_strength: float = 0.0
    l2_shrinkage_regularization_strength: float = 0.0
    beta: float = 0.0


# tntrun's name -> the keras.optimizers class it builds (the engine's table), and its schema.
OPTIMIZER_SCHEMAS: dict[str, type[OptimizerBase]] = {
    "adam": AdamOptimizer,
    "adamw": AdamWOptimizer,
    "adamax": AdamaxOptimizer,
    "nadam": NadamOptimizer,
    "lamb": LambOptimizer,
    "sgd": SgdOptimizer,
    "lars": LarsOptimizer,
    "rmsprop": RmspropOptimizer,
    "adagrad": AdagradOptimizer,
    "adadelta": AdadeltaOptimizer,
    "lion": LionOptimizer,
    "adafactor": AdafactorOptimizer,
    "ftrl": FtrlOptimizer,
}
# The ones that adapt a step per weight: square-root LR scaling is the usual rule for them
# (SGD with momentum is the one the linear rule of Goyal et al. was shown for; LARS is SGD
# with a trust ratio per layer, scaled linearly by You et al.).
ADAPTIVE_OPTIMIZERS = frozenset(OPTIMIZER_SCHEMAS) - {"sgd", "lars"}
# The layer-wise adaptive ones (a trust ratio per layer): what large batches train with.
LAYER_WISE_OPTIMIZERS = frozenset({"lars", "lamb"})


@dataclass
class ScheduleConfig:
    # Each schedule option names itself (conf/schedule/<name>.yaml).
    name: ScheduleName = MISSING
    # How base_lr follows the global batch: linear, sqrt or none.
    scaling: LrScaling = LrScaling.linear
    # The schedule's length in epochs (null: train.epochs). A recipe pins it, so that a
    # shorter run (train.epochs=1, a smoke test) trains the first epochs of the same schedule.
    epochs: int | None = None
    warmup_epochs: float = 0.0
    # Explicit warmup in training steps; overrides warmup_epochs (inverse_sqrt's 4000).
    warmup_steps: int | None = None
    # First warmup LR (null: scaled LR / world size, Goyal et al.).
    warmup_start_lr: float | None = None
    boundaries_epochs: list[float] = field(default_factory=list)
    decay_rate: float = 0.1
    # warmup_cosine, warmup_poly: final LR as a fraction of the scaled LR.
    final_lr_fraction: float = 0.0
    # warmup_poly: the power of the polynomial decay after the warmup (You et al.'s LARS
    # schedule: 2).
    decay_power: float = 2.0
    # inverse_sqrt: the model width in d_model^-0.5.
    d_model: int = 512


@dataclass
class HorovodConfig:
    # Tensor fusion buffer in KB (Tarantella's unit); 0 disables fusion, null keeps Horovod's.
    fusion_threshold_kb: int | None = None
    cycle_time_ms: float | None = None
    autotune: bool = False
    # Write a Horovod timeline (timeline.json in the run directory).
    timeline: bool = False
    compression: Compression = Compression.none
    hierarchical_allreduce: bool = False
    # Gradient accumulation: micro-batches per optimizer update (counts into the batch).
    backward_passes_per_step: int = 1
    # Seconds horovodrun waits for all ranks to start (also the ssh pre-flight timeout).
    start_timeout: int = 60
    # Seconds Gloo waits for a peer, at the ranks' rendezvous and in every collective
    # (HOROVOD_GLOO_TIMEOUT_SECONDS); null keeps Horovod's 30 s. Raise it when many ranks
    # start on few cores (they must all have imported TensorFlow within it); a rank that
    # dies inside a collective is noticed by its peers only after it.
    gloo_timeout_s: int | None = None
    # Multi-host: the NIC the ranks talk over (same name on every host, e.g. ib0), and how
    # horovodrun reaches the hosts by ssh.
    network_interface: str | None = None
    ssh_port: int | None = None
    ssh_identity_file: str | None = None


DEFAULT_EXPERIMENT = "tntrun"  # tracking.experiment_name when neither it nor the environment says


@dataclass
class TrackingConfig:
    # The tracker class (tntrun.tracking.Tracker); MLflow by default.
    _target_: str = "tntrun.tracking.mlflow_tracker.MlflowTracker"
    # null: $MLFLOW_TRACKING_URI, else sqlite:///<output_root>/mlflow.db.
    uri: str | None = None
    # null: $MLFLOW_EXPERIMENT_NAME, else DEFAULT_EXPERIMENT.
    experiment_name: str | None = None
    # null: $MLFLOW_RUN_NAME (a sweep's jobs add -job<N>), else <model>-<dataset>-<ranks>x<mb>.
    run_name: str | None = None
    # Tags of the run (+tracking.tags.team=vision), and its description (MLflow's note).
    tags: dict[str, str] = field(default_factory=dict)
    description: str | None = None
    # The final metric a job returns to Hydra (what a sweeper such as Optuna optimises).
    objective: str = "val_accuracy"
    # Log loss, LR and samples/s every N training steps (0: only per epoch).
    log_every_steps: int = 20
    # MLflow's system metrics (CPU, memory, disk, network; GPU with nvidia-ml-py) of every
    # host, sampled by its local rank 0 every interval (s) and logged per node.
    system_metrics: bool = True
    system_metrics_interval_s: float = 10.0
    # When the store is unreachable as the ranks end: keep retrying delivery of metrics,
    # outputs and the final status this long (s), then record what is pending for
    # `tntrun sync <run dir>`.
    outage_grace_s: float = 60.0
    # A FINISHED run's model as an MLflow Model of the run (Keras flavour, with signature and
    # input example), and with checkpoint.monitor its best model too (docs/tracking.md).
    log_model: bool = True
    # Rank 0 loads the logged final model back (as mlflow.pyfunc.load_model would elsewhere)
    # and compares a prediction: the run's tag model_loads=true/false (docs/your-code.md).
    check_model_loads: bool = True
    # Register the run's model (the best one when monitored) as a new version of this
    # registered model; a sweep registers its best job by `objective`, once, from its parent.
    register_model: str | None = None
    # The alias the new version gets (e.g. candidate): load it as models:/NAME@ALIAS.
    register_alias: str | None = None


# The tracking keys MLflow's tracker takes; another tracker's own keys are beyond them.
TRACKING_KEYS = frozenset(f.name for f in fields(TrackingConfig))


@dataclass
class TrainConfig:
    """The training loop: how long, on which batches, with which loss and numerics, and what
    it shows while it runs."""

    epochs: int = 20
    # Drop the samples past the last full global batch, or pad it with zero-weight samples;
    # either way every rank runs the same number of steps.
    drop_remainder: bool = True
    # Label smoothing of the translation loss (Vaswani et al.: 0.1).
    label_smoothing: float = 0.0
    # A progress line inside each epoch every this many seconds (rank 0: step, samples/s,
    # loss, time left of the epoch and the run), in batch jobs and terminals; 0: none.
    progress_interval_s: float = 30.0
    # TensorBoard logs in <run_dir>/tensorboard (master rank).
    tensorboard: bool = False
    # Profile these training batches into TensorBoard, e.g. "5,8" (needs tensorboard=true).
    profile_batches: str | None = None
    # Keras dtype policy: float32, or mixed_bfloat16 / mixed_float16 (16-bit compute,
    # float32 weights and outputs; mixed_float16 adds dynamic loss scaling).
    precision: Precision = Precision.float32
    # Compile each rank's forward and backward pass with XLA.
    jit_compile: bool = False
    # Keras' class_weight, class id -> weight: each training sample's loss and weighted
    # metrics count class_weight[its class] times (classes not listed: 1.0), multiplied into
    # the dataset's own sample weights: +train.class_weight.3=5.0 or
    # train.class_weight={0:1.0,3:5.0}. Keys typed Any, as OmegaConf cannot take both forms
    # into dict[int, float] (the dotted key arrives as text); the planner checks they are ids.
    class_weight: dict[Any, float] = field(default_factory=dict)
    # Every keras.layers.BatchNormalization computes its batch mean and variance over all
    # ranks (the global batch) in training, one allreduce per layer and step; off: each
    # rank's micro-batch (its moving statistics are averaged at each epoch's end either way).
    sync_batch_norm: bool = False
    # Measure the gradient noise scale B_simple (McCandlish et al. 2018) in every run of 2
    # or more ranks, from the norms of each rank's and the averaged gradient (one scalar more
    # in the gradients' allreduce): metrics gradient_noise_scale, gns_gradient_sq, gns_trace.
    gradient_noise_scale: bool = True
    # Its smoothing: an exponential moving average over update steps of the |G|^2 and tr(Sigma)
    # estimates, each step weighted 1 - this (bias-corrected; 0: the last step alone).
    gradient_noise_ema: float = 0.95


@dataclass
class EvalConfig:
    """Validation: how often it runs, and the translation task's BLEU."""

    # Validate (and log val_* metrics) every N epochs; the last epoch always validates.
    every_epochs: int = 1
    # Translation: BLEU on this many validation sentences (0: all) with this beam (1: greedy).
    bleu_max_sentences: int = 1000
    bleu_beam_size: int = 1


@dataclass
class FaultsConfig:
    """What the run watches for and how it survives it: ranks drifting apart, stalls,
    non-finite losses, failed ranks, preemption."""

    # Compare a weight checksum across ranks after the first step and every N epochs.
    check_sync_every_epochs: int = 1
    # End the job when no rank made progress for this long (s); 0 disables the watchdog.
    stall_timeout_s: float = 600.0
    # When the rank-averaged loss turns NaN or infinite: fail the run, or roll back to the
    # last good checkpoint with the LR scaled by rollback_lr_factor (up to max_rollbacks).
    on_nonfinite: OnNonFinite = OnNonFinite.fail
    rollback_lr_factor: float = 0.5
    max_rollbacks: int = 3
    # After a rank failure (an exception, a dead or stalled rank), restart the ranks from the
    # run's newest checkpoint, in the same tracked run, up to this many times; then FAILED.
    max_restarts: int = 0
    # Preemption: on these signals (Slurm's SIGTERM; `sbatch --signal=B:USR1@60` before a time
    # limit) the ranks stop together at one step, checkpoint there and exit; the run ends
    # KILLED, tagged `preempted`, and continues with resume=auto or a requeued Slurm job.
    preempt_signals: list[str] = field(default_factory=lambda: ["SIGTERM", "SIGUSR1"])
    # How long the driver waits for that checkpoint before it stops the ranks (s).
    preempt_grace_s: float = 60.0


@dataclass
class CheckpointConfig:
    # Master rank writes model + optimizer state every N epochs (0: never) ...
    every_epochs: int = 1
    # ... once at least this long after the previous one (the last epoch always writes).
    min_interval_s: float = 60.0
    # The newest checkpoints kept in <run_dir>/checkpoints (older ones are deleted).
    keep: int = 2
    # Also keep the best checkpoint by this metric (e.g. val_accuracy; null: none) ...
    monitor: str | None = None
    # ... where best is max, min, or auto (min for names with "loss", else max).
    mode: MonitorMode = MonitorMode.auto


@dataclass
class ElasticConfig:
    # Elastic runs (off while min_nodes is null): training goes on at any node count from
    # min_nodes to max_nodes (null: the nodes it starts with) as hosts are lost or come
    # back, with the same global batch, learning-rate schedule and optimisation.
    min_nodes: int | None = None
    max_nodes: int | None = None
    # A command that prints the available hosts, host[:slots] a line (Horovod's
    # convention); null: the hosts the run starts on (hosts, hostfile, the allocation).
    discovery: str | None = None
    # Rank 0 commits (checkpoints) the state every this many training steps: the most
    # work a lost host costs.
    commit_every_steps: int = 50
    # Below min_nodes: wait this long (s) for hosts to come back, then end FAILED.
    timeout_s: float = 120.0
    # How often discovery is asked, while training, whether hosts came (back) (s).
    discovery_interval_s: float = 5.0


@dataclass
class TntrunConfig:
    """The primary config. Layout keys are top-level: ``tntrun nodes=2 gpus=4``."""

    model: Any = MISSING
    dataset: Any = MISSING
    optimizer: Any = MISSING
    # What model.compile is given, in Keras' forms: a name (loss=mse), a _target_ mapping
    # with its arguments, a mapping of output name -> either (multi-output models) or a list
    # (metrics). null: what the model builder compiled its model with, else the dataset
    # task's (sparse cross-entropy and accuracy). Metrics count sample weights
    # (Keras' weighted_metrics), so padding never counts (docs/your-code.md).
    loss: Any = None
    loss_weights: Any = None
    metrics: Any = None
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    horovod: HorovodConfig = field(default_factory=HorovodConfig)
    tracking: TrackingConfig = field(default_factory=TrackingConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    faults: FaultsConfig = field(default_factory=FaultsConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    # Extra Keras callbacks: name -> {_target_: ..., ranks: master_only|all_ranks, ...}.
    callbacks: dict[str, Any] = field(default_factory=dict)

    # Samples per optimizer step over all ranks (Tarantella's semantics) ...
    global_batch_size: int | None = None
    # ... or per rank; the other one is derived. Both given must agree.
    micro_batch_size: int | None = None
    # ... or in tokens for sequence data (the seed's Transformer): sentences = tokens // length.
    batch_tokens: int | None = None
    # Samples per evaluation step on each rank (null: the training micro-batch).
    val_micro_batch_size: int | None = None
    seed: int = 42
    # TensorFlow op determinism: identical results for identical configs (slower).
    deterministic: bool = False
    # Continue a run from its last checkpoint: a run directory or an MLflow run id.
    resume: str | None = None
    # Allow resuming with another world size or global batch (LR and steps are re-planned).
    resume_allow_layout_change: bool = False

    # The layout (conf/hardware/local_cpu.yaml: this machine, one node of CPU ranks).
    nodes: int = 1
    gpus: int = 0
    ranks_per_node: int = 2
    # TensorFlow intra/inter-op threads per rank (null: the node's cores / ranks per node).
    threads_per_rank: int | None = None
    sockets_per_node: int | None = None
    pin_to_socket: bool = False
    hosts: list[str] | None = None
    hostfile: str | None = None

    # horovodrun (ssh/local), srun (inside a Slurm allocation), mpirun/mpiexec (the site's
    # MPI; a PBS job's default) or a Launcher's dotted path.
    launcher: str = HOROVODRUN
    dry_run: bool = False
    # After training, profile compute and allreduce on the ranks and predict step time and
    # scaling efficiency on 1..1024 ranks (ring-allreduce alpha-beta model; BENCHMARKS.md).
    predict_scaling: bool = False
    # Where runs, sweeps and the default MLflow store live (relative to the cwd).
    output_root: str = "outputs"


SCHEMAS: dict[str, dict[str, Any]] = {
    "schema/optimizer": OPTIMIZER_SCHEMAS,
    "schema/schedule": {"schedule": ScheduleConfig},
    "schema/horovod": {"horovod": HorovodConfig},
    "schema/tracking": {"tracking": TrackingConfig},
}


def zoo_schemas(package: str) -> dict[str, Any]:
    """The ``SCHEMAS`` (config name -> dataclass) declared by each module of a zoo package.

    Zoo modules import TensorFlow lazily, so collecting them stays cheap.
    """
    found: dict[str, Any] = {}
    zoo = importlib.import_module(package)
    for module in pkgutil.iter_modules(zoo.__path__):
        found.update(getattr(importlib.import_module(f"{package}.{module.name}"), "SCHEMAS", {}))
    return found


def register() -> None:
    """Store every schema, the zoos' included, in Hydra's ConfigStore (idempotent)."""
    store = ConfigStore.instance()
    store.store(name="tntrun_schema", node=TntrunConfig, provider="tntrun")
    groups = {
        **SCHEMAS,
        "schema/model": zoo_schemas("tntrun.models"),
        "schema/dataset": zoo_schemas("tntrun.datasets"),
    }
    for group, nodes in groups.items():
        for name, node in nodes.items():
            store.store(group=group, name=name, node=node, provider="tntrun")
