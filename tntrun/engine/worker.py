"""Rank-side entry point: ``python -m tntrun.engine.worker <run_dir>`` (started by the launcher).

Reads the plan the driver wrote into the run directory (its only input besides the
user's code: the plan carries the typed settings), takes its place from the variables of
the cluster environment its launcher names (srun's tasks: Slurm's), then trains.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tntrun.contract import run_files
from tntrun.contract.disk import DISK_MARK, disk_error_of
from tntrun.contract.exit_codes import EXIT_CONFIG_ERROR, EXIT_NONFINITE

if TYPE_CHECKING:
    from tntrun.contract.stop_requests import StopRequests
    from tntrun.planning.plan import Plan

os.environ.update(run_files.RANK_KERAS)  # before TensorFlow's import: Keras 3, on TensorFlow


def pin_to_socket(plan, argv: list[str]) -> None:
    """Re-execute this rank under ``numactl``, bound to its socket's cores and memory."""
    from tntrun.ranks import get_rank

    socket = plan.placements[get_rank()].socket
    os.environ[run_files.ENV_PINNED] = str(socket)
    numactl = ["numactl", f"--cpunodebind={socket}", f"--membind={socket}"]
    os.execvp("numactl", [*numactl, sys.executable, "-m", "tntrun.engine.worker", *argv[1:]])


# Libraries Keras 3 imports only if installed, for features no rank uses: scikit-learn for
# keras.wrappers, pandas for DataFrame inputs to fit, matplotlib for keras.visualization.
OPTIONAL_FOR_KERAS = ("sklearn", "pandas", "matplotlib")


def import_keras() -> None:
    """Import Keras 3 without its optional libraries (MLflow installs them all): they cost
    each rank about 1.5 s before its first step, half of Keras' import. A later import of
    one of them (by a user's module) works as usual; only the Keras features above then
    report it missing on the ranks."""
    if "keras" in sys.modules:
        return
    blocked = [name for name in OPTIONAL_FOR_KERAS if name not in sys.modules]
    for name in blocked:
        sys.modules[name] = None  # type: ignore[assignment]  # an ImportError for Keras
    try:
        import keras  # noqa: F401
    finally:
        for name in blocked:
            del sys.modules[name]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m tntrun.engine.worker <run_dir>", file=sys.stderr)
        return 2
    run_dir = Path(argv[1])
    from tntrun.contract.driver_alive import start_backstop, watch_driver

    watch_driver(run_dir)  # ends this rank within seconds of its driver (even a SIGKILLed one)
    start_backstop(run_dir)  # and kills it where the watch cannot run (the GIL held)
    from tntrun.contract.stop_requests import StopRequests
    from tntrun.planning.plan import SELF_BINDING, Plan

    plan = Plan.load(run_dir / run_files.PLAN)  # all this rank is asked to do
    # Preemption requests (signals, the driver's file) are noted from before TF's import on.
    requests = StopRequests(plan.settings.faults.preempt_signals, run_dir)

    from tntrun.config.user_code import add_user_path
    from tntrun.environments import environment_named

    # User modules (model._target_=mymodels.build) import from the driver's working directory.
    add_user_path(os.environ.get(run_files.ENV_USER_PATH))
    placed_by = os.environ.get(run_files.ENV_RANK_ENVIRONMENT)
    if placed_by:  # Horovod reads its HOROVOD_* variables: map the environment's to them
        os.environ.update(environment_named(placed_by, os.environ).rank_environment(plan.hosts))
    binds_itself = plan.bound_by == SELF_BINDING  # not a launcher that binds (mpirun)
    if plan.pin_to_socket and binds_itself and not os.environ.get(run_files.ENV_PINNED):
        pin_to_socket(plan, argv)
    from tntrun.engine.node_sampler import sampling_this_node

    tracking = plan.settings.tracking
    with sampling_this_node(tracking, run_dir):  # local rank 0: this host's system metrics
        return train_here(plan, run_dir, requests)


