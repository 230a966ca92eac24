"""Shared fixtures: config composition and running the real ``tntrun`` CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

from tests.components import require_commands, require_root

BIN = Path(sys.executable).parent
# Zoo models built in a test process use the Keras the ranks train (Keras 3 on TensorFlow),
# whatever the environment of `make test` says.
os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})


@pytest.fixture
def compose_cfg() -> Callable[..., DictConfig]:
    """Compose tntrun's config with overrides, as the CLI would (no Hydra run dir)."""

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_module(config_module="tntrun.conf", version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


def free_port() -> int:
    """A TCP port nothing listens on now, on localhost."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        [
            str(BIN / "horovodrun"),
            "--gloo",
            "-np",
            "2",
            "-H",
            "localhost:2",
            sys.executable,
            str(script),
        ],
        env={**clean_env(), "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": "-1"},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"
# Training whose final weights do not depend on where its 2 ranks run (multi-host, Slurm).
DETERMINISTIC = (
    "deterministic=true",
    "train.epochs=2",
    "tracking.system_metrics=false",
    "model.dropout=0.0",
)


def final_weights(result: subprocess.CompletedProcess) -> list[np.ndarray]:
    return weights_in(run_dir_of(result))


def weights_in(run_dir: Path) -> list[np.ndarray]:
    with np.load(run_dir / "final_weights.npz") as saved:
        return [saved[f"arr_{i}"] for i in range(len(saved.files))]


# A user callback module (pace.py in the working directory) that lets a test interrupt
# training at a known point however busy the machine is:
# - Pace: each step sleeps step_s until the file ``until`` exists; with hold_at_step, that
#   step waits for ``until`` (training cannot run out before the test has acted).
# - HoldForStop: once, at (epoch, batch), write ``reached`` and wait until this rank has
#   noted a stop request (tntrun's watcher thread ``tntrun-stop-request`` ends when the
#   request is noted), so the ranks stop at that step or the next, never later.
PACE = """
import os
import threading
import time
from pathlib import Path

import keras


class Pace(keras.callbacks.Callback):
    def __init__(self, step_s, until, hold_at_step=None):
        super().__init__()
        self.step_s, self.until, self.hold_at_step = step_s, until, hold_at_step

    def on_train_batch_end(self, batch, logs=None):
        if os.path.exists(self.until):
            return
        step = int(self.model.optimizer.iterations.numpy())
        if step == self.hold_at_step:
            while not os.path.exists(self.until):
                time.sleep(0.05)
        time.sleep(self.step_s)


class HoldForStop(keras.callbacks.Callback):
    def __init__(self, epoch, batch, reached):
        super().__init__()
        self.epoch, self.batch, self.reached = epoch, batch, Path(reached)
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if (self._epoch, batch) != (self.epoch, self.batch) or self.reached.exists():
            return  # once: a resumed run keeps its config, this callback included
        self.reached.write_text(f"epoch {self._epoch} batch {batch}")
        while any(t.name == "tntrun-stop-request" for t in threading.enumerate()):
            time.sleep(0.05)
"""


def wait_for_file(path: Path, process: subprocess.Popen, timeout_s: float, log: Path) -> None:
    """Wait until ``path`` exists, failing early, with the end of ``log``, if ``process`` ends."""
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            why = "the process ended" if process.returncode is not None else f"{timeout_s:g} s"
            raise AssertionError(f"no {path} ({why}):\n{log.read_text()[-3000:]}")
        time.sleep(0.1)


def assert_same_weights(a: list[np.ndarray], b: list[np.ndarray]) -> None:
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-6)


@pytest.fixture(scope="session")
def two_local_ranks_weights(tmp_path_factory) -> list[np.ndarray]:
    """Final weights of the DETERMINISTIC training on 2 local ranks: the reference."""
    workdir = tmp_path_factory.mktemp("local-reference")
    result = tntrun_cli(workdir, *DETERMINISTIC)
    assert result.returncode == 0, result.stdout[-3000:]
    return final_weights(result)


@dataclass(frozen=True)
class NetnsHosts:
    """scripts/netns_hosts.sh's two hosts: addresses, names, sshd port and the key it takes."""

    addresses: tuple[str, ...]
    names: tuple[str, ...]
    port: str
    key: str

    def ssh_overrides(self) -> tuple[str, ...]:
        return (
            f"horovod.ssh_port={self.port}",
            f"horovod.ssh_identity_file={self.key}",
            "horovod.network_interface=tnt0",
        )


@pytest.fixture(scope="session")
def netns_hosts(tmp_path_factory) -> Iterator[NetnsHosts]:
    """Two real hosts (network namespaces with sshd), up for the whole session."""
    require_root("network-namespace hosts")
    require_commands(
        "ip",
        "unshare",
        "ssh",
        "/usr/sbin/sshd",
        fix="apt-get install iproute2 util-linux openssh-server",
    )
    state = tmp_path_factory.mktemp("netns")
    script = str(SCRIPTS / "netns_hosts.sh")
    up = subprocess.run(["bash", script, "up", str(state)], capture_output=True, text=True)
    assert up.returncode == 0, up.stderr
    lines = [line.split() for line in up.stdout.splitlines()]
    yield NetnsHosts(
        tuple(line[0] for line in lines), ("tnt-h1", "tnt-h2"), lines[0][1], lines[0][2]
    )
    subprocess.run(["bash", script, "down", str(state)], check=True)


@dataclass(frozen=True)
class SlurmCluster:
    """scripts/slurm_cluster.sh's cluster: slurmctld here, a slurmd on each netns host."""

    conf: Path
    hosts: NetnsHosts

    def env(self) -> dict[str, str]:
        """As a user submits: the environment active (sbatch passes it to the job)."""
        env = clean_env()
        return {**env, "SLURM_CONF": str(self.conf), "PATH": f"{BIN}:{env['PATH']}"}

    def run(self, *command: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
        return subprocess.run(
            list(command), cwd=cwd, env=self.env(), capture_output=True, text=True, timeout=timeout
        )


@pytest.fixture(scope="session")
def slurm(request, tmp_path_factory) -> Iterator[SlurmCluster]:
    """A real Slurm cluster of the two netns hosts, started once per session."""
    require_commands(
        "slurmctld", "slurmd", "munged", "salloc", fix="apt-get install slurm-wlm munge"
    )
    netns_hosts = request.getfixturevalue("netns_hosts")  # after the check: it names Slurm
    state = tmp_path_factory.mktemp("slurm")
    script = str(SCRIPTS / "slurm_cluster.sh")
    up = subprocess.run(
        ["bash", script, "up", str(state)], capture_output=True, text=True, timeout=120
    )
    assert up.returncode == 0, up.stderr
    yield SlurmCluster(state / "slurm.conf", netns_hosts)
    subprocess.run(["bash", script, "down", str(state)], check=True)
