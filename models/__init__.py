"""tntrun's model zoo (importable as ``tntrun.models``).

A model is a builder selected by ``_target_`` in ``conf/model/``; it receives
the dataset's ``input_shape`` and ``num_classes`` and returns an uncompiled
Keras model whose output is class logits: a ``tf_keras.Model`` under
``TF_USE_LEGACY_KERAS=1`` (tntrun's ranks), a Keras 3 one otherwise
(``tntrun.models.base.keras_module``).
"""
