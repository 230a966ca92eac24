"""From a composed config to the typed settings and the Plan, before anything runs.

:func:`resolve` is the one path from an :class:`~tntrun.experiment.Experiment` to a
:class:`PreparedRun`, shared by the CLI, ``api.plan`` and ``api.run``: it gathers the
driver's facts once (:func:`gather_facts`: the cluster environment and this machine),
types the composed config (:func:`typed_experiment`: the layout the hosts or allocation
give filled in, the settings, the problem's hash), finds the run to continue, if any, and
:func:`prepare` vets the targets, sizes the dataset and derives the Plan. Past this module
no stage reads the config tree: the Plan carries the settings, and a restart re-plans from
:class:`PlanInputs` with only a new resume point.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from tntrun.config.compose import plain_config, with_allocation_layout
from tntrun.config.settings import Settings, problem_hash, settings_of
from tntrun.config.zoo import SizedDataset, check_targets, size_dataset
from tntrun.datasets.base import DatasetInfo
from tntrun.environments import Allocation, ClusterEnvironment, detect
from tntrun.experiment import Experiment
from tntrun.launch.launcher import Launcher, launcher_for, with_launch_command
from tntrun.planning.machine import MachineFacts, machine_facts
from tntrun.planning.plan import Plan
from tntrun.planning.planner import build_plan
from tntrun.planning.resume import ResumedRun, ResumePoint
from tntrun.tracking import Tracker, TrackerSettings, tracker_for
from tntrun.tracking.resume_lookup import resumed_run, run_to_continue


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

    @cached_property
    def launcher(self) -> Launcher:
        """The settings' launcher, resolved once: it renders every plan's command (a
        restart's too) and the supervisor starts the ranks with it. Raises PlanError."""
        return launcher_for(self.settings.launcher)

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
        return with_launch_command(planned, self.machine, self.launcher)


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


@dataclass(frozen=True)
class PreparedRun:
    """An experiment resolved into everything running it takes, nothing written yet: where
    the driver runs, the typed config, the plan, what the run continues and its tracker."""

    experiment: Experiment
    run_dir: Path
    facts: DriverFacts
    typed: TypedExperiment
    plan: Plan
    sized: SizedDataset
    inputs: PlanInputs
    resumed: ResumedRun | None
    tracker: Tracker


def resolve(exp: Experiment, run_dir: Path, facts: DriverFacts | None = None) -> PreparedRun:
    """Type the experiment, find the run it continues (if any) and derive its plan, for a
    run in ``run_dir``; raises PlanError (or the ValueError of an unusable allocation or
    checkpoint). Writes nothing into the run directory."""
    facts = facts or gather_facts()
    allocated = facts.machine.allocation
    typed = typed_experiment(exp.config, exp.overrides, allocated)
    tracker_settings = TrackerSettings.of(typed.settings)
    tracker = tracker_for(tracker_settings)
    resumed = continued_run(exp, typed, tracker, tracker_settings, facts)
    if resumed:  # the stored config, with the layout filled as for a new run
        typed = typed_experiment(resumed.config, exp.overrides, allocated)
    point = resumed.point if resumed else None
    plan, sized, inputs = prepare(typed, exp.choices, facts.machine, run_dir, point)
    return PreparedRun(exp, run_dir, facts, typed, plan, sized, inputs, resumed, tracker)


def continued_run(
    exp: Experiment,
    typed: TypedExperiment,
    tracker: Tracker,
    tracker_settings: TrackerSettings,
    facts: DriverFacts,
) -> ResumedRun | None:
    """The run this experiment continues (``resume=``, a requeued job), None for a new one."""
    settings = typed.settings
    reference, how = run_to_continue(
        tracker, settings.resume, typed.config_hash, facts.cluster, facts.requeued_job
    )
    if reference is None:
        return None
    return resumed_run(
        tracker_settings,
        reference,
        how,
        exp.overrides,
        list(exp.choices),
        settings.resume_allow_layout_change,
    )
