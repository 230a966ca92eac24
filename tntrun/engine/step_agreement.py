"""What every rank learns after each training step, at no extra communication.

Two scalars join the gradients' own allreduce (Horovod fuses them into the same
cycle and buffer): this rank's loss and whether this rank was asked to stop.
Their averages are the same on every rank after the step, so decisions taken
on them (stop on a non-finite loss, stop for preemption) are collective: every
rank decides alike at the same step, never rank 0 alone.
"""

from __future__ import annotations

from typing import Any

import horovod.tensorflow as hvd
import tensorflow as tf
import tf_keras as keras


class StepAgreement(keras.callbacks.Callback):
    """The last step's rank-averaged loss and stop request.

    As a callback placed before the guards that use it, it reads both once after
    each training step into :attr:`loss` and :attr:`stop`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._supports_tf_logs = True  # reads one variable, not the logs
        self.local_stop = tf.Variable(0.0, trainable=False, name="tntrun_local_stop")
        self.averaged = tf.Variable([0.0, 0.0], trainable=False, name="tntrun_step_agreement")
        self.loss, self.stop = 0.0, False

    def request_stop(self) -> None:
        """This rank asks to stop; the ranks stop together after the next step."""
        self.local_stop.assign(1.0)

    def read(self) -> tuple[float, bool]:
        """(rank-averaged loss, whether any rank asked to stop), the same on every rank."""
        loss, stop = self.averaged.numpy()
        self.loss, self.stop = float(loss), bool(stop > 0)
        return self.loss, self.stop

    def on_train_batch_end(self, batch, logs=None):
        self.read()


def agree_after_each_step(optimizer: Any) -> StepAgreement:
    """Make ``optimizer`` (Horovod's DistributedOptimizer) also average the loss and the stop
    requests of the step it applies.

    They are allreduced once this rank's gradients exist, i.e. when Horovod
    enqueues their allreduce, so they join its cycle and fusion buffer.
    """
    agreement = StepAgreement()
    tracing: dict[str, Any] = {}  # the loss of the step being traced
    compute_gradients, allreduce = optimizer.compute_gradients, optimizer._allreduce

    def compute_gradients_noting_loss(loss, var_list, tape=None):
        tracing["loss"] = loss
        try:
            return compute_gradients(loss, var_list, tape=tape)
        finally:
            tracing.clear()

    def allreduce_with_agreement(grads, variables):
        loss = tracing.get("loss")
        if loss is not None:
            with tf.control_dependencies([g for g in grads if g is not None]):
                local = tf.stack([tf.cast(loss, tf.float32), agreement.local_stop.read_value()])
                mean = hvd.allreduce(local, op=hvd.Average, name="tntrun.step_agreement")
            agreement.averaged.assign(mean)
        return allreduce(grads, variables)

    optimizer.compute_gradients = compute_gradients_noting_loss
    optimizer._allreduce = allreduce_with_agreement
    return agreement
