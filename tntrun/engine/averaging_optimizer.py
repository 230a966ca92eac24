"""The averaging optimizer: a Keras 3 optimizer's own class with ``apply`` averaging over the
ranks (:class:`_DataParallel`), gradient accumulation, and the loss-scaled variant. Made
and configured by :func:`tntrun.engine.data_parallel.data_parallel`, whose docstring says
why and how."""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import horovod.tensorflow as hvd
import keras
import tensorflow as tf
from keras import ops

from tntrun.engine import keras_internals
from tntrun.engine.gradient_averaging import allreduce_gradients, scaled
from tntrun.engine.noise_scale import GradientNoiseScale
from tntrun.engine.step_agreement import StepAgreement

# The instance attribute holding the AveragingState, invisible to Keras and TF tracking.
STATE_ATTRIBUTE = "_tntrun_data_parallel"


@dataclasses.dataclass(eq=False)
class _Accumulation:
    """Per-variable sums of this rank's gradients since the last update (not checkpointed:
    a resumed run starts a fresh accumulation)."""

    gradients: list[tf.Variable]
    loss: tf.Variable
    micro_steps: tf.Variable


@dataclasses.dataclass(eq=False)
class AveragingState:
    """What :func:`data_parallel` was asked for, and the mutable state of the step being
    traced (the loss it noted, the accumulation); kept on the optimizer instance."""

    compression: Any = hvd.Compression.none
    backward_passes_per_step: int = 1
    agreement: StepAgreement | None = None
    noise_scale: GradientNoiseScale | None = None  # measured in the same allreduce
    accumulation: _Accumulation | None = None
    noted: tuple[Any, tf.Tensor] | None = None  # (graph, loss) of the step being traced
    scaled_in: tuple[Any] | None = None  # (graph,) whose loss was scaled: loss scaling's check
    traced: bool = False

    def take_loss(self) -> tf.Tensor | None:
        """The loss noted in the current graph (None if none, or noted in another graph)."""
        noted, self.noted = self.noted, None
        if noted is None or noted[0] is not current_graph():
            return None
        return noted[1]


def current_graph() -> Any:
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def _refuse_xla() -> None:
    if keras_internals.tracing_into_xla():
        raise ValueError(
            "tntrun averages gradients with Horovod collectives, which XLA cannot compile: "
            "use model.compile(..., jit_compile=False) (see tntrun.engine.data_parallel for "
            "compiling only the forward and backward pass)"
        )


