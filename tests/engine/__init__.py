"""The rank side: training on Horovod ranks, data parallelism, precision, data, FLOPs."""
