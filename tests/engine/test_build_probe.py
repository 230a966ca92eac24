"""What the installed Horovod was built with (:mod:`tntrun.engine.build_probe`), asked of this
environment's Horovod: the set-up builds it for TensorFlow with Gloo and no MPI, PyTorch or
MXNet (``scripts/build_horovod.py``), on the CPU without NCCL."""

from __future__ import annotations

import json

from tests.helpers.stack import horovod_wheel
from tntrun.engine.build_probe import checked_lines, extension_on_disk


def test_only_the_frameworks_whose_horovod_library_is_installed_count():
    assert extension_on_disk("tensorflow/mpi_lib")
    assert not extension_on_disk("torch/mpi_lib_v2")
    assert not extension_on_disk("mxnet/mpi_lib")
    assert not extension_on_disk("tensorflow/no_such_library")


def test_the_lines_are_check_builds_in_its_order_frameworks_controllers_operations():
    lines = checked_lines()
    built = json.loads((horovod_wheel().parent / "build.json").read_text())  # the set-up's record
    if built["device"] == "cpu":
        assert lines == ["[X] TensorFlow", "[X] Gloo", "[X] Gloo"]
    else:  # a GPU environment's Horovod adds NCCL's tensor operations
        assert lines == ["[X] TensorFlow", "[X] Gloo", "[X] NCCL", "[X] Gloo"]


def test_the_summary_is_cached_per_build_wherever_it_is_installed(tmp_path):
    """Two installs of one wheel share the cached summary; another library is another
    build (by content, not by path or install time)."""
    from tntrun.tracking.provenance import build_key

    first, second = tmp_path / "venv-a" / "horovod", tmp_path / "venv-b" / "horovod"
    for package in (first, second):
        (package / "tensorflow").mkdir(parents=True)
        (package / "metadata.json").write_text('{"tensorflow": "2.21.0"}')
        (package / "tensorflow" / "mpi_lib.so").write_bytes(b"\x7fELF built once")
    assert build_key(first) == build_key(second)
    (second / "tensorflow" / "mpi_lib.so").write_bytes(b"\x7fELF built again")
    assert build_key(first) != build_key(second)
