"""The driver's knowledge of Keras (names of losses, metrics and optimizers, and each
optimizer's arguments) held to the installed Keras, and the rank side's compile arguments:
the config's keys over the user's compiled model over the task's defaults."""

from __future__ import annotations

import dataclasses
import inspect

import keras
import pytest
from keras.src.losses import ALL_OBJECTS_DICT as KERAS_LOSSES
from keras.src.metrics import ALL_OBJECTS_DICT as KERAS_METRICS

from tntrun.config.compile_checks import LOSS_NAMES, METRIC_NAMES
from tntrun.config.schema import OPTIMIZER_SCHEMAS
from tntrun.config.settings import OptimizerSettings, settings_of
from tntrun.engine.compile_args import compile_arguments, states_from_logits
from tntrun.engine.optimizers import KERAS_OPTIMIZERS, build_optimizer
from tntrun.engine.output_kind import outputs_probabilities

# Keras' own arguments tntrun does not offer: it accumulates and scales the loss itself.
NOT_OFFERED = {"learning_rate", "gradient_accumulation_steps", "loss_scale_factor", "name"}
COMPILE_NAMES = {"acc", "ce", "crossentropy"}  # compile's own metric names
NOT_METRICS = {"metric", "mean_metric_wrapper", "mean", "sum"}  # base classes


def test_the_loss_and_metric_names_are_keras_own():
    assert {k for k in KERAS_LOSSES if k[0].islower()} == LOSS_NAMES
    keras_metrics = {k for k in KERAS_METRICS if k[0].islower()} - NOT_METRICS
    assert keras_metrics | COMPILE_NAMES == METRIC_NAMES


@pytest.mark.parametrize("name", sorted(OPTIMIZER_SCHEMAS))
def test_each_optimizer_schema_states_keras_arguments_and_defaults(name):
    cls = KERAS_OPTIMIZERS[name]
    keras_args = {
        p.name: p.default
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.name not in {"self", "kwargs"} | NOT_OFFERED
    }
    schema = OPTIMIZER_SCHEMAS[name]()
    ours = {
        f.name: getattr(schema, f.name)
        for f in dataclasses.fields(schema)
        if f.name not in ("name", "base_lr", "base_batch_size")
    }
    assert ours == keras_args


def test_every_keras_optimizer_but_the_wrappers_and_experimental_ones_has_a_name():
    offered = {cls.__name__ for cls in KERAS_OPTIMIZERS.values()}
    # Muon routes variables by layer and ScheduleFreeAdamW schedules itself: optimizer=custom.
    left = {"Optimizer", "LossScaleOptimizer", "MultiOptimizer", "OptimizerMap", "Muon"}
    left |= {"ScheduleFreeAdamW"}
    in_keras = {n for n, c in vars(keras.optimizers).items() if isinstance(c, type)}
    assert in_keras - offered == left & in_keras


def test_an_optimizer_is_built_with_the_plans_learning_rate_and_its_arguments():
    section = {"name": "adamw", "base_lr": 0.1, "base_batch_size": 64, "weight_decay": 0.01}
    optimizer = build_optimizer(OptimizerSettings.of(section), 0.25)
    assert isinstance(optimizer, keras.optimizers.AdamW)
    assert float(optimizer.learning_rate) == 0.25 and optimizer.weight_decay == 0.01
    own = {"_target_": "keras.optimizers.Lion", "base_lr": 0.1, "base_batch_size": 64}
    built = build_optimizer(OptimizerSettings.of(own), 0.1)
    assert isinstance(built, keras.optimizers.Lion)


def dense(activation=None):
    return keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation=activation)])


def test_a_softmax_model_gets_the_tasks_loss_on_probabilities(compose_cfg):
    settings = settings_of(dict(compose_cfg()))
    assert outputs_probabilities(dense("softmax"), (4,))
    assert not outputs_probabilities(dense(), (4,))
    loss = compile_arguments(settings, "classification", dense("softmax"), True).arguments["loss"]
    assert loss.get_config()["from_logits"] is False
    default = compile_arguments(settings, "classification", dense(), False)
    assert states_from_logits(default.arguments["loss"])
    assert default.note("model._target_=x") is None


def test_the_config_overrides_the_compiled_model_which_overrides_the_task(compose_cfg):
    model = dense()
    model.compile(optimizer="sgd", loss="mse", metrics=["mae"], loss_weights=[2.0])
    kept = compile_arguments(settings_of(dict(compose_cfg())), "classification", model)
    assert kept.arguments == {"loss": "mse", "metrics": ["mae"], "loss_weights": [2.0]}
    assert isinstance(kept.optimizer, keras.optimizers.SGD)
    assert "its loss, loss_weights, metrics, optimizer are kept" in kept.note("model=x")
    stated = settings_of(dict(compose_cfg("loss=huber", "metrics=[auc]")))
    over = compile_arguments(stated, "classification", model)
    assert over.arguments == {"loss": "huber", "loss_weights": [2.0], "weighted_metrics": ["auc"]}
    targeted = settings_of(dict(compose_cfg("loss={_target_:keras.losses.Huber,delta:2.0}")))
    loss = compile_arguments(targeted, "classification", dense()).arguments["loss"]
    assert isinstance(loss, keras.losses.Huber) and loss._fn_kwargs["delta"] == 2.0
