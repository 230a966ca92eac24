"""The installed MPIs (Debian's openmpi-bin and mpich, side by side), and choosing one.

tntrun's ``launcher=mpirun`` runs the ``mpirun`` first on the driver's PATH, as on a
site where ``module load`` puts one there; a test puts a directory first on PATH whose
``mpirun`` links to the MPI it tests, whatever Debian's alternatives point ``mpirun`` to.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers.components import require_commands

# MPI -> (its mpirun, the package that installs it, the real binary a plan names)
MPIS = {
    "openmpi": ("mpirun.openmpi", "openmpi-bin", "orterun"),
    "mpich": ("mpirun.mpich", "mpich", "mpiexec.hydra"),
}


def mpi_first_on_path(mpi: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Put ``mpi``'s mpirun first on PATH (missing: fail or skip naming the package); the
    name of the binary its plan's command starts with."""
    binary, package, real = MPIS[mpi]
    require_commands(binary, fix=f"apt-get install {package}")
    chosen = tmp_path / f"{mpi}-bin"
    chosen.mkdir()
    (chosen / "mpirun").symlink_to(f"/usr/bin/{binary}")
    monkeypatch.setenv("PATH", f"{chosen}{os.pathsep}{os.environ['PATH']}")
    return real
