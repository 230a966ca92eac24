"""tntrun's dataset zoo (importable as ``tntrun.datasets``).

A dataset is a class selected by ``_target_`` in ``conf/dataset/``. Its
``info()`` describes sizes and shapes without TensorFlow (the driver plans with
it); ``load()`` returns unbatched ``tf.data.Dataset`` splits on the ranks.
"""
