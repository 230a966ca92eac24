"""What the installed Horovod was built with, asked in one process (``python -m`` this module).

Prints the lines of ``horovodrun --check-build`` that are checked (``[X] TensorFlow``,
``[X] Gloo``, ...), in its order: frameworks, controllers, tensor operations. check-build
asks each question in a forked process that imports the framework again (23 CPU-s on 2
cores for a CPU build); here TensorFlow's extension is loaded once and asked directly.
A framework counts when its Horovod extension is on disk and loads (PyTorch's and MXNet's
are looked up without importing those frameworks, which tntrun does not use).
"""

from __future__ import annotations

import importlib.util
import sys
from importlib.machinery import EXTENSION_SUFFIXES
from pathlib import Path

# Horovod's extension library per framework, in its package (horovod/common/util.py's names).
EXTENSIONS = {
    "TensorFlow": "tensorflow/mpi_lib",
    "PyTorch": "torch/mpi_lib_v2",
    "MXNet": "mxnet/mpi_lib",
}


def extension_on_disk(library: str) -> bool:
    """Whether ``horovod/<library>.<suffix>`` exists; imports neither Horovod nor a framework."""
    spec = importlib.util.find_spec("horovod")
    if spec is None or spec.origin is None:
        return False
    package = Path(spec.origin).parent
    return any(package.joinpath(library + suffix).exists() for suffix in EXTENSION_SUFFIXES)


def checked_lines() -> list[str]:
    """``[X] <name>`` for each framework, controller and tensor operation that is built."""
    frameworks = [name for name, library in EXTENSIONS.items() if extension_on_disk(library)]
    if "TensorFlow" not in frameworks:
        return [f"[X] {name}" for name in frameworks]
    import horovod.tensorflow as hvd  # loads the extension: it was built for this TensorFlow

    controllers = {"MPI": hvd.mpi_built(), "Gloo": hvd.gloo_built()}
    operations = {
        "NCCL": hvd.nccl_built(),
        "DDL": hvd.ddl_built(),
        "CCL": hvd.ccl_built(),
        "MPI": hvd.mpi_built(),
        "Gloo": hvd.gloo_built(),
    }
    built = [*frameworks, *(n for n, ok in controllers.items() if ok)]
    built += [name for name, ok in operations.items() if ok]
    return [f"[X] {name}" for name in built]


def main() -> int:
    print(" ".join(checked_lines()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
