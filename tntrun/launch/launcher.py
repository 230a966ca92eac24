"""The launcher seam: what a launcher is, the registry of launchers, and the launch spec.

A launcher owns its command, rendered from the plan, the environment its ranks
get (``TNTRUN_RANK_ENVIRONMENT`` names the cluster environment whose task
variables place a rank it started), its pre-flight checks and what runs beside
the job (the rendezvous server of srun's and mpirun's ranks). Adding one is a module with a
:class:`Launcher` subclass and a line in :data:`LAUNCHERS` (or a dotted path:
``launcher=mypackage.launchers.MyLauncher``).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from tntrun.config.schema import HorovodConfig
from tntrun.contract.run_files import RANK_KERAS
from tntrun.environments.launchers import HOROVODRUN, MPIEXEC, MPIRUN, SRUN
from tntrun.errors import PlanError
from tntrun.planning.knobs import HorovodKnob
from tntrun.planning.machine import MachineFacts
from tntrun.planning.plan import SELF_BINDING, Plan
from tntrun.registry import find_class

LAUNCHERS = {
    HOROVODRUN: "tntrun.launch.horovodrun.HorovodrunLauncher",
    SRUN: "tntrun.launch.srun.SrunLauncher",
    MPIRUN: "tntrun.launch.mpirun.MpirunLauncher",
    MPIEXEC: "tntrun.launch.mpirun.MpirunLauncher",  # the same: MPI's other name for it
}


@dataclass(frozen=True)
class LaunchSpec:
    """Everything a launcher's command depends on (pure data, from the planner)."""

    hosts: tuple[tuple[str, int], ...]
    world_size: int
    knobs: tuple[HorovodKnob, ...]
    worker: tuple[str, ...]  # the rank's command: python -m tntrun.engine.worker <run dir>
    # The typed horovod.* settings the knobs render (start timeout, ssh, NIC are read here).
    horovod: HorovodConfig = field(default_factory=HorovodConfig)
    cpu_only: bool = True
    pin_to_socket: bool = False  # a launcher that binds ranks binds each to its socket
    cores_per_node: int | None = None  # the driver's node's (binding more ranks overloads)
    python: str = "python"  # the driver's interpreter, which the launcher command runs
    env: Mapping[str, str] = field(default_factory=dict)  # the driver's environment


class Launcher:
    """Starts the ranks of a plan. Subclasses override what differs."""

    name = ""
    # Binds each rank to its socket itself with pin_to_socket (else the rank does, under
    # numactl).
    binds_ranks = False

    def problems(self, spec: LaunchSpec) -> list[str]:
        """Why this launcher cannot run ``spec`` (pure; the planner reports them)."""
        return []

    def command(self, spec: LaunchSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        """The command that starts every rank, and the variables the ranks get (pure)."""
        raise NotImplementedError

    def preflight(self, plan: Plan, run_dir: Path) -> None:
        """Checks with side effects (ssh, servers) before any rank starts; raise PlanError."""

    @contextmanager
    def running(self, plan: Plan) -> Iterator[dict[str, str]]:
        """Context around the job; yields variables the ranks also get."""
        yield {}


def keras_override_note(environ: Mapping[str, str]) -> str | None:
    """One line when the user's environment asks for another Keras than the ranks run."""
    changed = [
        f"{key}={environ[key]}"
        for key, value in RANK_KERAS.items()
        if environ.get(key, value).strip().lower() not in (value, "", "false", "no")
    ]
    if not changed:
        return None
    return (
        f"{' and '.join(changed)} ignored: the ranks train Keras 3 on TensorFlow "
        f"({', '.join(f'{k}={v}' for k, v in RANK_KERAS.items())})"
    )


def base_environment(spec: LaunchSpec) -> dict[str, str]:
    """What every rank gets, whatever starts it."""
    # TensorFlow's C++ chatter off (Python errors still surface), unless the user asked for
    # a level: TF_CPP_MIN_LOG_LEVEL=0 shows XLA's "Compiled cluster" line, for one.
    env = {**RANK_KERAS, "TF_CPP_MIN_LOG_LEVEL": spec.env.get("TF_CPP_MIN_LOG_LEVEL", "3")}
    if spec.cpu_only:
        env["CUDA_VISIBLE_DEVICES"] = "-1"  # CPU ranks: keep TensorFlow off any GPU
    return env


def with_launch_command(plan: Plan, facts: MachineFacts, launcher: Launcher) -> Plan:
    """``plan`` with the command and variables ``launcher`` (the plan's, resolved once by
    the caller: the supervisor starts the ranks with it) renders from it (recorded in
    plan.json); PlanError when the launcher cannot run it."""
    spec = LaunchSpec(
        hosts=plan.hosts,
        world_size=plan.world_size,
        knobs=plan.horovod,
        worker=plan.worker,
        horovod=plan.settings.horovod,
        cpu_only=plan.gpus_per_node == 0,
        pin_to_socket=plan.pin_to_socket,
        cores_per_node=facts.cores_per_node,
        python=facts.python,
        env=facts.env,
    )
    problems = launcher.problems(spec)
    if plan.pin_to_socket and not launcher.binds_ranks and facts.numactl is None:
        problems.append(
            "pin_to_socket=true needs numactl, which is not installed: install it "
            f"(apt-get install numactl), use launcher={MPIRUN} (it binds the ranks itself) "
            "or set pin_to_socket=false"
        )
    if problems:
        raise PlanError(problems)
    command, env = launcher.command(spec)
    bound_by = launcher.name if launcher.binds_ranks else SELF_BINDING
    launch_env = tuple(sorted(env.items()))
    return replace(plan, launch_command=command, launch_env=launch_env, bound_by=bound_by)


def launcher_for(name: str) -> Launcher:
    """The launcher registered as ``name``, or the class at a dotted path."""
    found = find_class(name, LAUNCHERS, Launcher)
    if found is None:
        raise PlanError(
            f"launcher={name}: choose {', '.join([*LAUNCHERS][:-1])} or {[*LAUNCHERS][-1]} "
            "(or the dotted path of a tntrun.launch.launcher.Launcher subclass)"
        )
    return found()