class _DataParallel:
    """Mixed in before a Keras 3 optimizer class: ``apply`` averages over the ranks."""

    @property
    def _data_parallel(self) -> AveragingState:
        # An instance made by from_config of this class (a clone) still averages.
        if STATE_ATTRIBUTE not in self.__dict__:
            object.__setattr__(self, STATE_ATTRIBUTE, AveragingState())
        return self.__dict__[STATE_ATTRIBUTE]

    @property
    def learning_rate(self):
        return super().learning_rate

    @learning_rate.setter
    def learning_rate(self, value):
        """Keras refuses a number for a learning rate given as a schedule, so callbacks that
        set it (ReduceLROnPlateau, LearningRateScheduler) failed. A schedule that can be
        rescaled (``rescale_to(lr, step)``: tntrun's ``PlannedSchedule``) takes the number
        as its value now: the schedule goes on from there, scaled, on every rank alike."""
        inner = getattr(self, "inner_optimizer", self)
        schedule = keras_internals.schedule_of(inner)
        if hasattr(schedule, "rescale_to") and not callable(value):
            schedule.rescale_to(float(value), inner.iterations)
        else:
            type(self)._tntrun_base.learning_rate.fset(self, value)

    def scale_loss(self, loss):
        """Keras' ``train_step`` passes each step's loss here: note it for the agreement."""
        self._data_parallel.noted = (current_graph(), loss)
        self._data_parallel.scaled_in = (current_graph(),)
        return super().scale_loss(loss)

    def get_config(self):
        """Saved without tntrun's schedule, so that a ``.keras`` file (tntrun's checkpoints,
        a user's ModelCheckpoint) loads where tntrun is not installed: the learning rate is
        the number it stands at. tntrun resumes from its own checkpoints, not from this."""
        return portable_config(super().get_config(), self)

    def apply(self, grads, trainable_variables=None):
        """Average ``grads`` over the ranks (every N-th micro-step), then update."""
        _refuse_xla()
        self._refuse_unscaled_loss()
        grads = list(grads)
        if not grads:
            return
        settings = self._data_parallel
        settings.traced = True
        variables = self._variables_for(trainable_variables, len(grads))
        grads = self._local_gradients(grads, variables)
        loss = settings.take_loss()
        if settings.backward_passes_per_step == 1:
            self._average_and_update(grads, variables, loss)
        else:
            self._accumulate(grads, variables, loss)

    def _refuse_unscaled_loss(self) -> None:
        """Loss scaling only: gradients of a loss that never passed ``scale_loss`` would be
        divided by the loss scale all the same and train ~2^15 times too slowly, silently."""

    def _variables_for(self, trainable_variables, count: int) -> list:
        """The variables ``apply`` updates; builds the optimizer on its first variables."""
        if trainable_variables is None:
            if not self.built or count != len(keras_internals.tracked_variables(self)):
                raise ValueError(
                    "apply(grads) without variables needs an optimizer built on exactly "
                    "as many variables: call optimizer.build(variables) first"
                )
            return keras_internals.tracked_variables(self)
        variables = list(trainable_variables)
        if not self.built:
            with keras.name_scope(self.name, caller=self):
                self.build(variables)
            self.built = True
        return variables

    def _local_gradients(self, grads: list, variables: list) -> list:
        """This rank's gradients as they are averaged (unscaled, under loss scaling)."""
        return grads

    def _average_and_update(self, grads: list, variables: list, loss) -> None:
        """One allreduce of the gradients, the agreement vector and this rank's squared
        gradient norm (each present), then the update."""
        settings = self._data_parallel
        agreement, noise = settings.agreement, settings.noise_scale
        parts = [] if agreement is None else [agreement.local_vector(loss)]
        parts += [] if noise is None else [noise.local_vector(self._measured(grads, variables))]
        extra = tf.concat(parts, axis=0) if parts else None
        averaged, agreed = allreduce_gradients(grads, settings.compression, extra)
        if agreement is not None:
            agreement.averaged.assign(agreed[: agreement.averaged.shape[0]])
        if noise is not None:
            noise.update(agreed[-1], self._measured(averaged, variables))
        self._update(averaged, variables)

    def _measured(self, grads: list, variables: list) -> list:
        """``grads`` that are gradients, ``None`` for a variable the optimizer overwrites
        with its "gradient" (a float8 scale): the noise scale's input."""
        return [
            None if keras_internals.overwrites_with_gradient(self, v) else g
            for g, v in zip(grads, variables, strict=True)
        ]

    def _update(self, grads: list, variables: list) -> None:
        """One optimizer update with the rank-averaged gradients (Keras' own ``apply``)."""
        super().apply(grads, variables)

    def _count_step(self) -> None:
        """A micro-step without an update still counts one ``iterations``."""
        keras_internals.count_step(self)

    def _accumulate(self, grads: list, variables: list, loss) -> None:
        state = self._accumulators()
        present = [g is not None for g in grads]
        for gradient, variable in zip(grads, variables, strict=True):
            if gradient is not None:
                total = state.gradients[keras_internals.variable_index(self, variable)]
                total.assign_add(tf.cast(tf.convert_to_tensor(gradient), total.dtype))
        if loss is not None:
            state.loss.assign_add(tf.reduce_mean(tf.cast(loss, tf.float32)))
        state.micro_steps.assign_add(1)
        n = self._data_parallel.backward_passes_per_step
        noted = loss is not None
        ops.cond(
            ops.equal(state.micro_steps % n, 0),
            lambda: self._apply_accumulated(variables, present, noted),
            self._count_step,
        )

    def _apply_accumulated(self, variables: list, present: list[bool], noted: bool) -> None:
        """Average the micro-steps' mean gradient over the ranks, reset, update."""
        state = self._accumulators()
        n = self._data_parallel.backward_passes_per_step
        sums = [state.gradients[keras_internals.variable_index(self, v)] for v in variables]
        grads = [s.read_value() / n if p else None for s, p in zip(sums, present, strict=True)]
        loss = state.loss.read_value() / n if noted else None
        for total in state.gradients:
            total.assign(tf.zeros_like(total))
        state.loss.assign(0.0)
        self._average_and_update(grads, variables, loss)

    def _accumulators(self) -> _Accumulation:
        """The accumulators, one per variable the optimizer was built on (made once, lifted
        out of any traced function)."""
        settings = self._data_parallel
        if settings.accumulation is None:
            with tf.init_scope():
                settings.accumulation = _Accumulation(
                    gradients=[
                        tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False)
                        for v in keras_internals.tracked_variables(self)
                    ],
                    loss=tf.Variable(0.0, trainable=False),
                    micro_steps=tf.Variable(0, dtype=tf.int64, trainable=False),
                )
        return settings.accumulation


