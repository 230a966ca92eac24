"""A held-out battery of malformed command lines, each refused as the README promises.

Every row runs through the real CLI entry (``tntrun.cli.main``, in this process: no rank
could start without failing the test, see tests/conftest.py) in its own working directory,
and must end with exit code 2, exactly one line of output (``tntrun: config error: ...``
containing the row's text), no run in the MLflow store and no run directory left behind.
The files the rows name (user modules, .npz data, node files) are written by ``workdir``.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import pytest

from tests.helpers.commands import tntrun_cli
from tests.helpers.refusals import left_behind, refused, tracked_runs, write_user_files

PREFIX = "tntrun: config error: "


class Case(NamedTuple):
    args: tuple[str, ...]
    says: str  # a part of the one line
    env: tuple[tuple[str, str], ...] = ()  # environment variables ({cwd}: the working dir)


def case(args: str | tuple[str, ...], says: str, **env: str) -> Case:
    """A row: the command line as typed (split on spaces, or its arguments when a value has
    spaces), a part of its one line."""
    given = tuple(args.split(" ")) if isinstance(args, str) else args
    return Case(given, says, tuple(env.items()))


CB = "+callbacks.cb._target_"
PBS = {"PBS_JOBID": "7.pbs"}
ELASTIC = "hosts=[a,b,c] ranks_per_node=1 global_batch_size=48"
BATTERY = [
    # Hydra's own errors: misspelled keys, wrong types, unparsable overrides.
    case("train.epoch=3", "train.epoch=3: train has no key epoch; did you mean train.epochs?"),
    case("gpu=4", "gpu=4: the config has no key gpu; did you mean gpus?"),
    case(
        "trian.epochs=3",
        "trian.epochs=3: the config has no key trian; did you mean train, tracking?",
    ),
    case("output_roots=x", "did you mean output_root?"),
    case("model.nme=x", "model.nme=x: model has no key nme; its keys: dropout, hidden_units"),
    case("checkpoint.monitor_mode=max", "did you mean checkpoint.monitor?"),
    # Keys that moved to their concern's section name the new place (moved_keys.py).
    case(
        "train.max_restarts=2",
        "train.max_restarts=2: train.max_restarts moved to faults.max_restarts: "
        "write faults.max_restarts=2",
    ),
    case(
        "+train.epochs_between_evals=5",
        "train.epochs_between_evals moved to eval.every_epochs: write eval.every_epochs=5",
    ),
    case("global_batch_size=64.5", "global_batch_size=64.5: global_batch_size takes an integer"),
    case(
        "train.epochs=1e9", "train.epochs=1e9: train.epochs takes an integer, e.g. train.epochs=20"
    ),
    case("gpus=four", "gpus=four: gpus takes an integer, e.g. gpus=0"),
    case("seed=abc", "seed=abc: seed takes an integer, e.g. seed=42"),
    case("ranks_per_node=1.5", "ranks_per_node=1.5: ranks_per_node takes an integer"),
    case("train.epochs=", "train.epochs=: train.epochs takes an integer"),
    case("nodes=null", "nodes=null: nodes takes an integer, e.g. nodes=1"),
    case("deterministic=maybe", "deterministic=maybe: deterministic takes true or false"),
    case("train.precision=fp8", "train.precision takes one of float32, mixed_bfloat16"),
    case(
        "faults.on_nonfinite=ignore", "faults.on_nonfinite=ignore: faults.on_nonfinite takes one of"
    ),
    case("horovod.compression=zip", "horovod.compression=zip: horovod.compression takes one of"),
    case("tracking.tags=5", "tracking.tags=5: tracking.tags takes a mapping"),
    case("train=3", "train=3: train is a section: set its keys one by one, train.<key>=<value>"),
    case("optimizer.base_lr=fast", "optimizer.base_lr=fast: optimizer.base_lr takes a number"),
    case("elastic.min_nodes=two", "elastic.min_nodes=two: elastic.min_nodes takes an integer"),
    case("+global_batch_size=32", "global_batch_size is set already: drop the +"),
    case("~nosuch", "~nosuch: the config has no nosuch to delete: drop ~nosuch"),
    case("train.epochs=[", "train.epochs=[: not an override Hydra can read"),
    case("hosts=[a,b", "hosts=[a,b: not an override Hydra can read"),
    case("hosts=a,b", "hosts=a,b: a value with a comma is a sweep: write hosts=[a,b] for a list"),
    case("seed=1,2", "seed=1,2: a value with a comma is a sweep"),
    case("seed=${nosuch}", "seed=${nosuch}: Interpolation key 'nosuch' not found: give a value"),
    case("train.epochs=${train.nope}", "Interpolation key 'train.nope' not found"),
    case("tracking.experiment_name=${now:}", "tracking.experiment_name=${now:}: TypeError"),
    # Group choices.
    case("model=resnet9000", "model=resnet9000: no such model; did you mean resnet50"),
    case("dataset=imagenet_typo", "dataset=imagenet_typo: no such dataset; did you mean imagenet?"),
    case("optimizer=adamv", "optimizer=adamv: no such optimizer; did you mean adam"),
    case("schedule=nosuch", "schedule=nosuch: no such schedule; available: constant"),
    case("experiment=nosuch", "experiment=nosuch: no such experiment"),
    case("tracking=wandb", "tracking=wandb: no such tracking; available: mlflow"),
    # Batch.
    case("global_batch_size=63", "global_batch_size=63 is not divisible by the world size 2"),
    case("global_batch_size=1", "global_batch_size=1 gives a micro-batch < 1 on 2 ranks"),
    case("global_batch_size=0", "global_batch_size=0"),
    case("micro_batch_size=0", "micro_batch_size=0: a rank needs at least 1 sample per step"),
    case(
        "global_batch_size=64 micro_batch_size=16",
        "global_batch_size=64 and micro_batch_size=16 disagree",
    ),
    case("global_batch_size=4000", "global_batch_size=4000 exceeds the 1438 training samples"),
    case("val_micro_batch_size=0", "val_micro_batch_size=0: use 1 or more samples per rank"),
    case("global_batch_size=-64", "global_batch_size=-64"),
    case("horovod.backward_passes_per_step=100", "horovod.backward_passes_per_step=100"),
    case("horovod.fusion_threshold_kb=-1", "horovod.fusion_threshold_kb=-1: use 0 to disable"),
    case("horovod.gloo_timeout_s=0", "horovod.gloo_timeout_s=0: give a positive time in s"),
    # Epochs and schedules.
    case("train.epochs=0", "train.epochs=0: train for at least 1 epoch"),
    case("train.epochs=-3", "train.epochs=-3: train for at least 1 epoch"),
    case("train.epochs=1000000000", "22 steps/epoch x 1000000000 epochs = 22,000,000,000"),
    case("train.epochs=500000", "more than 10,000,000: lower train.epochs (at most 454,545"),
    case("eval.every_epochs=0", "eval.every_epochs=0: evaluate every 1"),
    case("schedule.epochs=0", "schedule.epochs=0: use 1 or more, or null"),
    case("schedule.epochs=10", "train.epochs=20 runs past the end of the schedule"),
    case("schedule.warmup_epochs=2", "schedule.warmup_epochs has no effect with"),
    case("predict_scaling=true train.epochs=1", "predict_scaling=true validates against"),
    # Training and checkpoint values.
    case("train.label_smoothing=1.5", "train.label_smoothing=1.5: choose a value in [0, 1)"),
    case("faults.rollback_lr_factor=0", "faults.rollback_lr_factor=0.0: choose a factor in (0, 1]"),
    case("faults.max_restarts=-1", "faults.max_restarts=-1: use 0 (no restarts) or more"),
    case("faults.preempt_signals=[SIGKILL]", "faults.preempt_signals=['SIGKILL']: name signals"),
    case("faults.preempt_grace_s=0", "faults.preempt_grace_s=0.0: give the ranks a positive"),
    case("faults.stall_timeout_s=-1", "faults.stall_timeout_s=-1.0: use 0 (no watchdog)"),
    case("train.sync_batch_norm=true train.jit_compile=true", "set train.jit_compile=false"),
    case("+train.class_weight.12=2.0", "train.class_weight.12=2.0: the dataset's classes are 0"),
    case("checkpoint.keep=0", "checkpoint.keep=0: keep 1 or more checkpoints"),
    case("checkpoint.every_epochs=-1", "checkpoint.every_epochs=-1: use 0 (never) or more"),
    case("seed=-1", "seed=-1: use a seed in [0, 4294967296)"),
    case("threads_per_rank=0", "threads_per_rank=0: use 1 or more"),
    case("train.profile_batches=abc", "train.profile_batches=abc: give a batch or a range"),
    case("+train.class_weight.0=-1.0", "train.class_weight.0=-1.0: give a finite weight >= 0"),
    case("train.class_weight={0:2.0}", "train.class_weight is empty here: add keys with +train"),
    # Layout, hosts and launchers.
    case("nodes=0", "nodes=0: nodes x ranks per node must be at least 1"),
    case("ranks_per_node=0", "ranks_per_node=0: nodes x ranks per node must be at least 1"),
    case("nodes=2", "nodes=2 needs the hosts to run on: give hosts=[h1,h2,...]"),
    case("hosts=[a,b,c] nodes=2", "hosts lists 3 hosts but nodes=2: set nodes=3 or list 2"),
    case("hostfile=/no/such/hostfile", "hostfile=/no/such/hostfile does not exist"),
    case("nodes=2 hostfile=bad_hostfile", "line 2 ('beta gamma') is malformed"),
    case("gpus=-1", "gpus=-1: give the GPUs per node, or gpus=0 for CPU ranks"),
    case("launcher=nosuch", "launcher=nosuch: choose horovodrun, srun, mpirun or mpiexec"),
    case("launcher=tntrun.nope.Launcher", "launcher=tntrun.nope.Launcher"),
    case("launcher=srun", "launcher=srun"),
    # Names with shell metacharacters.
    case("hosts=['a;reboot'] nodes=1", "hosts: 'a;reboot' is no host name"),
    case(("hosts=['node1 && rm -rf x']", "nodes=1"), "hosts: 'node1 && rm -rf x' is no host"),
    case("+tracking.tags={'a;b':c}", "not an override Hydra can read"),
    case("+tracking.tags={'$(id)':x}", "not an override Hydra can read"),
    case("model._target_='mymodels;rm.build'", "model._target_=mymodels;rm.build: module"),
    case(f"{CB}='os.system;echo'", "callbacks.cb._target_=os.system;echo: os has no system;echo"),
    # Elastic runs.
    case(f"{ELASTIC} elastic.min_nodes=4", "elastic.min_nodes=4 > elastic.max_nodes=3"),
    case(f"{ELASTIC} elastic.min_nodes=2 elastic.max_nodes=1", "give min <= max"),
    case(f"{ELASTIC} elastic.min_nodes=2 elastic.commit_every_steps=0", "commit every 1"),
    case("elastic.max_nodes=3", "without elastic.min_nodes: give elastic.min_nodes"),
    case(f"{ELASTIC} elastic.min_nodes=2 global_batch_size=63", "narrow the node range"),
    case(f"{ELASTIC} elastic.min_nodes=2 elastic.discovery_interval_s=0", "discovery_interval"),
    # Tracking.
    case(
        "+tracking.tags={mlflow.user:eve}", "tracking.tags.mlflow.user: mlflow.* tags are MLflow's"
    ),
    case("+tracking.tags.mlflow.runName=x", "tracking.tags.mlflow.runName=x"),
    case("+tracking.tagz.team=vision", "tracking.tagz: no such key: use one of"),
    case("tracking.register_alias=latest", "tracking.register_alias=latest: v<number> and latest"),
    case("tracking.log_every_steps=-1", "tracking.log_every_steps=-1: use 0 (per epoch only)"),
    case("tracking.system_metrics_interval_s=0", "tracking.system_metrics_interval_s=0.0"),
    case("tracking.uri=sqlite:///blocked/mlflow.db", "tracking.uri (else $MLFLOW_TRACKING_URI"),
    case("tracking.uri=ftp://x", "= ftp://x: MLflow has no store for ftp://"),
    # Resume.
    # A checkpoint's truncated meta.json: whatever the line says, it is one config error.
    case("resume=truncated_run", ""),
    case("resume=/no/such/run", "resume=/no/such/run: neither a run directory nor a run id"),
    case("resume=0123456789abcdef", "resume=0123456789abcdef: neither a run directory nor"),
    case("resume_allow_layout_change=perhaps", "resume_allow_layout_change takes true or false"),
    # Callbacks.
    case(
        f"{CB}=keras.callbacks.EarlyStopping +callbacks.cb.patiense=3",
        "did you mean callbacks.cb.patience?",
    ),
    case("+callbacks.x=5", "callbacks.x=5: give a callback class and its arguments"),
    case(
        f"{CB}=nosuchmodule.Stop",
        "callbacks.cb._target_=nosuchmodule.Stop: module nosuchmodule not found",
    ),
    case(
        f"{CB}=keras.callbacks.EarlyStop", "Keras has no such callback; did you mean EarlyStopping?"
    ),
    case(
        f"{CB}=keras.layers.Dense",
        "keras.layers.Dense is no class of keras.callbacks, not a Keras callback",
    ),
    case(f"{CB}=my_callbacks_b.Plain", "Plain derives from no Keras callback"),
    case(f"{CB}=my_callbacks_b.every_epoch", "every_epoch is a function, not a Keras callback"),
    case(f"{CB}=my_callbacks_b.Nope", "my_callbacks_b has no Nope"),
    case(
        f"{CB}=my_callbacks_b.Counter +callbacks.cb.evry=2",
        "Counter() takes no evry; did you mean callbacks.cb.every?",
    ),
    case(f"{CB}=my_callbacks_b.SubCounter +callbacks.cb.evry=2", "SubCounter() takes no evry"),
    case(f"{CB}=my_callbacks_b.Patient +callbacks.cb.patiense=2", "Patient() takes no patiense"),
    case(f"{CB}=my_callbacks_b.Needs", "Needs() needs path: add +callbacks.cb.path=..."),
    case(
        f"{CB}=keras.callbacks.CSVLogger",
        "CSVLogger() needs filename: add +callbacks.cb.filename=...",
    ),
    case(
        f"{CB}=keras.callbacks.EarlyStopping +callbacks.cb.ranks=some",
        "callbacks.cb.ranks=some: use all_ranks or master_only",
    ),
    case(
        f"{CB}=tf_keras.callbacks.EarlyStopping",
        "tntrun trains Keras 3: use keras.callbacks.EarlyStopping",
    ),
    # Models.
    case("model._target_=tntrun.models.nope.build", "module tntrun.models.nope not found"),
    case("model=custom", "model._target_ is not set: give model._target_=mymodels.build"),
    case("model=custom model._target_=my_models_b.returns_none", "returns None, never a model"),
    case("model=custom model._target_=my_models_b.returns_text", "returns 'a model', never"),
    case("model=custom model._target_=my_models_b.deep", "deep() needs depth, which the config"),
    case(
        "model=custom model._target_=my_models_b.deep +model.depth=2 +model.width=3",
        "deep() takes no width",
    ),
    case(
        "model=custom model._target_=my_models_b.no_sizes",
        "no_sizes() must take input_shape, num_classes",
    ),
    case(
        "model._target_=tntrun.models.cnn.build_cnn",
        "build_cnn() takes no hidden_units (kept from model=mlp)",
    ),
    case("model=custom model._target_=legacy_models_b.build", "imports the legacy tf_keras"),
    case("+model.width=3", "build_mlp() takes no width (kept from model=mlp)"),
    # Datasets.
    case("dataset=npz", "dataset.path is not set: give dataset.path=<path>"),
    case(
        "dataset=npz dataset.path=/no/such/data.npz",
        "dataset.path=/no/such/data.npz does not exist",
    ),
    case("dataset=npz dataset.path=not_npz.npz", "is not an .npz file ("),
    case(
        "dataset=npz dataset.path=nan_labels.npz",
        "y_train has NaN or infinite labels in 1 sample(s), the first at index 2",
    ),
    case(
        "dataset=npz dataset.path=negative_labels.npz",
        "y_train has negative labels in 1 sample(s), the first at index 1 (-1)",
    ),
    case(
        "dataset=npz dataset.path=empty_train.npz",
        "x_train has no samples: an epoch needs at least one",
    ),
    case(
        "dataset=npz dataset.path=nan_features.npz",
        "x_train has NaN or infinite values in 1 sample(s)",
    ),
    case(
        "dataset=custom dataset._target_=my_data_b.Nope",
        "dataset._target_=my_data_b.Nope: my_data_b has no Nope",
    ),
    case(
        "dataset=custom dataset._target_=my_data_b.Other +dataset.distribute=false",
        "dataset.distribute=false needs a dataset with load_for_rank()",
    ),
    case("dataset.validation_fraction=1.5", "dataset.validation_fraction=1.5: choose a value"),
    case("+dataset.nosuch=1", "DigitsDataset() takes no nosuch (kept from dataset=digits)"),
    # What the model is compiled with.
    case("loss=mse_", "loss=mse_: Keras has no loss of that name; did you mean mse, msle?"),
    case("metrics=[auc,acuracy]", "metrics=acuracy: Keras has no metric of that name"),
    case("loss_weights=[1,-2]", "loss_weights=[1, -2]: give a list of non-negative numbers"),
    case("loss={_target_:keras.losses.Hubber}", "loss._target_=keras.losses.Hubber"),
    case("optimizer.name=adamm", "optimizer.name=adamm: tntrun has no optimizer of that name"),
    case(
        "optimizer=custom optimizer._target_=tntrun.models.nope.Opt",
        "module tntrun.models.nope not found",
    ),
    case("optimizer.base_lr=-0.1", "optimizer.base_lr=-0.1: give a positive, finite learning rate"),
    case("optimizer.base_lr=nan", "optimizer.base_lr=nan: give a positive, finite learning rate"),
    # A PBS job's environment.
    case(
        "train.epochs=2",
        "PBS_NODEFILE=/no/such/nodes does not exist",
        PBS_NODEFILE="/no/such/nodes",
        **PBS,
    ),
    case(
        "train.epochs=2",
        "empty_nodes lists no host: check the job's select",
        PBS_NODEFILE="{cwd}/empty_nodes",
        **PBS,
    ),
    case(
        "train.epochs=2",
        "PBS_RUN_COUNT=abc is not a number of runs",
        PBS_NODEFILE="{cwd}/two_slots",
        PBS_RUN_COUNT="abc",
        **PBS,
    ),
    case("ranks_per_node=3", "the PBS allocation: host", PBS_NODEFILE="{cwd}/two_slots", **PBS),
]


@pytest.fixture
def workdir(in_tmp: Path) -> Path:
    return write_user_files(in_tmp)


@pytest.mark.parametrize("row", BATTERY, ids=[" ".join(c.args)[:60] for c in BATTERY])
def test_a_malformed_command_line_is_refused_in_one_line(row, workdir, capfd, monkeypatch):
    for name, value in row.env:
        monkeypatch.setenv(name, value.format(cwd=workdir))
    code, lines = refused(row.args, workdir, capfd, monkeypatch)
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(PREFIX) and row.says in lines[0], lines[0]
    assert tracked_runs(workdir / "outputs") == 0, "no run may be tracked"
    assert left_behind(workdir / "outputs") == [], "a refused run leaves no run directory"
    assert (workdir / "outputs" / "runs").exists() is False


def test_the_battery_is_held_out_and_large(workdir):
    assert len(BATTERY) >= 107
    assert len({(c.args, c.env) for c in BATTERY}) == len(BATTERY), "no row twice"


def test_a_refusal_keeps_a_run_directory_that_was_there(workdir, capfd, monkeypatch):
    """hydra.run.dir into a directory that exists (a run's, to resume into): refused, the
    directory and what was in it stay."""
    kept = workdir / "earlier-run"
    kept.mkdir()
    (kept / "config.yaml").write_text("seed: 1\n")
    code, lines = refused(("seed=-1", f"hydra.run.dir={kept}"), workdir, capfd, monkeypatch)
    assert code == 2 and lines == [f"{PREFIX}seed=-1: use a seed in [0, 4294967296)"]
    assert (kept / "config.yaml").read_text() == "seed: 1\n"


def test_a_refusal_removes_the_folders_its_run_directory_made(workdir, capfd, monkeypatch):
    """hydra.run.dir=new/nested/run: all three folders were this command's; none stays."""
    code, lines = refused(("seed=-1", "hydra.run.dir=new/nested/run"), workdir, capfd, monkeypatch)
    assert code == 2 and len(lines) == 1, lines
    assert not (workdir / "new").exists()


AS_A_USER = ("train.epoch=3", f"{CB}=keras.callbacks.EarlyStopping +callbacks.cb.patiense=3")


@pytest.mark.slow
def test_the_installed_command_says_what_the_in_process_entry_says(workdir, capfd, monkeypatch):
    """The battery's in-process result is the real one: the same rows through the installed
    ``tntrun`` (a Hydra error and a driver refusal) give the same code, line and nothing
    left behind."""
    rows = [row for row in BATTERY if " ".join(row.args) in AS_A_USER]
    assert len(rows) == len(AS_A_USER)
    for row in rows:
        code, lines = refused(row.args, workdir, capfd, monkeypatch)
        real = tntrun_cli(workdir, *row.args, timeout=120)
        said = [line for line in (real.stdout + real.stderr).splitlines() if line.strip()]
        assert (real.returncode, said) == (code, lines) == (2, lines), said
        assert tracked_runs(workdir / "outputs") == 0 and left_behind(workdir / "outputs") == []


ACCEPTED = [
    f"{CB}=keras.callbacks.ReduceLROnPlateau +callbacks.cb.patience=2 +callbacks.cb.factor=0.5",
    f"{CB}=tntrun.engine.faults.InjectFault +callbacks.cb.ranks=all_ranks +callbacks.cb.rank=1 "
    "+callbacks.cb.at_step=30 +callbacks.cb.kind=kill",
    f"{CB}=my_callbacks_b.SubCounter +callbacks.cb.every=2",
    f"{CB}=my_callbacks_b.Patient +callbacks.cb.patience=2",
    "model=custom model._target_=my_models_b.deep +model.depth=2",
]


@pytest.mark.parametrize("args", ACCEPTED)
def test_what_the_checks_accept_plans(args, workdir, capfd, monkeypatch):
    """The control: the same checks let good input through (a dry run plans it, exit 0)."""
    code, lines = refused((*args.split(" "), "dry_run=true"), workdir, capfd, monkeypatch)
    assert code == 0 and not any(line.startswith(PREFIX) for line in lines), lines
    assert "dry run: nothing was launched and no run was tracked" in lines
