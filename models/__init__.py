"""tntrun's model zoo (importable as ``tntrun.models``).

A model is a builder selected by ``_target_`` in ``conf/model/``; it receives
the dataset's ``input_shape`` and ``num_classes`` and returns an uncompiled
Keras 3 model whose output is class logits (``tntrun.models.base``).
"""
