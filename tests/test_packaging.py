"""The built wheel carries the configs and the zoos under the tntrun namespace."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
    )
    (built,) = out.glob("tntrun-*.whl")
    return built


def test_wheel_contents(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    for required in (
        "tntrun/conf/config.yaml",
        "tntrun/conf/model/mlp.yaml",
        "tntrun/conf/dataset/digits.yaml",
        "tntrun/models/mlp.py",
        "tntrun/datasets/digits.py",
        "tntrun/worker.py",
    ):
        assert required in names, f"{required} missing from {wheel.name}"
    top_level = {name.split("/")[0] for name in names if "dist-info" not in name}
    assert top_level == {"tntrun"}, f"the wheel would shadow other packages: {top_level}"


def test_wheel_works_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    fresh_python = venv / "bin" / "python"
    # Dependencies come from this environment (no network); tntrun itself only from the wheel.
    fresh_site = subprocess.run(
        [fresh_python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(fresh_site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [fresh_python, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
        check=True,
    )
    where = subprocess.run(
        [
            fresh_python,
            "-c",
            "import tntrun, tntrun.models.mlp, tntrun.datasets.digits as d; print(tntrun.__file__);"
            "print(d.DigitsDataset().info().num_train)",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.split()
    assert where[0].startswith(str(venv)) and where[1] == "1438"

    cfg = subprocess.run(
        [venv / "bin" / "tntrun", "--cfg", "job", "global_batch_size=32"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert cfg.returncode == 0, cfg.stderr
    assert "global_batch_size: 32" in cfg.stdout and "build_mlp" in cfg.stdout
