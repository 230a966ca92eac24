"""The built wheel is the whole of tntrun, under the one top-level name ``tntrun``, and it trains.

``test_every_package_is_listed`` is pure and fast: pyproject.toml lists its packages by hand
(setuptools cannot discover them through the package-dir mapping of conf/, models/ and
datasets/), so a new folder with an ``__init__.py`` must be added there.

The slow tests build the wheel from a copy of the checkout, install it into a fresh virtual
environment (tensorflow-cpu and its Keras 3 from PyPI, the cached Horovod wheel; no tf-keras)
and train from a directory outside the checkout with nothing pointing back into it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.paths import ROOT
from tests.helpers.stack import horovod_wheel, tensorflow_requirement

PYTHON = ".".join(map(str, sys.version_info[:2]))  # the fresh venv's, as this one's

HOROVOD_REQUIREMENTS = ("cloudpickle", "psutil", "pyyaml", "packaging", "cffi")  # it has --no-deps
# Not part of the build: the copy the wheel is built from leaves them out.
NOT_SOURCE = (
    ".git",
    ".venv*",
    "outputs",
    "build",
    "dist",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".ruff_cache",
    "multirun",
)


def setuptools_config(root: Path) -> tuple[list[str], dict[str, str]]:
    """The ``packages`` list and the ``package-dir`` mapping of ``root/pyproject.toml``."""
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    return list(config["packages"]), dict(config["package-dir"])


def packages_on_disk(root: Path, package_dir: dict[str, str]) -> dict[str, Path]:
    """Every folder with an ``__init__.py`` under a mapped folder, by its name in the wheel."""
    found = {}
    for name, folder in package_dir.items():
        base = root / folder
        for init in base.rglob("__init__.py"):
            parts = init.parent.relative_to(base).parts
            if "__pycache__" not in parts:
                found[".".join((name, *parts))] = init.parent
    return found


def test_every_package_is_listed():
    packages, package_dir = setuptools_config(ROOT)
    on_disk = packages_on_disk(ROOT, package_dir)
    assert {"tntrun.engine", "tntrun.conf", "tntrun.models", "tntrun.datasets"} <= set(on_disk)
    missing = sorted(set(on_disk) - set(packages))
    assert not missing, (
        f"add {missing} to [tool.setuptools] packages in pyproject.toml: the wheel leaves them out"
    )
    stale = sorted(set(packages) - set(on_disk))
    assert not stale, f"{stale} in pyproject.toml have no folder with an __init__.py"
    foreign = sorted(p for p in packages if p != "tntrun" and not p.startswith("tntrun."))
    assert not foreign, f"{foreign} would be top-level packages beside tntrun"
    # A folder of modules without an __init__.py is a namespace package: never listed, left out.
    modules = [py for folder in package_dir.values() for py in (ROOT / folder).rglob("*.py")]
    orphans = sorted({py.parent for py in modules} - set(on_disk.values()))
    assert not orphans, f"add an __init__.py to {orphans}: the wheel leaves their modules out"


def timed(label: str, seconds: float, record) -> None:
    print(f"\n[packaging] {label}: {seconds:.1f} s", flush=True)
    record(f"seconds_{label.replace(' ', '_')}", round(seconds, 1))


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the checkout: building in place would write build/ and *.egg-info into it
    (other work happens there) and a stale build/lib would leak deleted modules into the wheel."""
    copy = tmp_path_factory.mktemp("source") / "tntrun"
    shutil.copytree(ROOT, copy, ignore=shutil.ignore_patterns(*NOT_SOURCE))
    return copy


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory, record_testsuite_property) -> Path:
    out = tmp_path_factory.mktemp("dist")
    start = time.monotonic()
    built = subprocess.run(
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
            str(source),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    timed("wheel build", time.monotonic() - start, record_testsuite_property)
    assert_succeeded(built)
    (path,) = out.glob("tntrun-*.whl")
    return path


@pytest.mark.slow
def test_wheel_contents(wheel, source):
    names = set(zipfile.ZipFile(wheel).namelist())
    for required in (
        "tntrun/cli.py",
        "tntrun/engine/worker.py",
        "tntrun/config/schema.py",
        "tntrun/planning/plan.py",
        "tntrun/launch/horovodrun.py",
        "tntrun/tracking/mlflow_tracker.py",
        "tntrun/conf/__init__.py",
        "tntrun/conf/config.yaml",
        "tntrun/conf/model/mlp.yaml",
        "tntrun/conf/model/custom.yaml",
        "tntrun/conf/dataset/digits.yaml",
        "tntrun/conf/hydra/launcher/tntrun_slurm.yaml",
        "tntrun/models/mlp.py",
        "tntrun/datasets/digits.py",
    ):
        assert required in names, f"{required} missing from {wheel.name}"
    # Every module and every config of the source, wherever package-dir maps it from.
    _, package_dir = setuptools_config(source)
    expected = set()
    for name, folder in package_dir.items():
        base = source / folder
        for path in [*base.rglob("*.py"), *base.rglob("*.yaml")]:
            if "__pycache__" not in path.parts:
                expected.add("/".join((*name.split("."), *path.relative_to(base).parts)))
    assert not sorted(expected - names), f"missing from {wheel.name}: {sorted(expected - names)}"
    top_level = {name.split("/")[0] for name in names if ".dist-info/" not in name}
    assert top_level == {"tntrun"}, f"the wheel would shadow other packages: {top_level}"
    (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    assert "tntrun = tntrun.cli:main" in zipfile.ZipFile(wheel).read(entry_points).decode()


@dataclass(frozen=True)
class FreshVenv:
    root: Path
    env: dict[str, str]  # as if activated, with nothing pointing into the checkout

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def site_packages(self) -> Path:
        return self.root / "lib" / f"python{PYTHON}" / "site-packages"


def fresh_environment(venv: Path) -> dict[str, str]:
    """This environment activating ``venv``: no MLflow/Horovod/tntrun settings, no PYTHONPATH
    and no PATH entry into the checkout or its .venv."""
    drop = ("MLFLOW_", "HOROVOD_", "TNTRUN_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    for name in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "PYTHONSAFEPATH"):
        env.pop(name, None)
    outside = [p for p in env.get("PATH", "").split(os.pathsep) if p and not inside_checkout(p)]
    env["PATH"] = os.pathsep.join([str(venv / "bin"), *outside])
    env["VIRTUAL_ENV"] = str(venv)
    env["PYTHONNOUSERSITE"] = "1"  # nothing from ~/.local either
    return env


def inside_checkout(path: str | Path) -> bool:
    return Path(path).resolve().is_relative_to(ROOT)


WHERE = "import json, sys, tntrun; print(json.dumps([tntrun.__file__, sys.path]))"


@pytest.fixture(scope="module")
def fresh(wheel, tmp_path_factory, record_testsuite_property) -> Iterator[FreshVenv]:
    """A new virtual environment holding only PyPI's packages, Horovod and the tntrun wheel."""
    horovod = horovod_wheel()
    root = tmp_path_factory.mktemp("fresh") / "venv"
    assert not inside_checkout(root)
    base_python = getattr(sys, "_base_executable", sys.executable)  # the venv's interpreter
    start = time.monotonic()
    created = subprocess.run([base_python, "-m", "venv", root], capture_output=True, text=True)
    assert_succeeded(created)
    venv = FreshVenv(root, fresh_environment(root))
    pip = [str(venv.python), "-m", "pip", "install", "--quiet"]
    # --no-compile, then compileall on every core: pip compiles one file at a time, and
    # leaving it to the first run (driver and ranks compiling what they import) cost it 45 s.
    installed = subprocess.run(
        [*pip, "--no-compile", tensorflow_requirement(), *HOROVOD_REQUIREMENTS, str(wheel)],
        capture_output=True,
        text=True,
        env=venv.env,
        timeout=900,
    )
    assert_succeeded(installed)
    installed = subprocess.run(
        [*pip, "--no-compile", "--no-deps", str(horovod)],
        capture_output=True,
        text=True,
        env=venv.env,
        timeout=300,
    )
    assert_succeeded(installed)
    timed("venv and pip install", time.monotonic() - start, record_testsuite_property)
    start = time.monotonic()
    compiled = subprocess.run(
        [venv.python, "-m", "compileall", "-q", "-j0", venv.site_packages],
        capture_output=True,
        text=True,
        env=venv.env,
        timeout=300,
    )
    assert_succeeded(compiled)
    timed("compileall", time.monotonic() - start, record_testsuite_property)

    assert "include-system-site-packages = false" in (root / "pyvenv.cfg").read_text()
    for pth in venv.site_packages.glob("*.pth"):
        assert str(ROOT) not in pth.read_text(), f"{pth} points into the checkout"
    outside = tmp_path_factory.mktemp("outside")
    where = subprocess.run(
        [venv.python, "-c", WHERE], capture_output=True, text=True, env=venv.env, cwd=outside
    )
    assert_succeeded(where)
    module, path = json.loads(where.stdout)
    assert Path(module).is_relative_to(venv.site_packages), module
    assert not [p for p in path if p and inside_checkout(p)], path
    yield venv
    # 2.5 GB (pytest keeps its last three base temps): deleted by a detached `rm`, which
    # takes half a minute that the suite need not wait for.
    subprocess.Popen(
        ["rm", "-rf", str(root)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def train(fresh: FreshVenv, workdir: Path, label: str, record_property, *overrides: str):
    """The fresh venv's ``tntrun`` run in ``workdir`` (outside the checkout), to its end."""
    assert not inside_checkout(workdir)
    start = time.monotonic()
    result = subprocess.run(
        [fresh.root / "bin" / "tntrun", *overrides, f"output_root={workdir / 'outputs'}"],
        capture_output=True,
        text=True,
        env=fresh.env,
        cwd=workdir,
        timeout=600,
    )
    timed(label, time.monotonic() - start, record_property)
    assert_succeeded(result)
    assert "tntrun: run FINISHED" in result.stdout, result.stdout[-4000:]
    (line,) = (ln for ln in result.stdout.splitlines() if ln.startswith("tntrun: run directory: "))
    run_dir = Path(line.removeprefix("tntrun: run directory: "))
    assert run_dir.is_relative_to(workdir / "outputs"), run_dir
    plan = (run_dir / "plan.json").read_text()
    assert str(ROOT) not in plan, f"the run's plan points into the checkout:\n{plan}"
    command = json.loads(plan)["launch_command"]
    assert command[:3] == [str(fresh.python), "-m", "tntrun.launch.horovodrun_command"], command
    assert command.count(str(fresh.python)) == 2, (
        f"the ranks would not run the fresh venv's python: {command}"
    )
    return run_dir


@pytest.mark.slow
def test_the_wheel_trains(fresh, tmp_path, record_property):
    """The default experiment (digits MLP, 2 CPU ranks) with the installed wheel only."""
    run_dir = train(fresh, tmp_path, "default run", record_property, "train.epochs=1")
    assert str(ROOT) not in (run_dir / "ranks.log").read_text()
    assert (run_dir / "model.keras").is_file()


USER_MODEL = """
import json
import os
import sys
from pathlib import Path

import tntrun


def build(input_shape, num_classes, width=16):
    import keras

    record = {"rank": os.environ.get("HOROVOD_RANK"), "tntrun": tntrun.__file__,
              "python": sys.executable, "width": width}
    Path(__file__).with_name(f"built-{os.getpid()}.json").write_text(json.dumps(record))
    return keras.Sequential([
        keras.Input(shape=tuple(input_shape)),
        keras.layers.Flatten(),
        keras.layers.Dense(width, activation="relu"),
        keras.layers.Dense(num_classes),
    ])
"""


@pytest.mark.slow
def test_a_user_model_from_the_working_directory_trains(fresh, tmp_path, record_property):
    """``model._target_=mymodels.build``: the driver checks and every rank imports the user's
    module from the working directory, next to the tntrun the wheel installed."""
    (tmp_path / "mymodels.py").write_text(USER_MODEL)
    # model=custom (conf/model/custom.yaml): the default model's schema (MlpConfig) refuses
    # `~model.hidden_units` ("does not support deletion").
    overrides = (
        "model=custom",
        "model._target_=mymodels.build",
        "+model.width=8",
        "train.epochs=1",
    )
    train(fresh, tmp_path, "user model run", record_property, *overrides)
    records = [json.loads(p.read_text()) for p in tmp_path.glob("built-*.json")]
    assert sorted(r["rank"] for r in records) == ["0", "1"], records
    for record in records:
        assert Path(record["tntrun"]).is_relative_to(fresh.site_packages), record
        assert record["python"] == str(fresh.python) and record["width"] == 8, record
