"""Every semantic check: one line naming the key and a fix, exit code 2, no MLflow run."""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers.asserts import assert_exit
from tntrun import api
from tntrun.errors import PlanError

CHECKS = [
    (
        ["global_batch_size=63"],
        "global_batch_size=63 is not divisible by the world size 2: use global_batch_size=62 or 64",
    ),
    (["global_batch_size=1"], "global_batch_size=1 gives a micro-batch < 1 on 2 ranks"),
    (["micro_batch_size=0"], "micro_batch_size=0: a rank needs at least 1 sample per step"),
    (
        ["global_batch_size=64", "micro_batch_size=16"],
        "global_batch_size=64 and micro_batch_size=16 disagree on 2 ranks",
    ),
    (["ranks_per_node=0"], "ranks_per_node=0: nodes x ranks per node must be at least 1"),
    (["nodes=0"], "nodes=0: nodes x ranks per node must be at least 1"),
    (["hosts=[a,b,c]", "nodes=2"], "hosts lists 3 hosts but nodes=2: set nodes=3 or list 2"),
    (["nodes=2"], "nodes=2 needs the hosts to run on: give hosts=[h1,h2,...]"),
    (["hostfile=/no/such/hostfile"], "hostfile=/no/such/hostfile does not exist"),
    (
        ["schedule=warmup_piecewise", "train.epochs=3", "schedule.boundaries_epochs=[]"],
        "schedule.warmup_epochs=5 (110 steps) is longer than the schedule"
        " (66 steps, train.epochs=3)",
    ),
    (
        ["schedule=warmup_piecewise", "schedule.warmup_epochs=1"],
        "schedule.boundaries_epochs has 30, beyond the last epoch (train.epochs=20)",
    ),
    (
        [
            "schedule=warmup_piecewise",
            "schedule.epochs=3",
            "schedule.boundaries_epochs=[]",
            "train.epochs=2",
        ],
        "schedule.warmup_epochs=5 (110 steps) is longer than the schedule (66 steps, "
        "schedule.epochs=3), which would end inside its warmup: shorten the warmup or raise "
        "schedule.epochs",
    ),
    (
        ["schedule.epochs=10"],
        "train.epochs=20 runs past the end of the schedule (schedule.epochs=10): raise "
        "schedule.epochs to 20 or set schedule.epochs=null to follow train.epochs",
    ),
    (["schedule.epochs=0"], "schedule.epochs=0: use 1 or more, or null to follow train.epochs"),
    (
        ["predict_scaling=true", "ranks_per_node=1"],
        "predict_scaling=true needs 2 or more ranks to measure the allreduce, this run has 1: "
        "use ranks_per_node=2 (or more nodes)",
    ),
    (
        ["predict_scaling=true", "train.epochs=1"],
        "predict_scaling=true validates against the steady step time of the epochs after the "
        "first, train.epochs=1: use train.epochs=2 or more",
    ),
    (
        ["model=resnet9000"],
        "model=resnet9000: no such model; did you mean resnet50, resnet101, resnet34? available: ",
    ),
    (
        ["dataset=imagenet_typo"],
        "dataset=imagenet_typo: no such dataset; did you mean imagenet? available: ",
    ),
    (
        ["model._target_=tntrun.models.nope.build"],
        "model._target_=tntrun.models.nope.build: module tntrun.models.nope not found",
    ),
    (
        ["dataset=npz", "dataset.path=/no/such/data.npz"],
        "dataset.path=/no/such/data.npz does not exist",
    ),
    (
        ["horovod.fusion_threshold_kb=-1"],
        "horovod.fusion_threshold_kb=-1: use 0 to disable fusion or a positive size",
    ),
    (
        ["schedule.warmup_epochs=2"],
        "schedule.warmup_epochs has no effect with schedule.name=constant",
    ),
    (
        ["optimizer.base_lr=-0.1"],
        "optimizer.base_lr=-0.1: give a positive, finite learning rate, e.g. 0.1",
    ),
    (
        ["optimizer.base_lr=nan"],
        "optimizer.base_lr=nan: give a positive, finite learning rate, e.g. 0.1",
    ),
    (
        ["val_micro_batch_size=0"],
        "val_micro_batch_size=0: use 1 or more samples per rank, or null for the training "
        "micro-batch",
    ),
    (["seed=-1"], "seed=-1: use a seed in [0, 4294967296)"),
    (["checkpoint.keep=0"], "checkpoint.keep=0: keep 1 or more checkpoints"),
    (
        ["schedule=nosuch"],
        "schedule=nosuch: no such schedule; available: constant, "
        "inverse_sqrt, warmup_cosine, warmup_piecewise",
    ),
    (["optimizer=adamv"], "optimizer=adamv: no such optimizer; did you mean adam, nadam, adamw?"),
    (["optimizer.name=adamm"], "optimizer.name=adamm: tntrun has no optimizer of that name; did"),
    (["loss=mse_"], "loss=mse_: Keras has no loss of that name; did you mean mse, msle?"),
    (["metrics=[auc,acuracy]"], "metrics=acuracy: Keras has no metric of that name; did you mean"),
    (["loss_weights=[1,-2]"], "loss_weights=[1, -2]: give a list of non-negative numbers"),
    (
        ["loss={_target_:keras.losses.Hubber}"],
        "loss._target_=keras.losses.Hubber: keras.losses has no Hubber",
    ),
    (
        ["optimizer=custom", "optimizer._target_=tntrun.models.nope.Opt"],
        "optimizer._target_=tntrun.models.nope.Opt: module tntrun.models.nope not found",
    ),
    (
        ["model._target_=tntrun.models.cnn.build_cnn"],
        "model._target_=tntrun.models.cnn.build_cnn: build_cnn() takes no hidden_units "
        "(kept from model=mlp): start from model=custom",
    ),
    (["launcher=nosuch"], "launcher=nosuch: choose horovodrun, srun, mpirun or mpiexec"),
    (
        ["+tracking.tagz.team=vision"],
        "tracking.tagz: no such key: use one of check_model_loads, description, ",
    ),
]


