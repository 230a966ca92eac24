"""Fixtures (config composition, the tntrun CLI, test hosts, Slurm) and the hooks that keep
processes out of tests not marked ``slow``; what tests share besides is in tests/helpers/."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig
from xdist.scheduler import LoadScopeScheduling

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import tntrun_cli
from tests.helpers.netns import NetnsHosts, netns_hosts_down, netns_hosts_up, require_netns_hosts
from tests.helpers.process_guard import is_slow, no_process_started, processes_refused
from tests.helpers.runs import DETERMINISTIC, final_weights
from tests.helpers.slurm import SlurmCluster, require_slurm, slurm_down, slurm_up
from tests.helpers.user_data import forget_modules_from

# Zoo models built in a test process use the Keras the ranks train (Keras 3 on TensorFlow),
# whatever the environment of `make test` says.
os.environ.update({"KERAS_BACKEND": "tensorflow", "TF_USE_LEGACY_KERAS": "0"})


def _in_process_unless_slow(item: pytest.Item) -> Generator[None, object, object]:
    """Around a phase of a test not marked slow: starting a process fails the test."""
    if is_slow(item):
        return (yield)
    with processes_refused(item.nodeid) as attempts:
        result = yield
    no_process_started(attempts)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, object, object]:
    # Setup too: a session fixture that starts processes (two_local_ranks_weights) makes
    # the first test that asks for it slow.
    return (yield from _in_process_unless_slow(item))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, object, object]:
    return (yield from _in_process_unless_slow(item))


# Session fixtures that start machine-wide components (named network namespaces, the Slurm
# daemons, one PostgreSQL), and the test files using them: under ``pytest -n`` each group
# runs on one worker, which starts its components once (two would collide).
SHARED_COMPONENTS = {
    "netns_hosts": "hosts",
    "slurm": "hosts",
    "team_server": "team",
    "postgres": "team",
}
GROUP_FILES = {
    "hosts": ("tests/cluster/", "tests/tracking/test_ui.py"),
    "team": ("tests/team_server/",),
}
# The groups that take longest on one worker (minutes: the hosts' runs, the wheel's fresh
# environment), handed out first; then the groups with the most process-starting tests.
LONG_FIRST = ("hosts", "tests/system/test_packaging.py")


def group_of(nodeid: str) -> str:
    """The unit of work of a test under ``pytest -n``: its component group, else its file
    (the module fixtures of a file then run once)."""
    path = nodeid.split("::", 1)[0]
    return next((g for g, files in GROUP_FILES.items() if path.startswith(files)), path)


class ComponentScheduling(LoadScopeScheduling):
    """xdist's ``--dist loadscope`` with :func:`group_of` as the scope."""

    def _split_scope(self, nodeid: str) -> str:
        return group_of(nodeid)


def pytest_xdist_make_scheduler(config: pytest.Config, log) -> LoadScopeScheduling | None:
    if config.getvalue("dist") == "loadscope":
        return ComponentScheduling(config, log)
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The groups in the order xdist hands them out: LONG_FIRST, then the groups with the
    most process-starting tests (the long ones start early, so the workers end together);
    a test of tests/ using a shared component outside its group's files is a collection
    error."""
    slow = Counter(group_of(item.nodeid) for item in items if is_slow(item))

    def order(item: pytest.Item) -> tuple[int, int, str]:
        group = group_of(item.nodeid)
        first = LONG_FIRST.index(group) if group in LONG_FIRST else len(LONG_FIRST)
        return first, -slow[group], group

    items.sort(key=order)
    for item in (i for i in items if i.nodeid.startswith("tests/")):
        for fixture in set(item.fixturenames) & SHARED_COMPONENTS.keys():
            group = SHARED_COMPONENTS[fixture]
            if group_of(item.nodeid) != group:
                raise pytest.UsageError(
                    f"{item.nodeid} uses the {fixture} fixture: add its file to "
                    f"GROUP_FILES[{group!r}] in tests/conftest.py (pytest -n runs a group "
                    "on one worker)"
                )


@pytest.fixture
def compose_cfg() -> Callable[..., DictConfig]:
    """Compose tntrun's config with overrides, as the CLI would (no Hydra run dir)."""

    def _compose(*overrides: str) -> DictConfig:
        with initialize_config_module(config_module="tntrun.conf", version_base="1.3"):
            return compose(config_name="config", overrides=list(overrides))

    return _compose


@pytest.fixture
def run_tntrun(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``tntrun_cli`` with outputs under this test's ``tmp_path``."""
    return lambda *args, **kwargs: tntrun_cli(tmp_path, *args, **kwargs)


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's ``tmp_path`` as working directory, with no MLflow/Horovod settings; the
    user modules it imported from there (``mydata``, ``mymodels``) leave with it, so a later
    test's modules of the same name are its own."""
    for name in list(os.environ):
        if name.startswith(("MLFLOW_", "HOROVOD_")):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # add_user_path() stays in this test
    yield tmp_path
    forget_modules_from(tmp_path)


@pytest.fixture(scope="session")
def two_local_ranks_weights(tmp_path_factory) -> list[np.ndarray]:
    """Final weights of the DETERMINISTIC training on 2 local ranks: the reference."""
    workdir = tmp_path_factory.mktemp("local-reference")
    result = tntrun_cli(workdir, *DETERMINISTIC)
    assert_succeeded(result)
    return final_weights(result)


@pytest.fixture(scope="session")
def netns_hosts(tmp_path_factory) -> Iterator[NetnsHosts]:
    """Two real hosts (network namespaces with sshd), up for the whole session."""
    require_netns_hosts()
    state = tmp_path_factory.mktemp("netns")
    yield netns_hosts_up(state)
    netns_hosts_down(state)


@pytest.fixture(scope="session")
def slurm(request, tmp_path_factory) -> Iterator[SlurmCluster]:
    """A real Slurm cluster of the two netns hosts, started once per session."""
    require_slurm()
    netns_hosts = request.getfixturevalue("netns_hosts")  # after the check: it names Slurm
    state = tmp_path_factory.mktemp("slurm")
    yield slurm_up(state, netns_hosts)
    slurm_down(state)
