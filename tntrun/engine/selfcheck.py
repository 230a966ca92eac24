"""Set-up check run under ``horovodrun -np 2``: a real Gloo allreduce through TensorFlow.

Fails unless Horovod was built with TensorFlow support for the installed
TensorFlow and its collectives return the right sum.
"""

from __future__ import annotations

import sys


def main() -> int:
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    total = hvd.allreduce(tf.constant([float(hvd.rank() + 1)]), op=hvd.Sum, name="selfcheck")
    expected = hvd.size() * (hvd.size() + 1) / 2
    if float(total[0]) != expected:
        print(f"selfcheck FAILED: allreduce gave {float(total[0])}, expected {expected}")
        return 1
    print(
        f"selfcheck ok: {hvd.size()} ranks, allreduce sum {float(total[0]):g}, "
        f"TensorFlow {tf.__version__}, gloo={hvd.gloo_built()}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
