"""Resuming a preempted 2-rank run on 1 rank (issue 34, item 5), with real ranks: refused
without resume_allow_layout_change=true before any rank starts; with it, the same MLflow run
goes on at the checkpointed step and ends with the weights of an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from tests.engine.test_engine import CONFIG
from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.driving import fault
from tests.helpers.runs import run_dir_of, store_uri, weights_in

pytestmark = pytest.mark.slow

# Rank 1 SIGTERMs itself at step 30; the ranks stop after step 32 = epoch 2, batch 9 of 23.
PREEMPT = fault("preempt", rank=1, step=30)
CHECKPOINT, STEP = "epoch-0001.batch-00009", 32
ONE_RANK = ("ranks_per_node=1",)
ALLOW = ("resume_allow_layout_change=true",)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """The final weights of the same config on 2 ranks, never stopped."""
    work = tmp_path_factory.mktemp("uninterrupted")
    result = tntrun_cli(work, *CONFIG)
    assert_succeeded(result)
    return weights_in(run_dir_of(result))


def preempted_run(work) -> tuple[MlflowClient, str, str]:
    """A 2-rank run preempted at a known step: (client, its run id, its run directory)."""
    result = tntrun_cli(work, *CONFIG, *PREEMPT)
    assert "tntrun: run KILLED" in result.stdout, result.stdout[-3000:] + result.stderr[-2000:]
    run_dir = run_dir_of(result)
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["epoch-0001", CHECKPOINT]
    client = MlflowClient(store_uri(work))
    run_id = (run_dir / "run_id").read_text()
    assert client.get_run(run_id).data.tags["world_size"] == "2"
    return client, run_id, str(run_dir)


def assert_continued_on_one_rank(client, run_id, resumed, uninterrupted) -> None:
    """The same run, FINISHED, tagged with the new layout, trained on from the checkpoint's
    step to the weights of the uninterrupted 2-rank run."""
    assert_succeeded(resumed)
    assert "1 ranks on localhost:1" in resumed.stdout
    assert f"continuing run {run_id}" in resumed.stdout
    run = client.get_run(run_id)
    tags = run.data.tags
    assert run.info.status == "FINISHED"
    assert (tags["world_size"], tags["hosts"], tags["layout_changes"]) == ("1", "localhost:1", "1")
    assert run.info.run_name == "mlp-digits-1x64"
    assert tags["resume.layout_change"] == (
        "2 ranks, global batch 64 -> 1 ranks, global batch 64; LR 0.1, "
        f"restarting at step {STEP} (epoch 2, batch 9)"
    )
    ranks_log = (run_dir_of(resumed) / "ranks.log").read_text()
    assert f"{CHECKPOINT} at epoch 1, step {STEP}" in ranks_log
    history = client.get_metric_history(run_id, "val_accuracy")
    assert sorted({m.step for m in history}) == [0, 1, 2, 3]
    # 1 rank and 2 ranks differ only in the order of the allreduce's sums (test_engine.py).
    for a, b in zip(weights_in(run_dir_of(resumed)), uninterrupted, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5, rtol=0)


def test_resume_auto_on_one_rank_is_refused_without_the_key_then_continues_with_it(
    uninterrupted, tmp_path
):
    client, run_id, run_dir = preempted_run(tmp_path)

    refused = tntrun_cli(tmp_path, *CONFIG, "resume=auto", *ONE_RANK)
    assert_exit(refused, 2)
    (line,) = refused.stderr.strip().splitlines()
    assert line == (
        "tntrun: config error: resume: the checkpoint was trained on 2 ranks with global batch "
        "64, this run has 1 ranks and global batch 64: keep the layout or set "
        "resume_allow_layout_change=true"
    )
    assert "ranks on" not in refused.stdout, "no rank started"
    assert [p.parent for p in tmp_path.glob("outputs/runs/*/*/ranks.log")] == [Path(run_dir)]
    runs = client.search_runs(
        [client.get_run(run_id).info.experiment_id], run_view_type=ViewType.ALL
    )
    assert [(r.info.run_id, r.info.status) for r in runs] == [(run_id, "KILLED")]

    resumed = tntrun_cli(tmp_path, *CONFIG, "resume=auto", *ONE_RANK, *ALLOW)
    assert "resume=auto: continuing run" in resumed.stdout
    assert_continued_on_one_rank(client, run_id, resumed, uninterrupted)


def test_an_explicit_resume_on_one_rank_continues_at_the_checkpointed_step(uninterrupted, tmp_path):
    client, run_id, run_dir = preempted_run(tmp_path)
    resumed = tntrun_cli(tmp_path, *CONFIG, f"resume={run_dir}", *ONE_RANK, *ALLOW)
    assert_continued_on_one_rank(client, run_id, resumed, uninterrupted)
