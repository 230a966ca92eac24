"""``launcher=horovodrun``: Horovod's own launcher, over ssh to remote hosts (Gloo)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tntrun.environments.launchers import HOROVODRUN
from tntrun.launch.launcher import Launcher, LaunchSpec, base_environment

if TYPE_CHECKING:
    from tntrun.planning.plan import Plan

# horovodrun's command line without its 5-12 s probe of the build (see that module).
HOROVODRUN_COMMAND = "tntrun.launch.horovodrun_command"


class HorovodrunLauncher(Launcher):
    name = HOROVODRUN

    def command(self, spec: LaunchSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        env = base_environment(spec)
        args: list[str] = []
        for knob in spec.knobs:
            if knob.args:
                args.extend(knob.args)  # horovodrun sets the variables from its flags
            else:
                env.update(knob.env)
        command = (
            spec.python,
            "-m",
            HOROVODRUN_COMMAND,
            "--gloo",
            "-np",
            str(spec.world_size),
            "-H",
            ",".join(f"{host}:{slots}" for host, slots in spec.hosts),
            "--start-timeout",
            str(spec.horovod.start_timeout),
            *args,
            *spec.worker,
        )
        return command, env

    def preflight(self, plan: Plan, run_dir: Path) -> None:
        """ssh into every remote host and compare versions before anything starts."""
        from tntrun.launch.remote_hosts import preflight_hosts
        from tntrun.planning.machine import versions

        found = versions()
        hvd = plan.settings.horovod
        preflight_hosts(
            [host for host, _ in plan.hosts],
            sys.executable,  # the ranks' interpreter, at the same path on every host
            {name: found.get(f"version.{name}") for name in ("tntrun", "tensorflow", "horovod")},
            hvd.ssh_port,
            hvd.ssh_identity_file,
            hvd.start_timeout,
            run_dir,
        )
