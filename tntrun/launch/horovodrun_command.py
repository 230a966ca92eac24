"""``python -m tntrun.launch.horovodrun_command``: horovodrun, minus its TensorFlow import.

Before it starts any rank, horovodrun asks whether Horovod was built with Gloo by
importing ``horovod.tensorflow`` (all of TensorFlow, Keras and scikit-learn) in a
forked child: 5 s on a quiet 2-core node and 12 s beside a busy driver, on every
launch. This is horovodrun's own command line (``run_commandline``, all that the
``horovodrun`` script runs: the same flags, the same Gloo launch) with that question
put to the same native function, ``horovod_gloo_built`` of Horovod's TensorFlow
extension, loaded without TensorFlow's Python (0.3 s). When the extension cannot be
loaded that way, horovodrun asks as usual.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import sys
from pathlib import Path

from horovod.runner import launch

from tntrun.environments.launchers import HOROVODRUN

# What the extension needs loaded first (libtensorflow's import would load them).
TENSORFLOW_LIBRARIES = ("libtensorflow_framework.so.2", "libtensorflow_cc.so.2")
BUILT, NOT_BUILT, UNKNOWN = 0, 1, 2
RANK_FAILED = "processes exited with non-zero status"  # gloo_run's error when a rank fails


def package_folder(name: str) -> Path:
    """Where package ``name`` is installed, without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ImportError(f"{name} is not installed")
    return Path(spec.origin).parent


def ask_the_extension() -> int:
    """BUILT or NOT_BUILT from ``horovod_gloo_built``, UNKNOWN if the extension won't load."""
    try:
        tensorflow = package_folder("tensorflow")
        for library in TENSORFLOW_LIBRARIES:
            ctypes.CDLL(str(tensorflow / library), mode=ctypes.RTLD_GLOBAL)
        (extension,) = (package_folder("horovod") / "tensorflow").glob("mpi_lib*.so")
        return BUILT if ctypes.CDLL(str(extension)).horovod_gloo_built() else NOT_BUILT
    except (ImportError, OSError, ValueError, AttributeError):
        return UNKNOWN


def gloo_built_natively() -> bool | None:
    """Horovod's answer, from a forked child as horovodrun's own (TensorFlow's libraries
    stay out of this process, which lives as long as the job)."""
    child = os.fork()
    if child == 0:  # never returns: whatever happens, the child ends here
        answer = UNKNOWN
        try:
            answer = ask_the_extension()
        finally:
            os._exit(answer)
    _, status = os.waitpid(child, 0)
    answer = os.waitstatus_to_exitcode(status)
    return {BUILT: True, NOT_BUILT: False}.get(answer)


def main() -> None:
    built = gloo_built_natively()
    if built is not None:
        launch.gloo_built = lambda verbose=False: built
    sys.argv[0] = HOROVODRUN  # its usage and error lines
    try:
        launch.run_commandline()
    except RuntimeError as failed:  # a rank failed: the ranks' own output says why
        if RANK_FAILED not in str(failed):
            raise
        print(failed, file=sys.stderr, flush=True)  # which rank first (read by rank_logs)
        sys.exit(1)  # as the horovodrun script, without a traceback of the launcher's own


if __name__ == "__main__":
    main()
