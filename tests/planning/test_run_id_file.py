"""The run directory names its tracked run in ``run_id``; directories made before hold
``mlflow_run_id``, and resume still reads them."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from tntrun.contract import run_files
from tntrun.contract.checkpoints import CheckpointMeta, publish
from tntrun.planning.resume import load_resumed_run


def test_the_run_id_file_is_run_id_and_the_old_name_is_still_read(tmp_path):
    assert run_files.RUN_ID == "run_id"
    assert run_files.read_run_id(tmp_path) is None
    (tmp_path / "mlflow_run_id").write_text("old\n")
    assert run_files.read_run_id(tmp_path) == "old"
    (tmp_path / "run_id").write_text("new")
    assert run_files.read_run_id(tmp_path) == "new"


def test_a_run_directory_made_before_the_rename_still_resumes(tmp_path, compose_cfg):
    run_dir = tmp_path / "old-run"
    run_dir.mkdir()
    (run_dir / run_files.CONFIG).write_text(OmegaConf.to_yaml(compose_cfg("model=mlp")))
    (run_dir / "mlflow_run_id").write_text("0123abcd")
    meta = CheckpointMeta(1, 22, 2, 64, "h")
    publish(run_dir, meta, lambda prefix: Path(prefix).write_text("state"), keep=2)

    def no_lookup(run_id: str) -> str | None:
        raise LookupError(run_id)

    resumed = load_resumed_run(str(run_dir), no_lookup, "store", [], [], False)
    assert resumed.run_id == "0123abcd"
    assert resumed.run_dir == run_dir.resolve()
    assert resumed.point.meta.epoch == 1
