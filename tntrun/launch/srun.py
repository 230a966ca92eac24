"""``launcher=srun``: Slurm starts the ranks inside an allocation; tntrun serves the rendezvous.

Every Slurm task runs ``python -m tntrun.engine.worker``; before Horovod starts,
the rank maps SLURM_PROCID and friends to the HOROVOD_* variables horovodrun
would have set (the Slurm environment's ``rank_environment``, named to the ranks
by ``TNTRUN_RANK_ENVIRONMENT``). The ranks meet at a Gloo rendezvous
server the driver runs beside the job (``tntrun.launch.rendezvous``). Horovod knobs reach the
ranks as HOROVOD_* variables.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from tntrun.contract.run_files import ENV_RANK_ENVIRONMENT
from tntrun.environments.launchers import HOROVODRUN, SRUN
from tntrun.environments.slurm import (
    SlurmEnvironment,
    allocated_cpus_per_node,
    expand_slurm_nodelist,
)
from tntrun.launch.launcher import Launcher, LaunchSpec, base_environment
from tntrun.launch.rendezvous import serving_rendezvous

if TYPE_CHECKING:
    from tntrun.planning.plan import Plan


class SrunLauncher(Launcher):
    name = SRUN

    def problems(self, spec: LaunchSpec) -> list[str]:
        env = spec.env
        if not env.get("SLURM_JOB_NODELIST"):
            return [
                f"launcher={SRUN} needs a Slurm allocation (salloc/sbatch): no "
                f"SLURM_JOB_NODELIST here; use launcher={HOROVODRUN}"
            ]
        # Every other knob reaches the ranks as HOROVOD_* variables (command()); these cannot.
        no_effect = [knob for knob in spec.knobs if knob.over_ssh]
        if no_effect:
            return [
                f"horovod.{knob.key}={knob.value} has no effect with launcher={SRUN} ({SRUN} "
                "starts the ranks, nothing connects over ssh): remove it"
                for knob in no_effect
            ]
        nodes = expand_slurm_nodelist(env["SLURM_JOB_NODELIST"])
        if len(spec.hosts) > len(nodes):
            return [
                f"nodes={len(spec.hosts)}: the Slurm allocation has {len(nodes)} node(s) "
                f"({env['SLURM_JOB_NODELIST']}); set nodes={len(nodes)} or allocate "
                f"-N {len(spec.hosts)}"
            ]
        cpus = allocated_cpus_per_node(env)
        per_node = max(slots for _, slots in spec.hosts)
        if cpus and per_node > min(cpus):
            return [
                f"ranks_per_node={per_node}: the Slurm allocation has {min(cpus)} CPU(s) on "
                f"a node (SLURM_JOB_CPUS_PER_NODE={env['SLURM_JOB_CPUS_PER_NODE']}); set "
                f"ranks_per_node={min(cpus)} or allocate --ntasks-per-node={per_node}"
            ]
        return []

    def command(self, spec: LaunchSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        env = base_environment(spec)
        for knob in spec.knobs:
            env.update(knob.env)  # problems() refused the knobs srun cannot carry
        env[ENV_RANK_ENVIRONMENT] = SlurmEnvironment.name  # ranks: SLURM_PROCID -> HOROVOD_RANK
        per_node = spec.hosts[0][1]
        cpus_per_rank = max(1, min(allocated_cpus_per_node(spec.env) or [1]) // per_node)
        # --overlap: the step shares the allocation with the driver's own step (sbatch's
        # batch step, or submitit's task); each rank gets its share of a node's CPUs.
        command = (
            SRUN,
            f"--nodes={len(spec.hosts)}",
            f"--ntasks={spec.world_size}",
            f"--ntasks-per-node={per_node}",
            f"--cpus-per-task={cpus_per_rank}",
            "--overlap",
            "--distribution=block",
            "--kill-on-bad-exit=1",
            "--label",
            *spec.worker,
        )
        return command, env

    @contextmanager
    def running(self, plan: Plan) -> Iterator[dict[str, str]]:
        """The Gloo rendezvous server the ranks meet at; yields their variables."""
        with serving_rendezvous(plan) as variables:
            yield variables