class _LossScaledDataParallel(_DataParallel):
    """Mixed in before ``LossScaleOptimizer``: unscale, average, then check for overflow."""

    def _refuse_unscaled_loss(self) -> None:
        settings = self._data_parallel
        scaled_in, settings.scaled_in = settings.scaled_in, None
        if scaled_in is None or scaled_in[0] is not current_graph():
            raise UnscaledLoss(
                "the model's train_step applies gradients of a loss that never passed "
                "self.optimizer.scale_loss(loss) under train.precision=mixed_float16: the "
                "updates would be divided by the loss scale; scale the loss before taking "
                "its gradients, as Keras' own train_step does"
            )

    def _local_gradients(self, grads: list, variables: list) -> list:
        inverse = 1.0 / self.dynamic_scale
        return [
            g
            if g is None or keras_internals.overwrites_with_gradient(self, v)
            else scaled(g, inverse)
            for g, v in zip(grads, variables, strict=True)
        ]

    def _update(self, grads: list, variables: list) -> None:
        """Apply the averaged gradients if finite on every rank, else skip and halve."""
        ops.cond(
            self.check_finite(grads),
            lambda: self._apply_finite(grads, variables),
            self._skip_non_finite,
        )

    def _apply_finite(self, grads: list, variables: list) -> None:
        self.inner_optimizer.apply(grads, variables)
        ops.cond(
            ops.equal(self.step_counter, self.dynamic_growth_steps - 1),
            self._grow_scale,
            self._count_finite_step,
        )

    def _grow_scale(self) -> None:
        self.step_counter.assign(0)
        self.dynamic_scale.assign(self.dynamic_scale * 2.0)

    def _count_finite_step(self) -> None:
        self.step_counter.assign_add(1)

    def _skip_non_finite(self) -> None:
        self.step_counter.assign(0)
        self.dynamic_scale.assign(self.dynamic_scale * 0.5)
        self._count_step()

    def _count_step(self) -> None:
        keras_internals.count_step(self.inner_optimizer)


class UnscaledLoss(ValueError):
    """A loss-scaled step whose loss was never scaled: the user's train_step, a config error."""


def portable_config(config: dict[str, Any], optimizer: Any) -> dict[str, Any]:
    """``config`` with tntrun's learning-rate schedule replaced by its current value (in the
    inner optimizer's config too, for a ``LossScaleOptimizer``)."""
    inner = getattr(optimizer, "inner_optimizer", optimizer)
    schedule = keras_internals.schedule_of(inner)
    if not type(schedule).__module__.startswith("tntrun."):
        return config
    # Keras' own schedule, constant at the current value: a number would make the loading
    # optimizer hold one variable more (its learning rate) and skip the saved state.
    constant = keras.optimizers.schedules.ExponentialDecay(
        float(schedule(inner.iterations)), decay_steps=1, decay_rate=1.0
    )
    value = keras.optimizers.schedules.serialize(constant)
    if isinstance(config.get("learning_rate"), dict):
        config["learning_rate"] = value
    nested = config.get("inner_optimizer", {})
    if isinstance(nested, dict) and isinstance(nested.get("config"), dict):
        nested["config"]["learning_rate"] = value
    return config


@functools.cache
def data_parallel_class(base: type) -> type:
    """``base`` with averaging mixed in, under ``base``'s own name and module."""
    loss_scaled = issubclass(base, keras.optimizers.LossScaleOptimizer)
    mixin = _LossScaledDataParallel if loss_scaled else _DataParallel
    namespace = {
        "__module__": base.__module__,
        "__qualname__": base.__qualname__,
        "_tntrun_base": base,
    }
    cls = type(base.__name__, (mixin, base), namespace)
    registered = keras.saving.get_registered_name(base)
    if registered != base.__name__:  # a registered custom optimizer serialises as before
        from keras.src.saving import object_registration

        object_registration.GLOBAL_CUSTOM_NAMES[cls] = registered
    return cls


def noise_scale_of(optimizer: Any) -> GradientNoiseScale | None:
    """The gradient noise scale ``optimizer`` measures (None: not data-parallel, or none)."""
    state = getattr(optimizer, "__dict__", {}).get(STATE_ATTRIBUTE)
    return None if state is None else state.noise_scale


def is_data_parallel(optimizer: Any) -> bool:
    """Whether ``optimizer`` averages its gradients over the ranks."""
    return isinstance(optimizer, _DataParallel)


def make_plain(optimizer: Any) -> None:
    """Undo :func:`data_parallel`: back to the optimizer's original class."""
    object.__setattr__(optimizer, "__class__", type(optimizer)._tntrun_base)
    optimizer.__dict__.pop(STATE_ATTRIBUTE, None)