@pytest.mark.parametrize(("overrides", "message"), CHECKS, ids=[c[1][:40] for c in CHECKS])
def test_check_refuses_with_one_clear_line(in_tmp, overrides, message):
    """In-process through the Python API: the run is refused before any rank starts."""
    with pytest.raises(PlanError) as refused:
        api.run([*overrides, f"output_root={in_tmp / 'outputs'}"])
    assert any(message in problem for problem in refused.value.problems), refused.value.problems
    assert all("\n" not in problem for problem in refused.value.problems)
    assert not (in_tmp / "outputs" / "mlflow.db").exists(), "no run may be tracked"


def npz_arrays(x_train) -> dict:
    x_train = np.asarray(x_train, np.float32)
    labels = np.zeros(len(x_train), np.int64)
    return {"x_train": x_train, "y_train": labels, "x_val": x_train[:2], "y_val": labels[:2]}


def write_not_an_npz(path):
    path.write_text("1,2,3\n")


def write_pickle(path):
    np.save(path.with_suffix(".npy"), np.array([{"a": 1}], dtype=object), allow_pickle=True)
    path.with_suffix(".npy").rename(path)


def write_npy(path):
    np.save(path.with_suffix(".npy"), np.zeros((4, 2)))
    path.with_suffix(".npy").rename(path)


def write_nan_features(path):
    rows = [[0.0, 1.0], [1.0, 2.0], [2.0, np.nan], [3.0, np.inf]]
    np.savez(path, **npz_arrays(rows))


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (write_not_an_npz, "is not an .npz file ("),
        (write_pickle, "is not an .npz file ("),
        (write_npy, "holds one array (.npy), not an .npz: save the file with numpy.savez"),
        (
            write_nan_features,
            ": x_train has NaN or infinite values in 2 sample(s), the first at index 2: "
            "clean or drop them before training",
        ),
    ],
)
def test_a_bad_npz_file_is_one_line_naming_dataset_path(in_tmp, write, message):
    data = in_tmp / "data.npz"
    write(data)
    with pytest.raises(PlanError) as refused:
        api.run(["dataset=npz", f"dataset.path={data}", f"output_root={in_tmp / 'outputs'}"])
    (problem,) = refused.value.problems
    assert problem.startswith(f"dataset.path={data}") and message in problem, problem
    assert "\n" not in problem and not (in_tmp / "outputs" / "mlflow.db").exists()


@pytest.mark.slow
def test_the_command_line_prints_each_problem_on_one_line_and_exits_2(run_tntrun, tmp_path):
    result = run_tntrun("global_batch_size=63", "horovod.fusion_threshold_kb=-1", "seed=-1")
    assert_exit(result, 2)
    errors = [line for line in result.stderr.splitlines() if "config error" in line]
    assert len(errors) == 3, result.stderr
    assert "tntrun: config error: seed=-1: use a seed in [0, 4294967296)" in errors
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "outputs" / "mlflow.db").exists(), "no MLflow run may be created"


@pytest.mark.slow
def test_unknown_zoo_names_list_the_available_ones(run_tntrun):
    result = run_tntrun("model=resnet9000", "dataset=imagenet_typo")
    assert_exit(result, 2)
    models, datasets = (
        line.split("available: ")[1].split(", ") for line in result.stderr.splitlines()
    )
    assert "mlp" in models and "digits" in datasets and "npz" in datasets


def test_malformed_hostfile(in_tmp):
    hostfile = in_tmp / "hosts"
    hostfile.write_text("alpha slots=2\nbeta gamma\n")
    with pytest.raises(PlanError, match="line 2 \\('beta gamma'\\) is malformed"):
        api.plan(["nodes=2", f"hostfile={hostfile}"])


@pytest.mark.slow
@pytest.mark.parametrize(
    ("override", "key"), [("gpu=4", "gpu"), ("model.nme=x", "model.nme"), ("gpus=four", "gpus")]
)
def test_typos_and_wrong_types_fail_at_composition(run_tntrun, override, key):
    result = run_tntrun(override)
    assert result.returncode != 0
    assert key in result.stderr
