"""Checkpoints that fail safe, on real checkpoint folders (no ranks, no TensorFlow): each
carries its files' checksums; resume falls back past a damaged one (set aside as
``.damaged``) and refuses in one line when none is intact; a full disk while one is written
leaves the previous ones and no temporary folder."""

from __future__ import annotations

import errno
import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.helpers.paths import ROOT
from tntrun.contract.checkpoint_integrity import damage, newest_intact
from tntrun.contract.checkpoints import CheckpointMeta, list_checkpoints, publish, read_meta
from tntrun.contract.disk import DiskError
from tntrun.contract.run_lock import RunDirLock
from tntrun.errors import PlanError
from tntrun.planning.resume import load_resumed_run

OLD_RUN = ROOT / "tests" / "data" / "run_dir_v0_1" / "run"


def state_writer(size: int = 4096):
    """Stands for TensorFlow's checkpoint writer: an index and a data file under the prefix."""

    def write(prefix: str) -> None:
        Path(f"{prefix}.index").write_bytes(b"index" * 10)
        Path(f"{prefix}.data-00000-of-00001").write_bytes(bytes(range(256)) * (size // 256))

    return write


def write(run_dir: Path, epoch: int, keep: int = 5) -> Path:
    meta = CheckpointMeta(epoch, epoch * 22, 2, 64, "h")
    return publish(run_dir, meta, state_writer(), keep)


def a_run(run_dir: Path, compose_cfg, epochs: int = 3) -> Path:
    """A stopped run's directory as the driver finds it: config, run id, checkpoints."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(compose_cfg("train.epochs=9")))
    (run_dir / "run_id").write_text("abc123")
    for epoch in range(1, epochs + 1):
        write(run_dir, epoch)
    return run_dir


def resume(run_dir: Path):
    return load_resumed_run(str(run_dir), lambda _: None, "sqlite:///x.db", [], [], False)


def test_a_checkpoint_carries_the_checksum_of_each_of_its_files(tmp_path):
    folder = write(tmp_path, 1)
    sums = json.loads((folder / "meta.json").read_text())["checksums"]
    assert sorted(sums) == ["state.data-00000-of-00001", "state.index"]
    assert all(value.startswith("sha256:") for value in sums.values())
    assert damage(folder) is None and read_meta(folder).epoch == 1


def flip_a_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def truncate_meta(folder: Path) -> None:
    text = (folder / "meta.json").read_text()
    (folder / "meta.json").write_text(text[: len(text) // 2])


@pytest.mark.parametrize(
    ("spoil", "why"),
    [
        (lambda f: flip_a_byte(f / "state.data-00000-of-00001"), "does not match its checksum"),
        (lambda f: (f / "state.index").write_bytes(b"ind"), "state.index does not match"),
        (lambda f: (f / "state.data-00000-of-00001").unlink(), "cannot be read"),
        (truncate_meta, "its meta.json cannot be read: JSONDecodeError"),
        (lambda f: (f / "meta.json").write_text('{"epoch": 3}'), "meta.json cannot be read"),
    ],
    ids=["data", "index", "missing", "truncated-meta", "meta-keys"],
)
def test_resume_falls_back_past_a_damaged_newest_checkpoint(tmp_path, compose_cfg, spoil, why):
    run_dir = a_run(tmp_path / "run", compose_cfg)
    spoil(run_dir / "checkpoints" / "epoch-0003")
    resumed = resume(run_dir)
    assert Path(resumed.point.checkpoint).name == "epoch-0002"
    assert resumed.point.meta.epoch == 2
    (line,) = resumed.damaged
    assert line.startswith(f"checkpoint epoch-0003 of {run_dir} is damaged (")
    assert why in line and "kept as epoch-0003.damaged, falling back" in line
    names = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert names == ["epoch-0001", "epoch-0002", "epoch-0003.damaged"]  # kept, never listed
    assert [p.name for p in list_checkpoints(run_dir)] == ["epoch-0001", "epoch-0002"]


def test_resume_refuses_in_one_line_when_no_checkpoint_is_intact(tmp_path, compose_cfg):
    run_dir = a_run(tmp_path / "run", compose_cfg, epochs=2)
    for folder in list_checkpoints(run_dir):
        flip_a_byte(folder / "state.data-00000-of-00001")
    with pytest.raises(PlanError) as refused:
        resume(run_dir)
    (line,) = refused.value.problems
    assert line == (
        f"resume={run_dir}: every checkpoint of {run_dir} is damaged (epoch-0002, epoch-0001; "
        "kept as *.damaged): nothing to resume from, start a new run"
    )


def test_a_checkpoint_of_an_older_tntrun_without_checksums_still_resumes(tmp_path):
    run_dir = shutil.copytree(OLD_RUN, tmp_path / "run")
    checkpoint, damaged = newest_intact(run_dir)
    assert (checkpoint.name, damaged) == ("epoch-0001.batch-00010", [])
    (checkpoint / "state.index").unlink()  # what can be checked without checksums is
    assert damage(checkpoint) == "state.index is missing"


def test_a_run_directory_a_live_driver_holds_is_not_resumed(tmp_path, compose_cfg):
    run_dir = a_run(tmp_path / "run", compose_cfg, epochs=1)
    with RunDirLock(run_dir), pytest.raises(PlanError) as refused:
        resume(run_dir)
    (line,) = refused.value.problems
    assert f"resume={run_dir}: {run_dir} is still running (pid " in line


@pytest.mark.parametrize(
    "failure",
    [
        OSError(errno.ENOSPC, "No space left on device", "state.data-00000-of-00001"),
        RuntimeError("state.data-00000-of-00001.tempstate; No space left on device"),  # TF's
    ],
    ids=["oserror", "tensorflow-text"],
)
def test_a_full_disk_while_publishing_leaves_the_previous_checkpoints_and_no_tmp(tmp_path, failure):
    write(tmp_path, 1)

    def fails(prefix: str) -> None:
        state_writer()(prefix)
        raise failure

    with pytest.raises(DiskError) as full:
        publish(tmp_path, CheckpointMeta(2, 44, 2, 64, "h"), fails, keep=5)
    assert full.value.errno == errno.ENOSPC
    line = str(full.value)
    assert line.startswith("No space left on device writing ") and " free of " in line
    assert "\n" not in line
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["epoch-0001"]
    assert damage(tmp_path / "checkpoints" / "epoch-0001") is None


class Heard:
    """What a supervisor tells the recorder of a restart (RankEvents' two restart calls)."""

    def __init__(self) -> None:
        self.restarts: list[str] = []

    def restarting(self) -> int:
        return len(self.restarts) + 1

    def restarted(self, number: int, detail: str, plan) -> None:
        self.restarts.append(detail)


def test_a_restart_falls_back_past_a_damaged_newest_checkpoint(tmp_path, compose_cfg, caplog):
    from tests.helpers.plans import plan_for
    from tntrun.launch.rank_job import LaunchResult
    from tntrun.launch.supervisor import Supervisor

    plan = plan_for(compose_cfg, "faults.max_restarts=1", run_dir=tmp_path)
    write(tmp_path, 1)
    flip_a_byte(write(tmp_path, 2) / "state.index")
    points = []
    supervisor = Supervisor(plan, tmp_path, lambda point, hosts: points.append(point) or plan)
    heard = Heard()
    assert supervisor.restart(LaunchResult(1, interrupted=False), heard)
    assert [Path(p.checkpoint).name for p in points] == ["epoch-0001"]
    assert heard.restarts == ["the ranks failed; from epoch-0001"]
    (line,) = [r.getMessage() for r in caplog.records if "damaged" in r.getMessage()]
    assert line.startswith(f"tntrun: checkpoint epoch-0002 of {tmp_path} is damaged (state.index")

    flip_a_byte(tmp_path / "checkpoints" / "epoch-0001" / "state.index")
    assert not supervisor.restart(LaunchResult(1, interrupted=False), heard)
    assert "not restarting the ranks: the run wrote no intact checkpoint to restart from" in [
        r.getMessage().removeprefix("tntrun: ") for r in caplog.records
    ]
