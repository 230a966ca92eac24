"""The rank API works outside a launch and reads the launcher's environment."""

from __future__ import annotations

import tntrun


def test_outside_a_launch_it_is_rank_0_of_1(monkeypatch):
    for name in (
        "HOROVOD_RANK",
        "HOROVOD_SIZE",
        "HOROVOD_LOCAL_RANK",
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "SLURM_PROCID",
        "SLURM_NTASKS",
        "SLURM_LOCALID",
    ):
        monkeypatch.delenv(name, raising=False)
    assert (tntrun.get_rank(), tntrun.get_size(), tntrun.get_local_rank()) == (0, 1, 0)
    assert tntrun.get_master_rank() == 0 and tntrun.is_master_rank()


def test_inside_a_horovod_launch(monkeypatch):
    monkeypatch.setenv("HOROVOD_RANK", "3")
    monkeypatch.setenv("HOROVOD_SIZE", "8")
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "1")
    assert (tntrun.get_rank(), tntrun.get_size(), tntrun.get_local_rank()) == (3, 8, 1)
    assert not tntrun.is_master_rank()
