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


# The launchers a guarantee is proven under: horovodrun, and mpirun under each MPI.
LAUNCHERS = ("horovodrun", *(f"mpirun-{mpi}" for mpi in sorted(MPIS)))
# Where what is proven is the driver's own handling through mpirun (a watchdog, a restart)
# and the MPIs differ only in how they end their ranks, which the killed-rank, Ctrl-C and
# lost-driver tests prove under each: horovodrun and mpirun under one MPI.
DRIVER_LAUNCHERS = ("horovodrun", "mpirun-openmpi")


def use_launcher(
    launcher: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Set up one of :data:`LAUNCHERS`: the tntrun overrides that choose it and the roles the
    positive control finds beside its ranks on this host (the driver, the launcher, and
    MPICH's hydra_pmi_proxy, the daemon between mpiexec and its local ranks)."""
    if launcher == "horovodrun":
        return (), ("driver", "horovodrun")
    mpi = launcher.removeprefix("mpirun-")
    mpi_first_on_path(mpi, tmp_path, monkeypatch)
    daemon = ("mpi daemon",) if mpi == "mpich" else ()
    return ("launcher=mpirun",), ("driver", "mpirun", *daemon)
