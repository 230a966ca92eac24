"""The pure training plan: layout, batch split, LR scaling, schedules, launch command."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest
from omegaconf import OmegaConf

from tests.helpers.commands import modules_imported
from tests.helpers.plans import IMAGENET, plan_for
from tntrun.config.schema import OnNonFinite
from tntrun.environments.slurm import SlurmEnvironment
from tntrun.launch.launcher import Launcher, LaunchSpec
from tntrun.planning.plan import MachineFacts, Plan, PlanError
from tntrun.planning.schedule_steps import scale_learning_rate
from tntrun.planning.schedules import ScheduleParams, learning_rate
from tntrun.planning.view import render_plan


def test_default_plan_splits_global_batch_over_two_cpu_ranks(compose_cfg):
    plan = plan_for(compose_cfg)
    assert plan.world_size == 2 and plan.micro_batch_size == 32
    assert plan.steps_per_epoch == 1438 // 64 == 22
    assert plan.total_steps == 22 * plan.epochs
    assert plan.threads_per_rank == 1
    assert plan.scaled_lr == pytest.approx(0.002)  # adam 0.002 stated at batch 64
    cmd = plan.launch_command
    horovodrun = ("python", "-m", "tntrun.launch.horovodrun_command")  # horovodrun's CLI
    assert cmd[:8] == (*horovodrun, "--gloo", "-np", "2", "-H", "localhost:2")
    assert cmd[-4:] == ("python", "-m", "tntrun.engine.worker", "/runs/x")
    env = dict(plan.launch_env)
    assert env["KERAS_BACKEND"] == "tensorflow" and env["TF_USE_LEGACY_KERAS"] == "0"
    assert env["CUDA_VISIBLE_DEVICES"] == "-1"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "3"  # TensorFlow's C++ chatter off


def test_the_users_tensorflow_log_level_reaches_the_ranks(compose_cfg):
    facts = MachineFacts(cores_per_node=2, env={"TF_CPP_MIN_LOG_LEVEL": "0"})
    assert dict(plan_for(compose_cfg, facts=facts).launch_env)["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_two_nodes_of_four_gpus(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "nodes=2",
        "gpus=4",
        "hosts=[a,b]",
        "global_batch_size=512",
        "optimizer=sgd",
        data=IMAGENET,
    )
    assert plan.world_size == 8 and plan.micro_batch_size == 64
    assert plan.launch_command[3:8] == ("--gloo", "-np", "8", "-H", "a:4,b:4")
    assert plan.scaled_lr == pytest.approx(0.2)  # 0.1 at 256, linear
    assert [(p.host, p.gpu) for p in plan.placements] == [
        ("a", 0),
        ("a", 1),
        ("a", 2),
        ("a", 3),
        ("b", 0),
        ("b", 1),
        ("b", 2),
        ("b", 3),
    ]
    assert "CUDA_VISIBLE_DEVICES" not in dict(plan.launch_env)


def test_threads_default_to_cores_over_ranks(compose_cfg):
    facts = MachineFacts(cores_per_node=16)
    assert (
        plan_for(
            compose_cfg, "ranks_per_node=4", "global_batch_size=64", facts=facts
        ).threads_per_rank
        == 4
    )
    assert plan_for(compose_cfg, "threads_per_rank=3").threads_per_rank == 3


def test_micro_batch_size_derives_the_global_batch(compose_cfg):
    plan = plan_for(compose_cfg, "micro_batch_size=16")
    assert plan.global_batch_size == 32 and plan.micro_batch_size == 16
    assert plan.scaled_lr == pytest.approx(0.002 * 32 / 64)
    same = plan_for(compose_cfg, "micro_batch_size=16", "global_batch_size=32")
    assert same.global_batch_size == 32


def test_validation_micro_batch(compose_cfg):
    assert plan_for(compose_cfg).val_micro_batch_size == 32
    assert plan_for(compose_cfg, "val_micro_batch_size=100").val_micro_batch_size == 100


def test_gradient_accumulation_counts_into_batch_and_lr(compose_cfg):
    plan = plan_for(compose_cfg, "horovod.backward_passes_per_step=2")
    assert plan.effective_batch_size == 128
    assert plan.scaled_lr == pytest.approx(0.004)
    assert plan.optimizer_steps == plan.total_steps // 2


@pytest.mark.parametrize(
    ("scaling", "expected"), [("linear", 0.4), ("sqrt", 0.1 * math.sqrt(4)), ("none", 0.1)]
)
def test_learning_rate_scaling(scaling, expected):
    assert scale_learning_rate(0.1, 1024, 256, scaling) == pytest.approx(expected)


def test_goyal_schedule_matches_its_formula_at_every_step(compose_cfg):
    # 1438 samples / 64 = 22 steps per epoch; 10 epochs; warmup 2; decays at 4, 6, 8.
    plan = plan_for(
        compose_cfg,
        "schedule=warmup_piecewise",
        "train.epochs=10",
        "optimizer=sgd",
        "schedule.warmup_epochs=2",
        "schedule.boundaries_epochs=[4,6,8]",
    )
    s = plan.schedule
    peak = 0.1 * 64 / 256
    assert s.warmup_steps == 44 and s.boundaries == (88, 132, 176) and s.total_steps == 220
    assert s.warmup_start_lr == pytest.approx(peak / 2)  # scaled LR / world size
    for step in range(s.total_steps):
        if step < 44:
            expected = peak / 2 + (peak - peak / 2) * step / 44
        else:
            expected = peak * 0.1 ** sum(step >= b for b in (88, 132, 176))
        assert learning_rate(step, s) == pytest.approx(expected, rel=1e-9), step


def test_inverse_sqrt_matches_vaswani():
    s = ScheduleParams(
        name="inverse_sqrt", peak_lr=1.0, total_steps=12000, warmup_steps=4000, d_model=1024
    )
    steps = np.arange(s.total_steps)
    got = learning_rate(steps, s)
    for step in (0, 1, 3999, 4000, 4001, 11999):
        n = step + 1
        assert got[step] == pytest.approx(1024**-0.5 * min(n**-0.5, n * 4000**-1.5), rel=1e-9)
    assert got.argmax() == 3999  # peak at step_num == warmup_steps


def test_cosine_ends_at_the_final_fraction(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "schedule=warmup_cosine",
        "schedule.warmup_epochs=1",
        "schedule.final_lr_fraction=0.1",
    )
    s = plan.schedule
    assert learning_rate(s.warmup_steps, s) == pytest.approx(plan.scaled_lr)
    assert learning_rate(s.total_steps, s) == pytest.approx(0.1 * plan.scaled_lr)


def test_poly_decays_by_its_power_to_the_final_fraction(compose_cfg):
    overrides = ("schedule=warmup_poly", "schedule.warmup_epochs=1", "schedule.decay_power=3")
    plan = plan_for(compose_cfg, *overrides, "schedule.final_lr_fraction=0.1")
    s, peak = plan.schedule, plan.scaled_lr
    span = s.total_steps - s.warmup_steps
    quarter = s.warmup_steps + span // 4
    expected = 0.1 * peak + 0.9 * peak * (1 - (span // 4) / span) ** 3
    assert learning_rate(s.warmup_steps, s) == pytest.approx(peak)
    assert learning_rate(quarter, s) == pytest.approx(expected, rel=1e-9)
    assert learning_rate(s.total_steps, s) == pytest.approx(0.1 * peak)


def test_epoch_values_follow_the_real_steps_per_epoch(compose_cfg):
    for batch in (32, 128):
        plan = plan_for(
            compose_cfg,
            "schedule=warmup_piecewise",
            "train.epochs=90",
            f"global_batch_size={batch}",
            "optimizer=sgd",
        )
        per_epoch = 1438 // batch
        assert plan.schedule.warmup_steps == 5 * per_epoch
        assert plan.schedule.boundaries == (30 * per_epoch, 60 * per_epoch, 80 * per_epoch)


def test_horovod_knobs_map_to_flags_and_environment(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "horovod.fusion_threshold_kb=32",
        "horovod.cycle_time_ms=2.5",
        "horovod.autotune=true",
        "horovod.timeline=true",
        "horovod.hierarchical_allreduce=true",
        "horovod.gloo_timeout_s=300",
    )
    env, cmd = dict(plan.launch_env), plan.launch_command
    assert env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "300"  # horovodrun has no flag for it
    assert "HOROVOD_GLOO_TIMEOUT_SECONDS" not in dict(plan_for(compose_cfg).launch_env)
    assert plan.fusion_threshold_bytes == 32768 and env["HOROVOD_FUSION_THRESHOLD"] == "32768"
    assert env["HOROVOD_CYCLE_TIME"] == "2.5"
    assert "--autotune" in cmd and "/runs/x/horovod_autotune.csv" in cmd
    assert cmd[cmd.index("--timeline-filename") + 1] == "/runs/x/horovod_timeline.json"
    assert "--hierarchical-allreduce" in cmd
    assert plan_for(compose_cfg, "horovod.fusion_threshold_kb=0").fusion_threshold_bytes == 0


def test_the_in_rank_knobs_say_what_tntruns_averaging_optimizer_does(compose_cfg):
    table = render_plan(plan_for(compose_cfg))
    assert "horovod.compression               none -> gradients allreduced uncompressed" in table
    assert "1 -> one allreduce and one update per step (tntrun's averaging optimizer)" in table
    more = render_plan(
        plan_for(compose_cfg, "horovod.compression=fp16", "horovod.backward_passes_per_step=4")
    )
    assert "fp16 -> gradients cast to fp16 for the allreduce, cast back after it" in more
    assert "4 -> 4 micro-batches' gradients averaged on each rank per allreduce" in more
    assert "DistributedOptimizer" not in table + more


def test_srun_ranks_get_every_knob_as_a_horovod_variable(compose_cfg):
    env = {"SLURM_JOB_NODELIST": "node[1-2]"}
    slurm = MachineFacts(cores_per_node=2, env=env, allocation=SlurmEnvironment(env).allocation())
    knobs = (
        "horovod.autotune=true",
        "horovod.timeline=true",
        "horovod.hierarchical_allreduce=true",
        "horovod.network_interface=ib0 1",
        "horovod.cycle_time_ms=2",
        "horovod.gloo_timeout_s=120",
    )
    plan = plan_for(compose_cfg, "launcher=srun", "nodes=2", *knobs, facts=slurm)
    env, cmd = dict(plan.launch_env), plan.launch_command
    assert cmd[0] == "srun" and plan.launcher == "srun"
    assert env["HOROVOD_AUTOTUNE"] == "1" and env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1"
    assert env["HOROVOD_AUTOTUNE_LOG"] == "/runs/x/horovod_autotune.csv"
    assert env["HOROVOD_TIMELINE"] == "/runs/x/horovod_timeline.json"
    assert env["HOROVOD_GLOO_IFACE"] == "ib0 1"  # a value with a space stays one value
    # (the ssh knobs are refused: tests/cluster/test_slurm_allocation.py)
    assert env["HOROVOD_CYCLE_TIME"] == "2" and env["HOROVOD_GLOO_TIMEOUT_SECONDS"] == "120"
    horovodrun = plan_for(compose_cfg, "horovod.network_interface=ib0 1", "horovod.ssh_port=2222")
    cmd = horovodrun.launch_command
    assert cmd[cmd.index("--network-interface") + 1] == "ib0 1" and "2222" in cmd
    assert Plan.from_json(plan.to_json()) == plan


def test_pin_to_socket_places_ranks_round_robin(compose_cfg):
    facts = MachineFacts(cores_per_node=8, sockets_per_node=2, numactl="/usr/bin/numactl")
    plan = plan_for(compose_cfg, "pin_to_socket=true", "ranks_per_node=4", facts=facts)
    assert [p.socket for p in plan.placements] == [0, 1, 0, 1]


def test_hosts_from_a_slurm_allocation(compose_cfg):
    allocation = SlurmEnvironment({"SLURM_JOB_NODELIST": "node[01-04]"}).allocation()
    facts = MachineFacts(cores_per_node=2, allocation=allocation)
    plan = plan_for(compose_cfg, "nodes=3", "global_batch_size=60", facts=facts)
    assert plan.hosts == (("node01", 2), ("node02", 2), ("node03", 2))


def test_hosts_from_a_hostfile(compose_cfg, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# cluster\nalpha slots=2\nbeta:4\n")
    plan = plan_for(compose_cfg, "nodes=2", f"hostfile={hostfile}", "global_batch_size=64")
    assert plan.launch_command[7] == "alpha:2,beta:2"


def test_a_host_list_sets_the_nodes_unless_they_are_given(compose_cfg, tmp_path):
    plan = plan_for(compose_cfg, "hosts=[a,b]", "micro_batch_size=32")
    assert (plan.nodes, plan.world_size, plan.global_batch_size) == (2, 4, 128)
    hostfile = tmp_path / "hosts"
    hostfile.write_text("alpha\nbeta\ngamma\n")
    assert plan_for(compose_cfg, f"hostfile={hostfile}", "global_batch_size=60").nodes == 3
    with pytest.raises(PlanError, match="hosts lists 2 hosts but nodes=1: set nodes=2"):
        plan_for(compose_cfg, "hosts=[a,b]", "nodes=1")


def test_plan_round_trips_through_json(compose_cfg):
    plan = plan_for(
        compose_cfg,
        "schedule=warmup_piecewise",
        "schedule.boundaries_epochs=[10]",
        "pin_to_socket=true",
        "horovod.autotune=true",
    )
    assert Plan.from_json(plan.to_json()) == plan
    settings = Plan.from_json(plan.to_json()).settings
    assert settings.faults.on_nonfinite is OnNonFinite.fail  # an enum again, not its name
    assert settings.schedule.boundaries_epochs == [10.0]


def test_a_plan_written_before_it_carried_its_settings_reads_them_from_the_config(
    compose_cfg, tmp_path
):
    # plan.json of tntrun 0.1 (commit 5601e35) had neither settings nor config_hash: the
    # settings are its run directory's config.yaml, typed, and the hash the driver's.
    overrides = ("faults.on_nonfinite=rollback", "+tracking.tags.team=vision", "seed=7")
    plan = plan_for(compose_cfg, *overrides, run_dir=tmp_path)
    config = compose_cfg(*overrides)
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(config, resolve=True))
    old = json.loads(plan.to_json())
    del old["settings"], old["config_hash"]
    (tmp_path / "plan.json").write_text(json.dumps(old))
    loaded = Plan.load(tmp_path / "plan.json")
    assert loaded.config_hash == plan.config_hash
    assert loaded.settings.faults.on_nonfinite is OnNonFinite.rollback
    assert loaded.settings.tracking.tags == {"team": "vision"} and loaded.settings.seed == 7
    assert loaded == plan


def test_every_problem_is_reported_at_once(compose_cfg):
    with pytest.raises(PlanError) as err:
        plan_for(compose_cfg, "global_batch_size=63", "horovod.fusion_threshold_kb=-1")
    assert len(err.value.problems) == 2


def test_pinning_without_numactl_is_refused(compose_cfg):
    with pytest.raises(PlanError, match="pin_to_socket=true needs numactl"):
        plan_for(compose_cfg, "pin_to_socket=true", facts=MachineFacts(cores_per_node=2))


class SocketBindingLauncher(Launcher):
    """A launcher that binds the ranks itself, as mpirun does (no MPI needed to plan)."""

    name = "binder"
    binds_ranks = True

    def command(self, spec: LaunchSpec) -> tuple[tuple[str, ...], dict[str, str]]:
        return ("binder", "--bind-to", "socket", *spec.worker), {}


def test_a_launcher_that_binds_needs_no_numactl_and_the_plan_says_who_binds(compose_cfg):
    binder = f"launcher={__name__}.SocketBindingLauncher"
    two_sockets = MachineFacts(cores_per_node=4, sockets_per_node=2)  # and no numactl
    plan = plan_for(compose_cfg, binder, "pin_to_socket=true", facts=two_sockets)
    assert plan.bound_by == "binder" and [p.socket for p in plan.placements] == [0, 1]
    assert "rank 1, host localhost, local rank 1, socket 1, bound by binder" in render_plan(plan)
    assert not any("one socket" in note for note in plan.notes())
    itself = plan_for(compose_cfg, "pin_to_socket=true", facts=replace(two_sockets, numactl="n"))
    assert itself.bound_by == "numactl"
    assert "local rank 1, numactl --cpunodebind=1 --membind=1" in render_plan(itself)
    one = plan_for(compose_cfg, binder, "pin_to_socket=true", facts=MachineFacts(2))
    (note,) = one.notes()
    assert note.startswith("pin_to_socket=true on nodes of one socket: every rank is bound")


@pytest.mark.slow
def test_planning_does_not_import_tensorflow():
    imported = modules_imported(
        "import tntrun.cli, tntrun.api, tntrun.planning.view, tntrun.tracking.mlflow_tracker,"
        " tntrun.launch.rank_job, tntrun.launch.srun;"
        "from tntrun.datasets.digits import DigitsDataset; DigitsDataset().info()",
        "('tensorflow', 'horovod', 'tf_keras', 'keras')",
    )
    assert imported == [], f"the driver side imported {imported}"


def test_notes_tell_a_run_of_what_will_not_happen(compose_cfg):
    assert plan_for(compose_cfg).notes() == []
    (note,) = plan_for(compose_cfg, "horovod.hierarchical_allreduce=true").notes()
    assert note.startswith("horovod.hierarchical_allreduce=true has no effect on CPU ranks")
    assert plan_for(compose_cfg, "horovod.hierarchical_allreduce=true", "gpus=4").notes() == []
