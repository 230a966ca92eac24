"""The run directory under faults, with real ranks: a second run into a running run's
directory, a full disk, a damaged newest checkpoint after a preemption.

Short on purpose (the digits MLP, 2 epochs, 1 rank): one held run serves the first two, filled
while rank 0 waits at a known step; the third is a preempted run and its resumption.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.helpers.asserts import assert_exit, assert_succeeded
from tests.helpers.commands import start_tntrun, stop_session, tntrun_cli
from tests.helpers.components import require_commands, require_root
from tests.helpers.driving import fault
from tests.helpers.processes import HELD, Hold
from tests.helpers.runs import run_dir_of, store_uri
from tntrun.contract.checkpoint_integrity import damage

pytestmark = pytest.mark.slow

# A checkpoint every epoch; neither MLflow's system metrics nor a finished run's MLflow Model
# (rank 0 imports MLflow to write it: about 2 CPU-s), which no test here examines.
SHORT = (
    "train.epochs=2",
    "tracking.system_metrics=false",
    "tracking.log_model=false",
    "checkpoint.min_interval_s=0",
)
HOLD_AT = 30  # in epoch 2 (22 steps an epoch): epoch 1's checkpoint is written, epoch 2's not
DISK_MIB = 16  # a tmpfs the run's files fit in (about 1 MiB), filled by the test
# Half the CPU of two ranks: what these tests prove is the driver's and rank 0's.
ONE_RANK = ("ranks_per_node=1",)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A tmpfs of DISK_MIB MiB mounted for the test (root: the tests run as root in CI)."""
    require_root("mounting a small tmpfs as the run's disk")
    require_commands("mount", "umount", fix="apt-get install mount")
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={DISK_MIB}m", "tmpfs", disk], check=True)
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", disk], check=False)


def held_overrides(tmp_path: Path, hold: Hold) -> tuple[str, ...]:
    """Rank 0 held at HOLD_AT (not the helper's usual step 5) until ``hold.release()``."""
    overrides = hold.overrides()
    return tuple(
        f"+callbacks.hold.at_step={HOLD_AT}" if o.startswith("+callbacks.hold.at_step=") else o
        for o in overrides
    )


def read_until_held_and_tracked(driver: subprocess.Popen) -> list[str]:
    """The driver's lines up to rank 0 held and its MLflow run opened (both known)."""
    lines: list[str] = []
    assert driver.stdout is not None
    for line in driver.stdout:
        lines.append(line)
        text = "".join(lines)
        if HELD in text and re.search(r"MLflow run \w+ in", text):
            return lines
    raise AssertionError("the run ended before rank 0 was held:\n" + "".join(lines)[-3000:])


def fill(disk: Path) -> None:
    """Write zeros into ``disk`` until it is full."""
    with (disk / "filler").open("wb") as filler:
        try:
            while True:
                filler.write(b"\0" * 65536)
                filler.flush()
        except OSError:
            pass


def test_a_second_run_is_refused_then_a_full_disk_fails_the_first_as_failure_disk(
    tmp_path, small_disk
):
    """On one rank: the lock, the refusal and the disk's failure are the driver's and rank
    0's (rank 0 writes the checkpoints), so a second rank would prove nothing more."""
    run_dir, hold = small_disk / "run", Hold(tmp_path)
    first = start_tntrun(
        tmp_path, *SHORT, *ONE_RANK, *held_overrides(tmp_path, hold), f"hydra.run.dir={run_dir}"
    )
    try:
        lines = read_until_held_and_tracked(first)
        config = (run_dir / "config.yaml").read_text()
        hydra_record = (run_dir / ".hydra" / "overrides.yaml").read_text()

        second = tntrun_cli(tmp_path, *SHORT, "seed=1", f"hydra.run.dir={run_dir}")
        assert_exit(second, 2)
        (line,) = second.stderr.strip().splitlines()
        assert line.startswith(f"tntrun: config error: run directory {run_dir} is in use by a ")
        assert f"(pid {first.pid}@" in line
        assert (run_dir / "config.yaml").read_text() == config  # nothing of the first touched
        assert (run_dir / ".hydra" / "overrides.yaml").read_text() == hydra_record

        fill(small_disk)
        hold.release()
        lines += list(first.stdout)
        code = first.wait(timeout=120)
    finally:
        stop_session(first)
    output = "".join(lines)
    assert code == 1, output[-3000:]
    assert "does not answer" not in output  # the store is on another disk
    ended = [x for x in output.splitlines() if x.startswith("tntrun: run FAILED")]
    assert len(ended) == 1, output[-4000:]
    ended = ended[0]
    assert ended.startswith("tntrun: run FAILED: disk: rank 0: No space left on device writing ")
    assert f" free of {DISK_MIB}.0 MiB on {small_disk})" in ended

    client = MlflowClient(store_uri(tmp_path))
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert run.info.status == "FAILED" and run.data.params["seed"] == "42"
    assert run.data.tags["failure.disk"] == ended.removeprefix("tntrun: run FAILED: disk: ")
    assert run.data.tags["run_dir"] == str(run_dir)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["epoch-0001"], "no temporary folder left, the previous one kept"
    assert damage(run_dir / "checkpoints" / "epoch-0001") is None
    assert (run_dir / "run.lock").read_text() == ""  # released


PREEMPT = fault("preempt", rank=0, step=30)  # it stops after step 32: epoch 2, batch 10
NEWEST = "epoch-0001.batch-00010"  # 22 steps an epoch


def test_a_damaged_newest_checkpoint_after_a_preemption_falls_back_and_finishes(tmp_path):
    preempted = tntrun_cli(tmp_path, *SHORT, *ONE_RANK, *PREEMPT)
    assert "tntrun: run KILLED" in preempted.stdout, preempted.stdout[-3000:]
    old_dir = run_dir_of(preempted)
    names = sorted(p.name for p in (old_dir / "checkpoints").iterdir())
    assert names == ["epoch-0001", NEWEST]
    data = old_dir / "checkpoints" / NEWEST / "state.data-00000-of-00001"
    spoilt = bytearray(data.read_bytes())
    spoilt[len(spoilt) // 2] ^= 0xFF
    data.write_bytes(bytes(spoilt))

    resumed = tntrun_cli(tmp_path, *SHORT, *ONE_RANK, "resume=auto", "callbacks={}")
    output = resumed.stdout + resumed.stderr
    assert_succeeded(resumed)
    assert (
        f"tntrun: checkpoint {NEWEST} of {old_dir} is damaged (state.data-00000-of-00001 does "
        f"not match its checksum): kept as {NEWEST}.damaged, falling back to the one before"
    ) in resumed.stderr
    assert "Traceback" not in output
    run_id = (old_dir / "run_id").read_text()
    assert f"resume=auto: continuing run {run_id}" in resumed.stdout
    assert "epoch-0001 at epoch 1, step 22" in (run_dir_of(resumed) / "ranks.log").read_text()
    assert sorted(p.name for p in (old_dir / "checkpoints").iterdir()) == [
        "epoch-0001",
        f"{NEWEST}.damaged",
    ]
    client = MlflowClient(store_uri(tmp_path))
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["restart.1"].startswith("resume=auto: from epoch-0001")
    assert sorted(m.step for m in client.get_metric_history(run_id, "val_accuracy")) == [0, 1]
