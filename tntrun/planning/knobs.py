"""``horovod.*`` settings as structured knobs: Horovod variables, horovodrun arguments or in-rank.

Pure. Each knob says how it reaches Horovod in both forms a launcher may use:
``args`` for horovodrun's command line and ``env`` for ``HOROVOD_*`` variables
(what horovodrun itself turns its flags into, and all an ``srun`` rank gets). The knobs
are the rendered form, for commands and the dry run; code that needs a setting's value
reads the typed :class:`HorovodConfig` (``plan.settings.horovod``), never a knob by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tntrun.config.schema import HorovodConfig
from tntrun.contract import run_files
from tntrun.errors import PlanError


@dataclass(frozen=True)
class HorovodKnob:
    """How one ``horovod.*`` setting reaches Horovod."""

    key: str
    value: Any
    env: tuple[tuple[str, str], ...] = ()  # HOROVOD_* variables
    args: tuple[str, ...] = ()  # horovodrun's form, when it has one (else it gets env)
    in_rank: bool = False  # applied by the ranks' averaging optimizer (engine/data_parallel)
    over_ssh: bool = False  # how a launcher reaches the hosts by ssh (horovodrun, mpirun)

    def describe(self) -> str:
        """How the knob is applied, for the dry run."""
        if self.in_rank:
            return f"{in_rank_effect(self.key, self.value)} (tntrun's averaging optimizer)"
        parts = [f"{name}={value}" for name, value in self.env]
        if self.args:
            parts.insert(0, " ".join(self.args))
        return " | ".join(parts)

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> HorovodKnob:
        known = {k: v for k, v in raw.items() if k != "launcher_only"}
        if "launcher_only" in raw:  # plans written before over_ssh: the ssh knobs had it
            known["over_ssh"] = raw["launcher_only"] is not None
        return cls(
            **{**known, "env": tuple(tuple(kv) for kv in raw["env"]), "args": tuple(raw["args"])}
        )


def in_rank_effect(key: str, value: Any) -> str:
    """What an in-rank knob does, as the ranks' averaging optimizer applies it (the dry run
    says only what tntrun does: no Horovod optimizer is involved)."""
    if key == "compression":
        if value == "none":
            return "gradients allreduced uncompressed"
        return f"gradients cast to {value} for the allreduce, cast back after it"
    if value == 1:
        return "one allreduce and one update per step"
    return f"{value} micro-batches' gradients averaged on each rank per allreduce and update"


def horovod_knobs(hvd: HorovodConfig, run_dir: Path) -> tuple[HorovodKnob, ...]:
    """Map ``horovod.*`` to horovodrun arguments, HOROVOD_* variables or in-rank settings."""
    return (
        *tuning_knobs(hvd),
        *tracing_knobs(hvd, run_dir),
        *network_knobs(hvd),
        *in_rank_knobs(hvd),
    )


def tuning_knobs(hvd: HorovodConfig) -> list[HorovodKnob]:
    """Tensor fusion, the background cycle and Gloo's wait (Horovod variables only)."""
    knobs: list[HorovodKnob] = []
    fusion_kb = hvd.fusion_threshold_kb
    if fusion_kb is not None:
        if fusion_kb < 0:
            raise PlanError(
                f"horovod.fusion_threshold_kb={fusion_kb}: "
                "use 0 to disable fusion or a positive size"
            )
        env = (("HOROVOD_FUSION_THRESHOLD", str(fusion_kb * 1024)),)
        knobs.append(HorovodKnob("fusion_threshold_kb", fusion_kb, env=env))
    cycle = hvd.cycle_time_ms
    if cycle is not None:
        if cycle <= 0:
            raise PlanError(f"horovod.cycle_time_ms={cycle}: give a positive time in ms")
        knobs.append(
            HorovodKnob("cycle_time_ms", cycle, env=(("HOROVOD_CYCLE_TIME", f"{cycle:g}"),))
        )
    gloo = hvd.gloo_timeout_s
    if gloo is not None:
        if gloo <= 0:
            raise PlanError(
                f"horovod.gloo_timeout_s={gloo}: give a positive time in s (null: Horovod's 30)"
            )
        env = (("HOROVOD_GLOO_TIMEOUT_SECONDS", str(gloo)),)
        knobs.append(HorovodKnob("gloo_timeout_s", gloo, env=env))
    return knobs


def tracing_knobs(hvd: HorovodConfig, run_dir: Path) -> list[HorovodKnob]:
    """Autotuning and the timeline, written into the run directory."""
    knobs: list[HorovodKnob] = []
    if hvd.autotune:
        log = str(run_dir / run_files.AUTOTUNE_LOG)
        knobs.append(
            HorovodKnob(
                "autotune",
                True,
                env=(("HOROVOD_AUTOTUNE", "1"), ("HOROVOD_AUTOTUNE_LOG", log)),
                args=("--autotune", "--autotune-log-file", log),
            )
        )
    if hvd.timeline:
        timeline = str(run_dir / run_files.TIMELINE)
        knobs.append(
            HorovodKnob(
                "timeline",
                True,
                env=(("HOROVOD_TIMELINE", timeline),),
                args=("--timeline-filename", timeline),
            )
        )
    return knobs


def network_knobs(hvd: HorovodConfig) -> list[HorovodKnob]:
    """How the ranks talk (allreduce shape, NIC) and how horovodrun reaches the hosts."""
    knobs: list[HorovodKnob] = []
    if hvd.hierarchical_allreduce:
        knobs.append(
            HorovodKnob(
                "hierarchical_allreduce",
                True,
                env=(("HOROVOD_HIERARCHICAL_ALLREDUCE", "1"),),
                args=("--hierarchical-allreduce",),
            )
        )
    if hvd.network_interface is not None:
        nic = hvd.network_interface
        knobs.append(
            HorovodKnob(
                "network_interface",
                nic,
                env=(("HOROVOD_GLOO_IFACE", nic),),
                args=("--network-interface", nic),
            )
        )
    for key, flag in (("ssh_port", "-p"), ("ssh_identity_file", "-i")):
        value = getattr(hvd, key)
        if value is not None:
            args = (flag, str(value))
            knobs.append(HorovodKnob(key, value, args=args, over_ssh=True))
    return knobs


def in_rank_knobs(hvd: HorovodConfig) -> list[HorovodKnob]:
    """What the ranks' data-parallel optimizer applies itself."""
    passes = hvd.backward_passes_per_step
    if passes < 1:
        raise PlanError(
            f"horovod.backward_passes_per_step={passes}: use 1 (no accumulation) or more"
        )
    return [
        HorovodKnob("compression", hvd.compression.value, in_rank=True),
        HorovodKnob("backward_passes_per_step", passes, in_rank=True),
    ]
