"""The Horovod build tntrun carries: scripts/build_horovod.py and its patches (scripts/horovod/).

Horovod 0.28.1 is unmaintained and does not build against TensorFlow 2.19+ as released, so
the set-up applies the patches whose condition in ``series`` holds for the environment.
The fast tests check that choice and that the installed wheel was built with exactly it;
the slow one runs a user's Horovod script on two ranks, which only the patches make work.
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile

import pytest

from tests.helpers.asserts import assert_succeeded
from tests.helpers.commands import run_on_two_ranks
from tests.helpers.paths import RANK_SCRIPTS, ROOT, script_module
from tests.helpers.stack import horovod_wheel, tensorflow_version

PATCHES = ROOT / "scripts" / "horovod"
SERIES = (PATCHES / "series").read_text()
PYTHON = ".".join(map(str, sys.version_info[:2]))


build = script_module("build_horovod")
XLA, BROADCAST, DISTUTILS, STREAM, LEAN, KILL = (
    "tf2.19-leave-out-xla-ops.patch",
    "keras3-broadcast-variables.patch",
    "python3.12-no-distutils.patch",
    "tf2.21-gpu-stream-handle.patch",
    "release-build-only-linked-gloo.patch",
    "kill-stopped-rank-shell.patch",
)


@pytest.mark.parametrize(
    ("tensorflow", "python", "device", "expected"),
    [
        ("2.18.1", "3.11", "cpu", [BROADCAST, LEAN, KILL]),
        ("2.18.1", "3.12", "gpu", [BROADCAST, DISTUTILS, LEAN, KILL]),
        ("2.19.0", "3.11", "cpu", [XLA, BROADCAST, LEAN, KILL]),
        ("2.21.0", "3.13", "cpu", [XLA, BROADCAST, DISTUTILS, LEAN, KILL]),
        ("2.21.0", "3.13", "gpu", [XLA, BROADCAST, DISTUTILS, STREAM, LEAN, KILL]),
        ("2.20.0", "3.12", "gpu", [XLA, BROADCAST, DISTUTILS, LEAN, KILL]),
        ("2.22.0rc1", "3.12", "cpu", [XLA, BROADCAST, DISTUTILS, LEAN, KILL]),
    ],
)
def test_each_build_gets_the_patches_its_versions_and_device_need(
    tensorflow, python, device, expected
):
    facts = {"tensorflow": tensorflow, "python": python, "device": device}
    assert build.select_patches(SERIES, facts) == expected


def test_conditions_combine_and_bad_ones_are_named():
    facts = {"tensorflow": "2.20.0", "python": "3.12", "device": "gpu"}
    assert build.holds("tensorflow>=2.19,tensorflow<2.21,device==gpu", facts)
    assert not build.holds("tensorflow>=2.19,python<3.12", facts)
    assert not build.holds("device==cpu", facts)
    with pytest.raises(build.BuildError, match="'cuda'"):
        build.holds("cuda>=12", facts)
    with pytest.raises(build.BuildError, match="'tensorflow~=2.20'"):
        build.holds("tensorflow~=2.20", facts)


def test_every_patch_is_in_the_series_and_says_what_and_why():
    listed = build.select_patches(SERIES, {"tensorflow": "99", "python": "99", "device": "gpu"})
    on_disk = sorted(p.name for p in PATCHES.glob("*.patch"))
    assert sorted(listed) == on_disk
    for name in on_disk:
        header = (PATCHES / name).read_text().split("\n--- a/", 1)[0]
        assert "Upstream" in header and len(header.splitlines()) >= 5, name


def test_a_changed_patch_is_a_new_cached_wheel(tmp_path, monkeypatch):
    before = build.patch_set_id([BROADCAST])
    copy = tmp_path / "horovod"
    copy.mkdir()
    (copy / BROADCAST).write_text((PATCHES / BROADCAST).read_text() + "\n")
    monkeypatch.setattr(build, "PATCHES", copy)
    assert build.patch_set_id([BROADCAST]) != before


def test_the_installed_horovod_was_built_here_with_the_patches_this_environment_needs():
    record = json.loads((horovod_wheel().parent / "build.json").read_text())
    facts = {"tensorflow": tensorflow_version(), "python": PYTHON, "device": record["device"]}
    assert record["tensorflow"] == tensorflow_version() and record["python"] == PYTHON
    assert record["patches"] == build.select_patches(SERIES, facts)


@pytest.mark.slow
def test_a_users_horovod_script_broadcasts_keras3_variables_on_two_ranks():
    result = run_on_two_ranks(RANK_SCRIPTS / "patched_horovod.py")
    assert_succeeded(result)
    lines = result.stdout.splitlines()
    ranks = [json.loads(line.split("RESULT ", 1)[1]) for line in lines if "RESULT {" in line]
    assert sorted(r["rank"] for r in ranks) == [0, 1], result.stdout[-3000:]
    for rank in ranks:
        assert rank["keras"].startswith("3.") and rank["tensorflow"] == tensorflow_version()
        assert rank["spread_before"] > 1e-3 and rank["spread_after"] == 0.0, rank


@pytest.mark.slow
def test_a_failed_build_is_one_line_naming_the_versions_and_the_log(tmp_path, capsys):
    """A real ``pip wheel`` of a source that fails to build, as a compiler error would."""
    source = tmp_path / "src" / f"horovod-{build.HOROVOD_VERSION}"
    source.mkdir(parents=True)
    (source / "setup.py").write_text("raise SystemExit('error: xla_mpi_ops.cc: no such header')\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    with tarfile.open(cache / f"horovod-{build.HOROVOD_VERSION}.tar.gz", "w:gz") as archive:
        archive.add(source, arcname=source.name)
    sdist_sha = hashlib.sha256((cache / f"horovod-{build.HOROVOD_VERSION}.tar.gz").read_bytes())
    series = tmp_path / "patches"
    series.mkdir()
    (series / "series").write_text("")  # no patches for this source
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(build, "SDIST_SHA256", sdist_sha.hexdigest())
        patch.setattr(build, "PATCHES", series)
        assert build.main(["--device", "cpu", "--cache", str(cache)]) == 1
    (line,) = capsys.readouterr().err.strip().splitlines()[-1:]
    log = next((cache / "wheels").glob("*/build.log"))
    assert line.startswith(f"Horovod 0.28.1 for TensorFlow {tensorflow_version()} (cpu, Python ")
    assert f"the build failed (full log: {log})" in line
    assert "no such header" in log.read_text()
