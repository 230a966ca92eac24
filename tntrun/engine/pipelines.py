"""A rank's input: the dataset built once, its training stream and validation batches."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import tensorflow as tf

from tntrun.config.zoo import build_dataset, distributes_automatically
from tntrun.datasets.base import DatasetInfo
from tntrun.datasets.function import DatasetMismatch
from tntrun.engine.data import distribute_eval, distribute_train, shard_size
from tntrun.engine.model_set import UserModelError
from tntrun.engine.sample_weights import ClassWeightError, with_class_weights
from tntrun.planning.plan import Plan


class UserDataError(UserModelError):
    """The user's data cannot train as configured (sizes stated wrong, class weights for
    several outputs): a config error, the same on every rank, before any step."""


@dataclass(frozen=True)
class RankData:
    """This rank's data: the dataset, its sizes, the training stream from the plan's epoch
    and this rank's share of the validation set."""

    dataset: Any
    info: DatasetInfo
    rank: int
    size: int
    train: Any
    val: Any
    val_samples: int


def build_data(plan: Plan, rank: int, size: int) -> RankData:
    dataset = build_dataset(plan.settings.dataset)
    info = dataset.info()
    try:
        train, val, val_samples = input_pipelines(plan, dataset, info, rank, size)
    except (DatasetMismatch, ClassWeightError) as refused:
        raise UserDataError(str(refused)) from None
    return RankData(dataset, info, rank, size, train, val, val_samples)


def stream_from(plan: Plan, data: RankData, first_epoch: int | None = None) -> Any:
    """The training stream from ``first_epoch`` (default: the plan's)."""
    return input_pipelines(plan, data.dataset, data.info, data.rank, data.size, first_epoch)[0]


def input_pipelines(
    plan: Plan, dataset: Any, info, rank: int, size: int, first_epoch: int | None = None
):
    """(train stream from ``first_epoch`` (default: the plan's), this rank's validation
    batches, its validation sample count)."""
    settings = plan.settings
    # tf.data's shuffle order depends on the global seed as well as the op's: reset it, so a
    # stream rebuilt later (a rollback, the scaling probe) after a builder that reseeded
    # (keras.utils.set_random_seed) sees the epochs' order of an uninterrupted run.
    tf.random.set_seed(settings.seed)
    if not distributes_automatically(settings.dataset):
        return pipelines_of_the_dataset(plan, dataset, rank, size)
    first = plan.initial_epoch if first_epoch is None else first_epoch
    return distributed_pipelines(plan, dataset, info, rank, size, first)


def pipelines_of_the_dataset(plan: Plan, dataset: Any, rank: int, size: int):
    """Manual mode: the dataset shards and micro-batches itself for this rank."""
    train, val = dataset.load_for_rank(
        rank=rank,
        size=size,
        micro_batch=plan.micro_batch_size,
        val_micro_batch=plan.val_micro_batch_size,
        seed=plan.settings.seed,
    )
    samples, batches = val.reduce(
        (0, 0), lambda seen, batch: (seen[0] + tf.shape(batch[0])[0], seen[1] + 1)
    )
    # Its length stated: of a dataset whose length it cannot tell (files sharded and
    # interleaved), Keras 3's evaluate warns "Your input ran out of data" at every end.
    val = val.apply(tf.data.experimental.assert_cardinality(int(batches.numpy())))
    return train.repeat(), val, int(samples.numpy())


def distributed_pipelines(plan: Plan, dataset: Any, info, rank: int, size: int, first_epoch: int):
    """Automatic mode: tntrun shuffles, shards and micro-batches the dataset's samples."""
    train_data, val_data = dataset.load()
    train = plan.settings.train
    if train.class_weight:
        train_data = with_class_weights(train_data, train.class_weight, info.num_classes)
    stream = distribute_train(
        train_data,
        num_samples=info.num_train,
        micro_batch=plan.micro_batch_size,
        steps_per_epoch=plan.steps_per_epoch,
        rank=rank,
        size=size,
        seed=plan.settings.seed,
        first_epoch=first_epoch,
        epochs=plan.epochs,
        drop_remainder=train.drop_remainder,
    )
    val = distribute_eval(val_data, micro_batch=plan.val_micro_batch_size, rank=rank, size=size)
    return stream, val, shard_size(info.num_val, rank, size)
