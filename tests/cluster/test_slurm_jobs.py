"""Real jobs on a real 2-node Slurm cluster (scripts/slurm_cluster.sh: slurmctld here, one
slurmd per network-namespace host): srun and horovodrun in an allocation, the batch script
of docs/running.md, scancel, a submitit sweep, preemption and requeue."""

from __future__ import annotations

import csv
import json
import re
import subprocess
import time
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from tests.helpers.asserts import assert_succeeded
from tests.helpers.bounds import after_scancel_s
from tests.helpers.commands import tntrun_command
from tests.helpers.driving import assert_nothing_left
from tests.helpers.pace import PACE
from tests.helpers.paths import ROOT
from tests.helpers.processes import Hold, Process, describe, processes_while_running, run_processes
from tests.helpers.runs import (
    DETERMINISTIC,
    assert_same_weights,
    final_weights,
    run_dir_of,
    store_uri,
    weights_in,
)
from tests.helpers.slurm import ran_on_both_nodes, salloc_held
from tntrun.contract import run_files
from tntrun.planning.plan import Plan
from tntrun.tracking.provenance import horovod_build

pytestmark = pytest.mark.slow


def salloc_tntrun(slurm, workdir: Path, *args: str) -> subprocess.CompletedProcess:
    """``salloc -N2 -n2 tntrun ...``: the driver here, its ranks on the two Slurm nodes."""
    return slurm.run("salloc", "-N2", "-n2", *tntrun_command(workdir, *args), cwd=workdir)


# Found beside the ranks of an srun run while they run; the ranks are slurmstepd's children.
SRUN = ("driver", "srun", "rendezvous server", "slurmstepd")


# A margin, not a Slurm setting: a step's slurmstepd exits just after reporting its end, so it
# may outlive srun (and salloc) or the job's leaving squeue by a moment; the ranks may not.
STEPD_EXIT_S = 5.0


KILL_WAIT_S = 10.0  # scripts/slurm_cluster.sh's KillWait


def srun_processes_while_running(run_dir: Path) -> list[Process]:
    """The positive control of an srun run: each rank a child of its node's slurmstepd."""
    seen = processes_while_running(run_dir, 2, *SRUN)
    steps = {p.pid for p in seen if p.role == "slurmstepd"}
    for rank, node in enumerate(("tnt-h1", "tnt-h2")):
        (found,) = [p for p in seen if p.role == f"rank {rank}"]
        assert found.ppid in steps and found.environ.get("SLURMD_NODENAME") == node, describe(seen)
    return seen


def assert_srun_run_left_nothing(run_dir: Path, seen: list[Process]) -> None:
    """Once the job (or salloc) ended: no process of the run, a slurmstepd within a moment."""
    left = [p for p in run_processes(run_dir, seen) if p.role != "slurmstepd"]
    assert not left, describe(left)
    assert_nothing_left(run_dir, seen, time.monotonic(), STEPD_EXIT_S)


# Horovod knobs proven by Horovod itself on srun ranks: its autotuner's log
# (HOROVOD_AUTOTUNE_LOG) holds a row per tuning sample with the values Horovod runs
# with; fixed by HOROVOD_CYCLE_TIME and HOROVOD_FUSION_THRESHOLD, they are not tuned.
KNOBS = (
    "horovod.timeline=true",
    "horovod.autotune=true",
    "horovod.hierarchical_allreduce=true",
    "horovod.cycle_time_ms=3.5",
    "horovod.fusion_threshold_kb=6144",
)


KNOB_ENV = {
    "HOROVOD_AUTOTUNE": "1",
    "HOROVOD_HIERARCHICAL_ALLREDUCE": "1",
    "HOROVOD_CYCLE_TIME": "3.5",
    "HOROVOD_FUSION_THRESHOLD": str(6144 * 1024),
}


# Not tntrun's: a tuning sample every step, no warm-up, so 2 epochs log rows (Horovod's defaults,
# 10 steps a sample, 5 samples a score and 3 warm-up scores, log a first row after 200 steps).
AUTOTUNE_SAMPLING = {
    "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "1",
    "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
}


# The log's header line (Horovod's parameter_manager.cc).
AUTOTUNE_HEADER = (
    "hierarchical_allreduce,hierarchical_allgather,torus_allreduce,cache_enabled,cycle_time_ms,"
    "tensor_fusion_threshold,score"
)


def assert_horovod_ran_with_the_knobs(run_dir: Path) -> None:
    """Horovod's autotune log: written, with rows of the configured cycle time (ms) and
    fusion threshold (MB). Hierarchical allreduce exists only in Horovod's NCCL/DDL GPU
    allreduce: a build without them forces it off (operations.cc), and the log says so."""
    lines = (run_dir / run_files.AUTOTUNE_LOG).read_text().splitlines()
    assert lines[:1] == [AUTOTUNE_HEADER] and lines[1:], f"no tuning sample logged: {lines}"
    built = horovod_build().get("horovod.check_build", "")
    hierarchical = "1" if "[X] NCCL" in built or "[X] DDL" in built else "0"
    for row in csv.DictReader(lines, skipinitialspace=True):
        assert float(row["cycle_time_ms"]) == 3.5, lines
        assert float(row["tensor_fusion_threshold"]) == 6144 / 1024, lines
        assert row["hierarchical_allreduce"] == hierarchical, (built, lines)


