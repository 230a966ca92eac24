"""Shared fixtures: config composition and running the real ``tntrun`` CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

BIN = Path(sys.executable).parent


@pytest.fixture
def compose_cfg() -> Callable[..., DictConfig]:
    """Compose tntrun's config with overrides, as the CLI would (no Hydra run dir)."""

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_module(config_module="tntrun.conf", version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


def clean_env() -> dict[str, str]:
    """This environment without MLflow/Horovod settings that would leak into a run."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HOROVOD_"))}


def tntrun_command(workdir: Path, *args: str) -> list[str]:
    return [str(BIN / "tntrun"), *args, f"output_root={workdir / 'outputs'}"]


def tntrun_cli(workdir: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run the installed ``tntrun`` console script with outputs under ``workdir``."""
    return subprocess.run(
        tntrun_command(workdir, *args),
        cwd=workdir,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture
def run_tntrun(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``tntrun_cli`` with outputs under this test's ``tmp_path``."""
    return lambda *args, timeout=600: tntrun_cli(tmp_path, *args, timeout=timeout)


def store_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"


def run_dir_of(result: subprocess.CompletedProcess) -> Path:
    """The run directory a finished ``tntrun`` printed."""
    for line in result.stdout.splitlines():
        if line.startswith("tntrun: run directory: "):
            return Path(line.removeprefix("tntrun: run directory: "))
    raise AssertionError(f"no run directory in output:\n{result.stdout[-2000:]}")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """This test's ``tmp_path`` as working directory, with no MLflow/Horovod settings."""
    for name in list(os.environ):
        if name.startswith(("MLFLOW_", "HOROVOD_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # add_user_path() stays in this test
    return tmp_path


def run_on_two_ranks(script: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """``horovodrun -np 2`` of a rank script (tests/rank_scripts) on CPU ranks over loopback."""
    return subprocess.run(
        [str(BIN / "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
         sys.executable, str(script)],
        env={**clean_env(), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"},
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
