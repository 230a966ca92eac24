"""Keras layers of the zoo's models, in modules that import Keras and TensorFlow at the top.

A subpackage, so that collecting the zoo's schemas (which imports every module of
``tntrun.models``, not those of its subpackages) imports no TensorFlow; a model's
builder imports its layers' module when it builds the model.
"""