def train_here(plan: Plan, run_dir: Path, requests: StopRequests) -> int:
    """Start TensorFlow and Horovod, train this rank; its exit code."""
    import_keras()
    refused = start_runtime(plan)
    if refused is not None:
        return refused
    from tntrun.engine import runtime

    rank = runtime.hvd.rank()
    final = train_or_exit_code(plan, run_dir, requests, rank)
    if isinstance(final, int):
        return final
    refuse_mlflow_import(rank)
    if rank == 0:
        shown = ", ".join(f"{k}={v:.4f}" for k, v in final.items() if k.startswith("val_"))
        print(f"training done on {plan.world_size} ranks: {shown}", flush=True)
    print(f"rank {rank}: {run_files.RANK_DONE}", flush=True)
    return 0


def start_runtime(plan: Plan) -> int | None:
    """Horovod, threads, seeds and the rank's GPU; the exit code of a rank that cannot."""
    from tntrun.engine import runtime

    try:
        settings = plan.settings
        runtime.init(
            plan.threads_per_rank, settings.seed, settings.deterministic, plan.gpus_per_node
        )
    except runtime.MissingDevice as missing:
        print(f"tntrun: config error: {missing}", flush=True)
        return EXIT_CONFIG_ERROR
    runtime.check_rank_api()
    return None


def train_or_exit_code(
    plan: Plan, run_dir: Path, requests: StopRequests, rank: int
) -> dict[str, float] | int:
    """The final metrics of this rank's training, or the exit code of how it stopped
    (one line said, not a traceback)."""
    from tntrun.engine.nonfinite import NonFiniteLoss
    from tntrun.engine.preemption import Preempted
    from tntrun.engine.trainer import USER_ERRORS, train

    try:
        return train(plan, run_dir, requests)
    except NonFiniteLoss as stopped:  # every rank stops here at the same step
        policy = f" (faults.on_nonfinite={plan.settings.faults.on_nonfinite.value})"
        print(f"rank {rank}: stopped: {stopped}{'' if stopped.data else policy}", flush=True)
        return EXIT_NONFINITE
    except USER_ERRORS as refused:  # the same on every rank, before any step (or at the first)
        print(f"tntrun: config error: {refused}", flush=True)
        return EXIT_CONFIG_ERROR
    except Preempted as stopped:  # every rank, once rank 0's checkpoint of the step is written
        print(f"rank {rank}: preempted: {stopped}", flush=True)
        return 0  # not a failure: no launcher may kill a peer for it
    except Exception as err:  # last: bad labels or a full disk: one line, not a traceback
        code = exit_code_of_error(err, run_dir, rank)
        if code is None:
            raise
        return code


def exit_code_of_error(err: Exception, run_dir: Path, rank: int) -> int | None:
    """Bad labels (a config error) or a full disk: said in one line; its exit code. None
    for any other error (its traceback is the report)."""
    from tntrun.engine.loss_check import label_range_line

    labels = label_range_line(err)
    if labels is not None:
        print(f"tntrun: config error: rank {rank}: {labels}", flush=True)
        return EXIT_CONFIG_ERROR
    disk = disk_error_of(err, run_dir)
    if disk is None:
        return None
    print(f"{DISK_MARK}rank {rank}: {disk}", file=sys.stderr, flush=True)
    return 1


def refuse_mlflow_import(rank: int) -> None:
    """Its import alone would delay the first step by seconds; rank 0 imports it once
    trained, to write its model's MLflow folder (tntrun.engine.mlflow_model), and opens no
    store. Any other import of it on a rank is a bug."""
    from tntrun.engine import mlflow_model

    if "mlflow" in sys.modules and not mlflow_model.imported_mlflow():
        raise RuntimeError(f"rank {rank} imported mlflow: only the driver opens the store")


def exit_now(code: int) -> None:
    """End this rank without the interpreter's teardown of TensorFlow (about 1 s of CPU per
    rank): everything the rank writes is already closed, so flush the output, leave Horovod
    (a clean goodbye to the peers) and exit."""
    import logging

    sys.stdout.flush()
    sys.stderr.flush()
    logging.shutdown()
    if "tntrun.engine.runtime" in sys.modules:  # Horovod was started
        sys.modules["tntrun.engine.runtime"].hvd.shutdown()
    os._exit(code)


if __name__ == "__main__":
    # One write per line, even unbuffered (PYTHONUNBUFFERED=1 would write print()'s text and
    # its newline apart): Open MPI's --tag-output labels every write, not every line.
    sys.stdout.reconfigure(line_buffering=True, write_through=False)
    exit_now(main(sys.argv))
