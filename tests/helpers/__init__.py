"""What tests share besides fixtures (those are in tests/conftest.py): running tntrun and
Horovod ranks as processes, the run directories they leave, the test hosts and the Slurm
cluster, the checks for real components, time bounds and the guard that keeps
processes out of the fast tests."""
