"""tntrun's own data parallelism for Keras 3 on TensorFlow: gradients averaged over Horovod
ranks with ``horovod.tensorflow`` collectives only.

Why not Horovod's Keras layer: under Keras 3 its ``DistributedOptimizer`` fails at
``compile`` or silently skips the allreduce, and its broadcast callback raises
(horovod#4290).

Mechanism. :func:`data_parallel` changes the class of the given optimizer to a subclass
of its own class, made once per class at run time, that averages in ``apply``. Every
update passes there: ``apply_gradients`` calls ``apply``, Keras' ``train_step`` calls
``apply_gradients``, and a ``train_step`` or loop of one's own calls either. So the default
step, a user's override and a custom loop are all averaged. The object stays the same: its
state, its learning-rate schedule (with any variable inside it) and a model compiled with it
keep working. ``isinstance`` still holds, so ``model.compile`` does not wrap a data-parallel
``LossScaleOptimizer`` again. The subclass has the name and module of its base, so
``get_config`` and serialisation are the base's and a saved model loads a plain optimizer
anywhere, without tntrun or Horovod. A wrapper optimizer was rejected: Keras reads
``iterations``, ``learning_rate``, ``variables``, ``built`` and ``inner_optimizer`` from the
optimizer directly, so a wrapper would have to forward all of them, and it would serialise
as itself.

One allreduce per update. The non-None gradients and the agreement vector (below) go
through one ``hvd.grouped_allreduce(op=hvd.Average)``, so Horovod's tensor fusion, cycle
time and autotuning apply. A Horovod group holds one dtype: tensors of another dtype go in
a second grouped op in the same cycle. With ``hvd.Compression.fp16`` that means the float16
gradients in one op and the float32 agreement vector in another. ``None`` gradients are
passed on as ``None``. ``tf.IndexedSlices`` stay sparse (Horovod allgathers them) and are
not compressed.

Accumulation (``backward_passes_per_step=N``). tntrun accumulates itself and refuses
Keras' ``gradient_accumulation_steps``, for two reasons. Keras' accumulation makes
``optimizer.iterations`` count updates, but tntrun's schedules and callbacks count
micro-steps, as Horovod's aggregation did under tf_keras. And under loss scaling it runs in
the inner optimizer, after the ``LossScaleOptimizer``'s local finite check, so an overflow on
one rank would skip that rank's update and its allreduce alone. Here each micro-step adds this
rank's gradients to accumulators that are not saved with the optimizer. Every N-th micro-step
allreduces their mean (one allreduce per N steps) and Keras applies one update with it, with
clipping, weight decay and the finite check as usual. Every micro-step counts one
``iterations``, so at each update the schedule sees the index of the last micro-step.

Loss scaling (``keras.optimizers.LossScaleOptimizer``, ``mixed_float16``). The outer
optimizer is made data-parallel and its inner one stays plain. The gradients are unscaled,
allreduced (and compressed at their true magnitude), and only then checked for inf/NaN. An
overflow on any rank reaches every rank through the average, so all ranks skip the same
updates and halve the same loss scale, and the loss scales stay equal. A skipped step still
counts one ``iterations``, as tf_keras counted it. ``model.compile`` under ``mixed_float16``
wraps a plain data-parallel optimizer in a plain ``LossScaleOptimizer``, whose local finite
check would let the ranks disagree. To avoid that, pass ``data_parallel(LossScaleOptimizer(opt))``
to ``compile``, or call ``data_parallel(model.optimizer)`` afterwards, which moves the
averaging outward. :func:`broadcast_state` refuses the unsafe order.

Agreement (:func:`agree_after_each_step`). Keras' ``train_step`` passes the step's loss
through ``optimizer.scale_loss``, which notes it. ``[loss, local_stop]`` then rides in the
gradients' allreduce, and its rank average lands in a variable that a callback reads after
the step. A ``train_step`` of one's own should call ``self.optimizer.scale_loss(loss)``, as
Keras' does (``mixed_float16`` needs it anyway), or :func:`note_loss`. Otherwise the loss
entry is 0.

XLA. Horovod's ops are not XLA ops, so ``apply`` refuses to be traced into a
``jit_compile`` function with one clear error. Keras' ``jit_compile="auto"`` turns XLA on
when a GPU is present, so compile with ``jit_compile=False``. To use XLA anyway, compile only
the forward pass, loss and gradients: call a ``tf.function(jit_compile=True)`` that returns
``(loss, gradients)`` from ``train_step``, then ``note_loss(optimizer, loss)`` and
``optimizer.apply(gradients, variables)`` outside it. A loss noted inside XLA belongs to
another graph and is dropped.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import horovod.tensorflow as hvd
import keras
import tensorflow as tf
from keras import ops
from tensorflow.python.ops import control_flow_util

LEGACY_PACKAGES = ("tf_keras", "tensorflow.python.keras")
_SETTINGS = "_tntrun_data_parallel"  # the instance attribute, invisible to Keras and TF tracking
_AGREEMENT_LOG = "_tntrun_step_agreement"  # the agreement's entry in the compiled step's logs


class LegacyKeras(ValueError):
    """A model or optimizer of the legacy tf_keras package (Keras 2)."""


def require_keras3(obj: Any, what: str) -> None:
    """Refuse a legacy tf_keras ``obj`` (a model, an optimizer) with one line naming the fix."""
    if any(cls.__module__.startswith(LEGACY_PACKAGES) for cls in type(obj).__mro__):
        raise LegacyKeras(
            f"this {what} was built with the legacy tf_keras package; tntrun trains Keras 3: "
            "use `import keras` (and unset TF_USE_LEGACY_KERAS)"
        )


class StepAgreement(keras.callbacks.Callback):
    """The last update's rank-averaged loss and stop request, the same on every rank, and
    whether any rank's training batch held NaN or infinite values.

    As a callback placed before the guards that use it, it reads them after each training
    step into :attr:`loss`, :attr:`stop` and :attr:`bad_data`. Under
    ``backward_passes_per_step`` > 1 they are refreshed on update steps (the loss is then the
    mean over the micro-steps). The data check is there because a NaN input can leave the
    loss finite (a ReLU maps it to 0) while its gradient poisons the weights.

    In ``fit`` the vector leaves the compiled step as one more output: reading the variable
    after the step is an eager op, which cost about 0.25 ms of a 4 ms step (py-spy, 2 ranks).
    Outside ``fit`` (``train_on_batch`` of a model never fitted, a loop of one's own)
    :meth:`read` reads the variable.
    """

    def __init__(self) -> None:
        super().__init__()
        self.local_stop = tf.Variable(0.0, trainable=False, name="tntrun_local_stop")
        # Sticky: a bad batch in a micro-step without an update is still reported.
        self.local_bad_data = tf.Variable(0.0, trainable=False, name="tntrun_local_bad_data")
        # A callback of this rank set stop_training inside an epoch (callbacks.StopAgreement).
        self.local_user_stop = tf.Variable(0.0, trainable=False, name="tntrun_local_user_stop")
        self.averaged = tf.Variable([0.0] * 4, trainable=False, name="tntrun_step_agreement")
        self.loss, self.stop, self.bad_data, self.user_stop = 0.0, False, False, False
        self._from_step: tf.Tensor | None = None  # the output of the last step run by fit

    def request_stop(self) -> None:
        """This rank asks to stop; the ranks learn it together at the next update."""
        self.local_stop.assign(1.0)

    def read(self) -> tuple[float, bool]:
        """(rank-averaged loss, whether any rank asked to stop); also sets :attr:`bad_data`."""
        source = self.averaged if self._from_step is None else self._from_step
        loss, stop, bad_data, user_stop = source.numpy()
        self.loss, self.stop, self.bad_data = float(loss), bool(stop > 0), bool(bad_data > 0)
        self.user_stop = bool(user_stop > 0)
        return self.loss, self.stop

    def check_batch(self, data: Any) -> None:
        """Note whether this rank's batch (its floating-point tensors) is finite."""
        floats = [
            t for t in tf.nest.flatten(data) if isinstance(t, tf.Tensor) and t.dtype.is_floating
        ]
        if floats:
            finite = tf.reduce_all([tf.reduce_all(tf.math.is_finite(t)) for t in floats])
            bad = 1.0 - tf.cast(finite, tf.float32)
            self.local_bad_data.assign(tf.maximum(self.local_bad_data, bad))

    def on_train_begin(self, logs=None):
        self._from_step = None
        self.local_user_stop.assign(0.0)  # a new fit (after a rollback) starts undecided
        if getattr(self.model.train_function, _SETTINGS, None) is not self:
            self.model.train_function = self._train_function(self.model)

    def on_train_batch_end(self, batch, logs=None):
        self.read()

    def _train_function(self, model: Any) -> Any:
        """Keras' train function for ``model``'s own ``train_step``, which also returns the
        agreement vector; it takes the vector out of the logs, so that Keras and the other
        callbacks see the step's logs unchanged."""
        step = model.train_step

        def step_with_agreement(data):
            self.check_batch(data)
            logs = step(data)
            if isinstance(logs, dict):  # read after the update: automatic control dependencies
                logs = {**logs, _AGREEMENT_LOG: self.averaged.read_value()}
            return logs

        compiled = model._make_function(step_with_agreement)

        def train_function(iterator):
            logs = compiled(iterator)
            if isinstance(logs, dict):
                self._from_step = logs.pop(_AGREEMENT_LOG, None)
            return logs

        setattr(train_function, _SETTINGS, self)
        return train_function

    def local_vector(self, loss: tf.Tensor | None) -> tf.Tensor:
        """``[loss, local_stop, local_bad_data, local_user_stop]`` of this rank (loss 0 when
        none was noted)."""
        value = tf.zeros([]) if loss is None else tf.reduce_mean(tf.cast(loss, tf.float32))
        flags = (self.local_stop, self.local_bad_data, self.local_user_stop)
        return tf.stack([value, *(flag.read_value() for flag in flags)])


@dataclasses.dataclass(eq=False)
class _Accumulation:
    """Per-variable sums of this rank's gradients since the last update (not checkpointed:
    a resumed run starts a fresh accumulation)."""

    gradients: list[tf.Variable]
    loss: tf.Variable
    micro_steps: tf.Variable


@dataclasses.dataclass(eq=False)
class _Settings:
    """What :func:`data_parallel` was asked for, plus the step's transient state."""

    compression: Any = hvd.Compression.none
    backward_passes_per_step: int = 1
    agreement: StepAgreement | None = None
    accumulation: _Accumulation | None = None
    noted: tuple[Any, tf.Tensor] | None = None  # (graph, loss) of the step being traced
    traced: bool = False

    def take_loss(self) -> tf.Tensor | None:
        """The loss noted in the current graph (None if none, or noted in another graph)."""
        noted, self.noted = self.noted, None
        if noted is None or noted[0] is not _current_graph():
            return None
        return noted[1]


def _current_graph() -> Any:
    return None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()


def _refuse_xla() -> None:
    if control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph()):
        raise ValueError(
            "tntrun averages gradients with Horovod collectives, which XLA cannot compile: "
            "use model.compile(..., jit_compile=False) (see tntrun.engine.data_parallel for "
            "compiling only the forward and backward pass)"
        )


