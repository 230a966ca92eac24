"""tntrun's model zoo (importable as ``tntrun.models``).

A model is a builder selected by ``_target_`` in ``conf/model/``; it receives
the dataset's ``input_shape`` and ``num_classes`` and returns an uncompiled
Keras 3 model whose output is class logits (what tntrun's ranks train). The zoo can
also build its models with the legacy tf_keras under ``TF_USE_LEGACY_KERAS=1``
(``tntrun.models.base.keras_module``), which tests/test_zoo_keras3.py uses to show the
zoo's numbers unchanged from its tf_keras days.
"""
