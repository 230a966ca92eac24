"""Models and datasets: the vision and translation zoos and users' Keras 3 models."""