def _scaled(gradient: Any, factor: tf.Tensor) -> Any:
    """``gradient * factor`` for a dense gradient or ``tf.IndexedSlices``."""
    if isinstance(gradient, tf.IndexedSlices):
        values = gradient.values * tf.cast(factor, gradient.values.dtype)
        return tf.IndexedSlices(values, gradient.indices, gradient.dense_shape)
    return gradient * tf.cast(factor, gradient.dtype)


def _grouped_average(tensors: Sequence[Any]) -> list[Any]:
    """Rank averages of ``tensors``: one ``grouped_allreduce`` per dtype (usually one)."""
    by_dtype: dict[tf.DType, list[int]] = {}
    for i, tensor in enumerate(tensors):
        by_dtype.setdefault(tensor.dtype, []).append(i)
    averaged: list[Any] = [None] * len(tensors)
    for positions in by_dtype.values():
        reduced = hvd.grouped_allreduce([tensors[i] for i in positions], op=hvd.Average)
        for i, tensor in zip(positions, reduced, strict=True):
            averaged[i] = tensor
    return averaged


def _allreduce(grads: Sequence[Any], compression: Any, extra: tf.Tensor | None) -> tuple:
    """(rank-averaged ``grads`` with ``None`` kept, rank-averaged ``extra``).

    Dense gradients are compressed before and decompressed after the allreduce.
    """
    present = [i for i, g in enumerate(grads) if g is not None]
    sent, contexts = [], []
    for i in present:
        if isinstance(grads[i], tf.IndexedSlices):
            sent.append(grads[i])
            contexts.append((False, None))
        else:
            compressed, context = compression.compress(grads[i])
            sent.append(compressed)
            contexts.append((True, context))
    reduced = _grouped_average(sent if extra is None else [*sent, extra])
    averaged: list[Any] = [None] * len(grads)
    for i, tensor, (dense, context) in zip(present, reduced[: len(sent)], contexts, strict=True):
        averaged[i] = compression.decompress(tensor, context) if dense else tensor
    return averaged, (None if extra is None else reduced[-1])


