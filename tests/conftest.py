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


@pytest.fixture
def run_tntrun(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Run the installed ``tntrun`` console script with outputs under ``tmp_path``."""

    def _run(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "HOROVOD_"))}
        return subprocess.run(
            [str(BIN / "tntrun"), f"output_root={tmp_path / 'outputs'}", *args],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return _run


def store_uri(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
