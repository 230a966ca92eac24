"""tntrun: declarative distributed training with Hydra, Horovod and MLflow.

The rank API below works inside a launched rank and, as rank 0 of 1, outside
of one. It never imports TensorFlow.
"""

from tntrun.ranks import get_local_rank, get_master_rank, get_rank, get_size, is_master_rank

__version__ = "0.1.0"
__all__ = [
    "get_local_rank",
    "get_master_rank",
    "get_rank",
    "get_size",
    "is_master_rank",
]
