"""Rank-side training engine. Imports TensorFlow and Horovod: never import it in the driver."""
