"""The launchers' names, as ``launcher=`` takes them and as their commands are called.

Named once, here at the bottom: the launch registry and each launcher read them, their
messages name them, and an environment whose scheduler starts ranks with one names it
(PBS: mpirun), below the launch package it cannot import.
"""

from __future__ import annotations

HOROVODRUN = "horovodrun"  # Horovod's own launcher, over ssh (Gloo)
SRUN = "srun"  # Slurm's, inside an allocation
MPIRUN = "mpirun"  # the site's MPI (Open MPI or MPICH)
MPIEXEC = "mpiexec"  # MPI's other name for mpirun (Cray PALS has only this one)