def test_srun_on_two_slurm_nodes_trains_like_two_local_ranks(
    slurm, two_local_ranks_weights, tmp_path
):
    """With Horovod's knobs set: the srun ranks run with them (Horovod's own record) and
    train like two local ranks without them (none changes the arithmetic); no process of the
    run is left."""
    result, seen = salloc_held(
        slurm,
        tmp_path,
        "launcher=srun",
        "horovod.network_interface=tnt0",
        *KNOBS,
        *DETERMINISTIC,
        search=srun_processes_while_running,
        env=AUTOTUNE_SAMPLING,
    )
    assert_succeeded(result)
    for rank in (p for p in seen if p.role.startswith("rank ")):  # the live ranks' variables
        assert {k: rank.environ.get(k) for k in KNOB_ENV} == KNOB_ENV, rank.describe()
    assert ran_on_both_nodes(result), result.stdout[-3000:]
    run_dir = run_dir_of(result)
    plan = json.loads((run_dir / "plan.json").read_text())
    assert plan["launcher"] == "srun" and plan["launch_command"][:5] == [
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--cpus-per-task=1",
    ]
    # What is recorded is the layout that ran: filled from the allocation (-N2 -n2).
    config = OmegaConf.load(run_dir / "config.yaml")
    assert (config.nodes, config.ranks_per_node) == (2, 1)
    run = MlflowClient(store_uri(tmp_path)).get_run((run_dir / "run_id").read_text())
    assert run.info.status == "FINISHED" and run.data.params["launcher"] == "srun"
    assert (run.data.params["nodes"], run.data.params["ranks_per_node"]) == ("2", "1")
    assert {"rank.0.log", "rank.1.log"} <= {p.name for p in (run_dir / "logs").iterdir()}
    assert (run_dir / "horovod_timeline.json").stat().st_size > 0  # a knob as HOROVOD_TIMELINE
    assert_horovod_ran_with_the_knobs(run_dir)
    assert_same_weights(final_weights(result), two_local_ranks_weights)
    assert_srun_run_left_nothing(run_dir, seen)


def test_horovodrun_takes_its_hosts_from_the_allocation(slurm, two_local_ranks_weights, tmp_path):
    result = salloc_tntrun(slurm, tmp_path, *slurm.hosts.ssh_overrides(), *DETERMINISTIC)
    assert_succeeded(result)
    assert ran_on_both_nodes(result), result.stdout[-3000:]
    command = " ".join(Plan.load(run_dir_of(result) / "plan.json").launch_command)
    assert "-H tnt-h1:1,tnt-h2:1" in command
    assert_same_weights(final_weights(result), two_local_ranks_weights)


def readme_sbatch_script() -> str:
    readme = (ROOT / "docs" / "running.md").read_text()
    (script,) = re.findall(r"```bash\n(#!/bin/bash\n#SBATCH.*?)```", readme, re.S)
    return script


def sbatch(slurm, workdir: Path, *args: str) -> str:
    """Submit the batch script of docs/running.md with tntrun overrides; the job id."""
    (workdir / "train.sbatch").write_text(readme_sbatch_script())
    submitted = slurm.run(
        "sbatch",
        "--parsable",
        "train.sbatch",
        *args,
        f"output_root={workdir / 'outputs'}",
        "horovod.network_interface=tnt0",
        cwd=workdir,
    )
    assert_succeeded(submitted)
    return submitted.stdout.strip().split(";")[0]


def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.5)


def job_gone(slurm, job: str) -> bool:
    return not slurm.run("squeue", "-h", "-j", job, cwd=Path("/")).stdout.strip()


def test_scancel_ends_the_run_killed_with_no_process_left(slurm, tmp_path):
    """The search finds the driver in the batch step, srun, the rendezvous server and the
    ranks under their slurmstepd while they run, and none of them after scancel."""
    hold = Hold(tmp_path)
    job = sbatch(
        slurm,
        tmp_path,
        *hold.overrides(),
        "train.epochs=50",
        "tracking.system_metrics=false",
        "checkpoint.min_interval_s=0",
    )
    out = tmp_path / f"tntrun-{job}.out"
    try:
        hold.wait(180)
        seen = srun_processes_while_running(hold.run_dir())
    except BaseException:  # not 50 epochs for nobody, nor a job outliving the cluster
        slurm.run("scancel", job, cwd=tmp_path)
        wait_for(lambda: job_gone(slurm, job), 60, f"job {job} to end")
        raise
    hold.release()
    wait_for(
        lambda: out.exists() and "checkpoint saved: epoch 1" in out.read_text(),
        180,
        "the first checkpoint",
    )
    cancelled = time.monotonic()
    assert_succeeded(slurm.run("scancel", job, cwd=tmp_path))
    wait_for(lambda: job_gone(slurm, job), 60, f"job {job} to end")
    ended = time.monotonic() - cancelled
    output = out.read_text()
    run_dir = run_dir_of(subprocess.CompletedProcess([], 0, output))
    run = MlflowClient(store_uri(tmp_path)).get_run((run_dir / "run_id").read_text())
    assert run.info.status == "KILLED", output[-3000:]
    assert_srun_run_left_nothing(run_dir, seen)
    assert ended < after_scancel_s(KILL_WAIT_S), f"the job took {ended:.1f} s after scancel"


