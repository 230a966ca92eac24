"""From a composed config to the typed settings and the Plan, before anything runs.

The driver gathers its facts once (:func:`gather_facts`: the cluster environment and this
machine); :func:`typed_experiment` types the composed config once (the layout the hosts or
allocation give filled in, the settings, the problem's hash); :func:`prepare` vets the
targets, sizes the dataset and derives the Plan. Past this module no stage reads the config
tree: the Plan carries the settings, and a restart re-plans from :class:`PlanInputs` with
only a new resume point.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tntrun.config.compose import plain_config, with_allocation_layout
from tntrun.config.settings import Settings, problem_hash, settings_of
from tntrun.config.zoo import SizedDataset, check_targets, size_dataset
from tntrun.datasets.base import DatasetInfo
from tntrun.environments import Allocation, ClusterEnvironment, detect
from tntrun.launch.launcher import with_launch_command
from tntrun.planning.machine import MachineFacts, machine_facts
from tntrun.planning.plan import Plan
from tntrun.planning.planner import build_plan
from tntrun.planning.resume import ResumePoint


@dataclass(frozen=True)
class DriverFacts:
    """Where the driver runs, learnt once per run: the cluster environment (its allocation,
    job tags, requeue), this machine (cores, GPUs, interpreter) and the job the scheduler
    requeued, if it did (a run to continue)."""

    cluster: ClusterEnvironment
    machine: MachineFacts
    requeued_job: str | None = None


def gather_facts(environ: Mapping[str, str] = os.environ) -> DriverFacts:
    cluster = detect(environ)
    requeued = cluster.requeued_job()
    return DriverFacts(cluster, machine_facts(cluster), requeued)


@dataclass(frozen=True)
class TypedExperiment:
    """A composed config, typed once: ``config`` as recorded (config.yaml, the run's params;
    the layout filled in), its ``settings`` and the training problem's ``config_hash``."""

    config: DictConfig
    settings: Settings
    config_hash: str

    @property
    def recorded_yaml(self) -> str:
        """The config as the run directory records it (config.yaml) and a dry run shows it."""
        return OmegaConf.to_yaml(self.config, resolve=True)

    @property
    def recorded(self) -> dict[str, Any]:
        """config.yaml's values, plain (enums by name): what the run's params are."""
        return OmegaConf.to_container(self.config, resolve=True, enum_to_str=True)


def typed_experiment(
    config: DictConfig, overrides: Sequence[str], allocated: Allocation | None
) -> TypedExperiment:
    """Fill the layout keys the hosts or the allocation (``allocated``: the cluster
    environment's) give, those not on the command line, then type the config. Pure but for
    reading a ``hostfile``."""
    filled = with_allocation_layout(config, overrides, allocated)
    settings = settings_of(plain_config(filled, overrides))
    return TypedExperiment(filled, settings, problem_hash(filled))


@dataclass(frozen=True)
class PlanInputs:
    """What a plan is derived from, once vetted and sized: a restart re-plans from them
    with only a new resume point (no re-composing, no target checks, no dataset sizing)."""

    settings: Settings
    config_hash: str
    info: DatasetInfo
    machine: MachineFacts
    run_dir: Path

    def plan(
        self, resume: ResumePoint | None = None, hosts: Sequence[tuple[str, int]] | None = None
    ) -> Plan:
        """The plan from ``resume`` (default: the start); on ``hosts`` instead of the
        configured ones (an elastic run's new size)."""
        settings = self.settings
        if hosts is not None:  # the node range stays the one the run started with
            on = [host for host, _ in hosts]
            top = settings.elastic.max_nodes or settings.nodes
            elastic = replace(settings.elastic, max_nodes=top)
            settings = replace(settings, hosts=on, hostfile=None, nodes=len(on), elastic=elastic)
        planned = build_plan(
            settings, self.config_hash, self.info, self.machine, self.run_dir, resume
        )
        return with_launch_command(planned, self.machine)


def prepare(
    typed: TypedExperiment,
    choices: Mapping[str, str],
    machine: MachineFacts,
    run_dir: Path,
    resume: ResumePoint | None = None,
) -> tuple[Plan, SizedDataset, PlanInputs]:
    """Vet the targets, size the dataset and derive the plan (no TensorFlow).

    Returns the plan, the dataset's sizes (with, for a dry run without the data, why they
    are assumed) and what a restart re-plans from. Raises PlanError, one line a problem.
    """
    config, settings = typed.config, typed.settings
    check_targets(config, dict(choices))
    sized = size_dataset(config.dataset, allow_published=settings.dry_run)
    inputs = PlanInputs(settings, typed.config_hash, sized.info, machine, run_dir)
    return inputs.plan(resume), sized, inputs
