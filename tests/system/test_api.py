"""The Python API and bring-your-own code: compose, plan and run without Hydra's CLI."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import NO_LOGGED_MODEL, tntrun_cli
from tests.helpers.runs import run_dir_of
from tntrun import api
from tntrun.config.checks import choice_problems
from tntrun.errors import PlanError

USER_MODEL = textwrap.dedent('''
    import keras


    def build(input_shape, num_classes, width=16):
        """A user's own model builder, in the working directory."""
        return keras.Sequential([
            keras.Input(shape=input_shape),
            keras.layers.Flatten(),
            keras.layers.Dense(width, activation="relu"),
            keras.layers.Dense(num_classes),
        ])
''')
USER_DATASET = textwrap.dedent('''
    import numpy as np

    from tntrun.datasets.base import DatasetInfo


    class Blobs:
        """A user's own dataset: two Gaussian blobs, generated."""

        def __init__(self, samples: int = 512, features: int = 4):
            rng = np.random.default_rng(0)
            labels = rng.integers(0, 2, samples)
            x = rng.normal(size=(samples, features)) + 3.0 * labels[:, None]
            self.x, self.y = x.astype("float32"), labels.astype("int64")
            self.split = samples * 3 // 4

        def info(self):
            return DatasetInfo(num_train=self.split, num_val=len(self.y) - self.split,
                               input_shape=(self.x.shape[1],), num_classes=2)

        def load(self):
            import tensorflow as tf

            s = self.split
            return (tf.data.Dataset.from_tensor_slices((self.x[:s], self.y[:s])),
                    tf.data.Dataset.from_tensor_slices((self.x[s:], self.y[s:])))