class _DataParallel:
    """Mixed in before a Keras 3 optimizer class: ``apply`` averages over the ranks."""

    @property
    def _data_parallel(self) -> _Settings:
        # An instance made by from_config of this class (a clone) still averages.
        if _SETTINGS not in self.__dict__:
            object.__setattr__(self, _SETTINGS, _Settings())
        return self.__dict__[_SETTINGS]

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
        schedule = inner._learning_rate
        if hasattr(schedule, "rescale_to") and not callable(value):
            schedule.rescale_to(float(value), inner.iterations)
        else:
            type(self)._tntrun_base.learning_rate.fset(self, value)

    def scale_loss(self, loss):
        """Keras' ``train_step`` passes each step's loss here: note it for the agreement."""
        self._data_parallel.noted = (_current_graph(), loss)
        return super().scale_loss(loss)

    def apply(self, grads, trainable_variables=None):
        """Average ``grads`` over the ranks (every N-th micro-step), then update."""
        _refuse_xla()
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

    def _variables_for(self, trainable_variables, count: int) -> list:
        """The variables ``apply`` updates; builds the optimizer on its first variables."""
        if trainable_variables is None:
            if not self.built or count != len(self._trainable_variables):
                raise ValueError(
                    "apply(grads) without variables needs an optimizer built on exactly "
                    "as many variables: call optimizer.build(variables) first"
                )
            return list(self._trainable_variables)
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
        settings = self._data_parallel
        agreement = settings.agreement
        extra = None if agreement is None else agreement.local_vector(loss)
        averaged, agreed = _allreduce(grads, settings.compression, extra)
        if agreed is not None:
            agreement.averaged.assign(agreed)
        self._update(averaged, variables)

    def _update(self, grads: list, variables: list) -> None:
        """One optimizer update with the rank-averaged gradients (Keras' own ``apply``)."""
        super().apply(grads, variables)

    def _count_step(self) -> None:
        """A micro-step without an update still counts one ``iterations``."""
        self._iterations.assign_add(1)

    def _accumulate(self, grads: list, variables: list, loss) -> None:
        state = self._accumulators()
        present = [g is not None for g in grads]
        for gradient, variable in zip(grads, variables, strict=True):
            if gradient is not None:
                total = state.gradients[self._get_variable_index(variable)]
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
        sums = [state.gradients[self._get_variable_index(v)] for v in variables]
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
                        for v in self._trainable_variables
                    ],
                    loss=tf.Variable(0.0, trainable=False),
                    micro_steps=tf.Variable(0, dtype=tf.int64, trainable=False),
                )
        return settings.accumulation