def test_the_submitit_preset_runs_a_two_job_sweep_on_the_cluster(slurm, tmp_path):
    """The issue's command: one task per node for the driver, 2 ranks per node by srun."""
    result = slurm.run(
        *tntrun_command(
            tmp_path,
            "-m",
            "hydra/launcher=tntrun_slurm",
            "launcher=srun",
            "ranks_per_node=2",
            "train.epochs=1",
            "seed=1,2",
            "horovod.network_interface=tnt0",
            "tracking.system_metrics=false",
        ),
        cwd=tmp_path,
        timeout=400,
    )
    assert_succeeded(result)
    assert "2/2 jobs finished" in result.stdout
    client = MlflowClient(store_uri(tmp_path))
    runs = client.search_runs([client.get_experiment_by_name("tntrun").experiment_id])
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(r.data.params["seed"] for r in children) == ["1", "2"]
    for run in children:
        assert run.info.status == "FINISHED" and run.data.params["ranks_per_node"] == "2"
        assert run.data.tags["hosts"] in ("tnt-h1:2", "tnt-h2:2")


def test_the_readmes_sbatch_script_runs_to_finished_though_preempted_and_timed_out(
    slurm, tmp_path, two_local_ranks_weights
):
    """The batch script of docs/running.md on both nodes, twice interrupted, one run: USR1
    to the batch step (what --signal=B:USR1@120 sends before the time limit) makes the
    ranks checkpoint and the driver requeue the job; `scontrol requeue` (SIGTERM to every
    task, as preemption) makes them checkpoint and Slurm requeue it. Each requeued job
    continues the run from the step it stopped at, and the final weights are those of an
    uninterrupted run."""
    (tmp_path / "pace.py").write_text(PACE)
    until = tmp_path / "full-speed"
    job = sbatch(
        slurm,
        tmp_path,
        *DETERMINISTIC,
        "checkpoint.min_interval_s=0",
        "+callbacks.pace._target_=pace.Pace",
        "+callbacks.pace.ranks=master_only",
        "+callbacks.pace.step_s=0.3",
        f"+callbacks.pace.until={until}",
    )
    out = tmp_path / f"tntrun-{job}.out"

    def printed(text: str, times: int = 1) -> bool:
        return out.exists() and out.read_text().count(text) >= times

    wait_for(lambda: printed("checkpoint saved: epoch 1"), 180, "the first checkpoint")
    assert_succeeded(slurm.run("scancel", "--batch", "--signal=USR1", job, cwd=tmp_path))
    wait_for(lambda: printed("resumed from"), 180, "the job requeued by the driver")
    assert_succeeded(slurm.run("scontrol", "requeue", job, cwd=tmp_path))
    wait_for(lambda: printed("resumed from", 2), 180, "the job requeued by Slurm")
    until.touch()
    wait_for(lambda: job_gone(slurm, job), 180, f"job {job} to end")

    output = out.read_text()
    assert output.count("tntrun: run KILLED") == 2 and "tntrun: run FINISHED" in output, output
    assert ran_on_both_nodes(subprocess.CompletedProcess([], 0, output)), output[-3000:]
    assert f"tntrun: requeued Slurm job {job}; it continues this run" in output
    run_dirs = [Path(d) for d in re.findall(r"tntrun: run directory: (\S+)", output)]
    run_ids = {(d / "run_id").read_text() for d in run_dirs}
    assert len(run_dirs) == 3 and len(run_ids) == 1, output
    run = MlflowClient(store_uri(tmp_path)).get_run(run_ids.pop())
    tags = run.data.tags
    assert run.info.status == "FINISHED" and tags["restarts"] == "2", tags
    assert tags["restart.1"].startswith(f"requeued Slurm job {job} (restart 1): from epoch-0001"), (
        tags
    )
    assert "SIGUSR1 on the driver: stopped after step" in tags["restart.1"], tags
    assert tags["restart.2"].startswith(
        f"requeued Slurm job {job} (restart 2): from epoch-0001.batch-"
    )
    assert "SIGTERM on " in tags["restart.2"], tags
    assert_same_weights(weights_in(run_dirs[-1]), two_local_ranks_weights)