''')


def user_project(root: Path) -> Path:
    """A working directory with the user's model, dataset and their config files."""
    (root / "mymodels.py").write_text(USER_MODEL)
    (root / "mydata.py").write_text(USER_DATASET)
    (root / "conf" / "model").mkdir(parents=True)
    (root / "conf" / "dataset").mkdir(parents=True)
    (root / "conf" / "model" / "mine.yaml").write_text("_target_: mymodels.build\nwidth: 8\n")
    (root / "conf" / "dataset" / "blobs.yaml").write_text("_target_: mydata.Blobs\nsamples: 512\n")
    return root / "conf"


def test_compose_and_plan_without_the_cli(in_tmp):
    exp = api.compose(["model=cnn", "global_batch_size=32", "nodes=2", "hosts=[a,b]"])
    assert exp.choices["model"] == "cnn" and exp.choices["dataset"] == "digits"
    plan = api.plan(exp)
    assert (plan.world_size, plan.micro_batch_size, plan.hosts) == (4, 8, (("a", 2), ("b", 2)))
    assert plan.launch_command[plan.launch_command.index("-H") + 1] == "a:2,b:2"
    assert exp.run_dir.parent.parent == in_tmp / "outputs" / "runs"


def test_a_user_config_dir_adds_choices(in_tmp):
    conf = user_project(in_tmp)
    plan = api.plan(api.compose(["model=mine", "dataset=blobs"], config_dir=conf))
    assert (plan.num_train, plan.num_val) == (384, 128)
    assert choice_problems(["model=mine"], [str(conf)]) == []
    assert choice_problems(["model=mine"]) and "no such model" in choice_problems(["model=mine"])[0]
    searchpath = f"hydra.searchpath=[file://{conf}]"
    assert choice_problems(["model=mine", searchpath]) == []


def test_sweep_syntax_is_understood_by_the_choice_check():
    assert choice_problems(["model=glob(resnet*)", "seed=range(3)", "optimizer=adam,sgd"]) == []
    assert choice_problems(["model=glob(nomodel*)"]) == [
        "model=glob(nomodel*): matches no model; available: cnn, custom, mlp, resnet101, "
        "resnet152, resnet18, resnet34, resnet50, transformer"
    ]
    assert choice_problems(["model=mlp,nosuch"])[0].startswith("model=nosuch: no such model")
    assert choice_problems(["~experiment", "schedule=null"]) == []


def test_a_builder_that_does_not_take_the_config_keys_is_refused(in_tmp):
    user_project(in_tmp)
    with pytest.raises(PlanError) as refused:
        api.plan(["model._target_=mymodels.build"])
    assert refused.value.problems == [
        "model._target_=mymodels.build: build() takes no dropout, hidden_units (kept from "
        "model=mlp): start from model=custom (model=custom model._target_=mymodels.build "
        "+model.<key>=...) or give your model its own config file (model/<name>.yaml in a "
        "--config-dir)"
    ]
    plan = api.plan(["model=custom", "model._target_=mymodels.build", "+model.width=8"])
    assert plan.world_size == 2
    with pytest.raises(PlanError, match=r"build\(\) takes no depth \(kept from model=custom\)"):
        api.plan(["model=custom", "model._target_=mymodels.build", "+model.depth=8"])
    with pytest.raises(PlanError, match=r"^model._target_ is not set: give model._target_="):
        api.plan(["model=custom"])
    with pytest.raises(PlanError, match=r"module nosuchmodule not found in the working"):
        api.plan(["model._target_=nosuchmodule.build"])


def test_a_recipe_plans_before_its_data_exists(in_tmp):
    layout = ["nodes=2", "gpus=4", "hosts=[a,b]", "global_batch_size=512", "dry_run=true"]
    result = api.run(["experiment=resnet50_imagenet", *layout])
    assert result.status == "PLANNED" and result.exit_code == 0
    plan = result.plan
    assert (plan.num_train, plan.num_val, plan.world_size, plan.micro_batch_size) == (
        1_281_167,
        50_000,
        8,
        64,
    )
    assert plan.steps_per_epoch == 1_281_167 // 512 and plan.scaled_lr == pytest.approx(0.2)
    missing = api.run(["experiment=resnet50_imagenet", "dataset.data_dir=/no/such", *layout])
    assert missing.plan.num_train == 1_281_167
    wmt = api.run(["experiment=transformer_big_wmt14", "dry_run=true"]).plan
    assert (wmt.num_train, wmt.num_val) == (4_508_785, 3_003)
    with pytest.raises(PlanError) as refused:  # a real run needs the data
        api.plan(["experiment=resnet50_imagenet"])
    assert refused.value.problems == ["dataset.data_dir is not set: give dataset.data_dir=<path>"]
    with pytest.raises(PlanError, match=r"^dataset.data_dir=/no/such does not exist"):
        api.plan(["experiment=resnet50_imagenet", "dataset.data_dir=/no/such"])


@pytest.mark.slow
def test_the_dry_run_says_the_sizes_are_assumed(run_tntrun):
    result = run_tntrun(
        "experiment=resnet50_imagenet",
        "nodes=2",
        "gpus=4",
        "hosts=[a,b]",
        "global_batch_size=512",
        "dry_run=true",
    )
    assert_succeeded(result)
    assert (
        "note: dataset.data_dir is not there yet: planned with the published sizes "
        "(1,281,167 train / 50,000 validation samples, 1000 classes)"
    ) in result.stdout
    assert "-np 8 -H a:4,b:4" in result.stdout


@pytest.mark.slow
def test_a_glob_sweep_plans_every_match(run_tntrun, tmp_path):
    result = run_tntrun("-m", "model=glob(resnet1*)", "dry_run=true", "dataset=synthetic_images")
    assert_succeeded(result)
    assert result.stdout.count("dry run: nothing was launched") == 3  # resnet101, 152, 18
    assert not (tmp_path / "outputs" / "mlflow.db").exists()


@pytest.mark.slow
def test_run_in_process_on_two_ranks(in_tmp):
    result = api.run(["train.epochs=2", "tracking.system_metrics=false", NO_LOGGED_MODEL])
    assert (result.status, result.exit_code) == ("FINISHED", 0)
    assert result.metrics["val_accuracy"] > 0.8
    assert (result.run_dir / "plan.json").is_file() and result.run_dir.is_relative_to(in_tmp)
    store = f"sqlite:///{in_tmp / 'outputs' / 'mlflow.db'}"
    run = MlflowClient(store).get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.params["plan.world_size"] == "2"


@pytest.mark.slow
def test_bring_your_own_model_and_dataset_from_the_working_directory(tmp_path):
    """One rank: the claim is the user's code found from the working directory."""
    user_project(tmp_path)
    args = (
        "model=mine",
        "dataset=blobs",
        "train.epochs=3",
        "optimizer.base_lr=0.01",
        "ranks_per_node=1",
        NO_LOGGED_MODEL,
    )
    result = tntrun_cli(tmp_path, "--config-dir", "conf", *args, "global_batch_size=32")
    assert_succeeded(result)
    assert "tntrun: run FINISHED" in result.stdout
    accuracy = float(result.stdout.split("final val_accuracy: ")[1].split()[0])
    assert accuracy > 0.9  # the blobs are 3 standard deviations apart
    assert (run_dir_of(result) / "model.keras").is_file()
    run_id = (run_dir_of(result) / "run_id").read_text()
    run = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}").get_run(run_id)
    assert run.info.run_name == "mine-blobs-1x32"  # the user's config names
    assert run.inputs.dataset_inputs[0].dataset.name == "blobs"
