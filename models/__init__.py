"""tntrun's model zoo (importable as ``tntrun.models``).

A model is a builder selected by ``_target_`` in ``conf/model/``; it receives
the dataset's ``input_shape`` and ``num_classes`` and returns an uncompiled
``tf_keras.Model`` whose output is class logits.
"""