class _LossScaledDataParallel(_DataParallel):
    """Mixed in before ``LossScaleOptimizer``: unscale, average, then check for overflow."""

    def _local_gradients(self, grads: list, variables: list) -> list:
        inverse = 1.0 / self.dynamic_scale
        return [
            g if g is None or self._overwrite_variable_with_gradient(v) else _scaled(g, inverse)
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
        self.inner_optimizer._iterations.assign_add(1)


@functools.cache
def _data_parallel_class(base: type) -> type:
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


def is_data_parallel(optimizer: Any) -> bool:
    """Whether ``optimizer`` averages its gradients over the ranks."""
    return isinstance(optimizer, _DataParallel)


def _make_plain(optimizer: Any) -> None:
    """Undo :func:`data_parallel`: back to the optimizer's original class."""
    object.__setattr__(optimizer, "__class__", type(optimizer)._tntrun_base)
    optimizer.__dict__.pop(_SETTINGS, None)


def data_parallel(
    optimizer: Any,
    compression: Any = None,
    backward_passes_per_step: int | None = None,
) -> keras.optimizers.Optimizer:
    """Make ``optimizer`` (any Keras 3 optimizer, or a ``LossScaleOptimizer``) average its
    gradients over all Horovod ranks in every update; returns the same object.

    ``compression``: ``hvd.Compression.none`` or ``hvd.Compression.fp16``.
    ``backward_passes_per_step``: micro-steps accumulated locally per allreduce and update.
    ``None`` keeps what an earlier call set on this optimizer, or on the inner optimizer
    that ``model.compile`` wrapped (else ``none`` and 1). Call before the first training
    step (before ``fit`` traces ``train_step``).
    """
    require_keras3(optimizer, "optimizer")
    optimizer = keras.optimizers.get(optimizer)
    _check_optimizer(optimizer)
    settings = _earlier_settings(optimizer)
    if compression is not None:
        settings.compression = compression
    if backward_passes_per_step is not None:
        settings.backward_passes_per_step = backward_passes_per_step
    _check_settings(settings)
    inner = getattr(optimizer, "inner_optimizer", None)
    if is_data_parallel(inner):  # model.compile wrapped it: the outer optimizer averages
        _make_plain(inner)
    if not is_data_parallel(optimizer):
        object.__setattr__(optimizer, "__class__", _data_parallel_class(type(optimizer)))
    object.__setattr__(optimizer, _SETTINGS, settings)
    return optimizer


def _check_optimizer(optimizer: Any) -> None:
    if keras.backend.backend() != "tensorflow":
        raise ValueError("tntrun's data parallelism needs KERAS_BACKEND=tensorflow")
    if not isinstance(optimizer, keras.optimizers.Optimizer):
        raise TypeError(f"data_parallel needs a Keras 3 optimizer, got {type(optimizer)!r}")
    for opt in (optimizer, getattr(optimizer, "inner_optimizer", None)):
        if getattr(opt, "gradient_accumulation_steps", None):
            raise ValueError(
                "Keras' gradient_accumulation_steps is not averaged over ranks: set "
                "tntrun's backward_passes_per_step instead (one allreduce per update)"
            )


def _earlier_settings(optimizer: Any) -> _Settings:
    """A fresh copy of the settings of an earlier :func:`data_parallel` on ``optimizer`` or
    on its inner optimizer (else the defaults)."""
    inner = getattr(optimizer, "inner_optimizer", None)
    earlier = [opt._data_parallel for opt in (optimizer, inner) if is_data_parallel(opt)]
    if any(settings.traced for settings in earlier):
        raise ValueError("this optimizer has trained already: call data_parallel before that")
    if not earlier:
        return _Settings()
    return dataclasses.replace(earlier[0], accumulation=None, noted=None)


def _check_settings(settings: _Settings) -> None:
    passes = settings.backward_passes_per_step
    if not isinstance(passes, int) or passes < 1:
        raise ValueError(f"backward_passes_per_step={passes!r}: need an int >= 1")
    if settings.compression not in (hvd.Compression.none, hvd.Compression.fp16):
        raise ValueError("compression: use hvd.Compression.none or hvd.Compression.fp16")


def agree_after_each_step(optimizer: Any) -> StepAgreement:
    """Make the data-parallel ``optimizer`` also average ``[loss, local_stop]`` in each
    update's allreduce; returns the callback that reads the result after each step."""
    if not is_data_parallel(optimizer):
        raise ValueError("agree_after_each_step needs an optimizer made by data_parallel()")
    settings = optimizer._data_parallel
    if settings.traced:
        raise ValueError("attach the step agreement before the first training step")
    if settings.agreement is None:
        settings.agreement = StepAgreement()
    return settings.agreement


def note_loss(optimizer: Any, loss: tf.Tensor) -> None:
    """Note ``loss`` as this step's loss for the agreement (what ``scale_loss`` does), for
    steps whose loss never passes through ``optimizer.scale_loss`` outside XLA."""
    optimizer._data_parallel.noted = (_current_graph(), loss)


def _refuse_unaveraged_loss_scaling(model: Any, optimizer: Any) -> None:
    """Refuse a plain ``LossScaleOptimizer`` (``model.compile`` under mixed_float16) around
    a data-parallel optimizer: its local finite check would let the ranks disagree."""
    for opt in (optimizer, getattr(model, "optimizer", None)):
        inner = getattr(opt, "inner_optimizer", None)
        if is_data_parallel(inner) and not is_data_parallel(opt):
            raise ValueError(
                "a plain LossScaleOptimizer wraps the data-parallel optimizer (model.compile "
                "does so under mixed_float16): call data_parallel(model.optimizer) after compile"
            )


def _tf_variable(variable: Any) -> tf.Variable:
    """The ``tf.Variable`` behind a Keras 3 ``Variable`` (kept in ``.value``)."""
    return variable.value if isinstance(variable, keras.Variable) else variable


def broadcast_state(model: Any, optimizer: Any, root_rank: int = 0) -> None:
    """Give every rank ``root_rank``'s model weights and optimizer variables.

    The optimizer is built on the model's trainable variables first, so its slots exist to
    be sent. Model weights are trainable and non-trainable ones (e.g. batch-norm statistics),
    not metric state or random-seed state: each rank keeps its own dropout seeds.
    """
    require_keras3(model, "model")
    require_keras3(optimizer, "optimizer")
    _refuse_unaveraged_loss_scaling(model, optimizer)
    if not model.weights:
        raise ValueError("broadcast_state: build the model first (give it an Input or call it)")
    if not optimizer.built:
        optimizer.build(model.trainable_variables)
    variables: dict[int, tf.Variable] = {}
    for variable in [*model.weights, *optimizer.variables]:
        variables.setdefault(id(variable), _tf_variable(variable))
    hvd.broadcast_variables(list(variables.values()), root_rank=root_rank)
