"""Build Horovod 0.28.1 against the TensorFlow installed beside this interpreter, patched.

Run with the environment's own Python (scripts/setup_env.sh does):

    python scripts/build_horovod.py --device cpu|gpu --cache ~/.cache/tntrun

Horovod has had no release since 0.28.1 (June 2023) and its sdist no longer builds against
today's TensorFlow, so tntrun carries the few patches it needs (scripts/horovod/*.patch, each
saying what it changes and why) and applies those whose condition in scripts/horovod/series
holds for this environment. The wheel is cached per Python, TensorFlow version, device and
patch set, so a second environment installs it in seconds. The last line printed is the
wheel's path; a ``build.json`` beside it records what was applied.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from pathlib import Path

HOROVOD_VERSION = "0.28.1"
# The sha256 of horovod-0.28.1.tar.gz as PyPI serves it: the patches are written against it.
SDIST_SHA256 = "92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0"
PATCHES = Path(__file__).resolve().parent / "horovod"
# Horovod's build switches: TensorFlow only, Gloo for CPU tensors (else a Gloo-only build
# defaults CPU operations to MPI outside horovodrun), CMake 4 accepts its old CMakeLists.
BUILD_ENV = {
    "HOROVOD_WITH_TENSORFLOW": "1",
    "HOROVOD_WITH_GLOO": "1",
    "HOROVOD_WITHOUT_MPI": "1",
    "HOROVOD_WITHOUT_PYTORCH": "1",
    "HOROVOD_WITHOUT_MXNET": "1",
    "HOROVOD_CPU_OPERATIONS": "GLOO",
    "CMAKE_POLICY_VERSION_MINIMUM": "3.5",
}
DEVICE_ENV = {"cpu": {}, "gpu": {"HOROVOD_GPU_OPERATIONS": "NCCL", "HOROVOD_NCCL_LINK": "SHARED"}}
# Where mpi_lib*.so (site-packages/horovod/tensorflow/) finds the libnccl.so.2 of the pip
# package nvidia-nccl-cu12 (site-packages/nvidia/nccl/lib) at load time: TensorFlow does not
# load NCCL before Horovod's library, which needs it.
NCCL_RUNPATH = "-Wl,-rpath,$ORIGIN/../../nvidia/nccl/lib"


class BuildError(RuntimeError):
    """A build that cannot go on: the message is the one line the set-up prints."""


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.21.0"`` -> ``(2, 21, 0)``; a suffix such as ``rc1`` or ``.post1`` is ignored."""
    parts = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def holds(condition: str, facts: dict[str, str]) -> bool:
    """Whether a series condition (``always``, ``tensorflow>=2.19``, ``python<3.12``,
    ``device==gpu``) holds for ``facts`` (name -> version or value). Several conditions,
    comma-separated, must all hold."""
    if condition == "always":
        return True
    return all(clause_holds(clause.strip(), facts) for clause in condition.split(","))


def clause_holds(clause: str, facts: dict[str, str]) -> bool:
    for operator in ("==", ">=", "<"):
        name, found, bound = clause.partition(operator)
        if found:
            break
    else:
        raise BuildError(f"series: condition {clause!r} is not name>=version, <version or ==value")
    if name not in facts:
        raise BuildError(f"series: {name!r} is not one of {sorted(facts)}")
    if operator == "==":
        return facts[name] == bound
    below = version_tuple(facts[name]) < version_tuple(bound)
    return below == (operator == "<")


def select_patches(series: str, facts: dict[str, str]) -> list[str]:
    """The patch files of ``series`` whose condition holds for ``facts``, in order."""
    chosen = []
    for line in series.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, condition = line.partition(" ")
        if holds(condition.strip() or "always", facts):
            chosen.append(name)
    return chosen


def installed_tensorflow() -> str:
    """The version of the TensorFlow distribution installed beside this interpreter."""
    for name in ("tensorflow-cpu", "tensorflow"):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    raise BuildError("no TensorFlow installed in this environment: install it before Horovod")


def patch_set_id(patches: list[str]) -> str:
    """A short digest of the chosen patches' contents: a changed patch is a new cached wheel."""
    digest = hashlib.sha256()
    for name in patches:
        digest.update(name.encode() + b"\0" + (PATCHES / name).read_bytes())
    return digest.hexdigest()[:8]


def fetch_sdist(cache: Path) -> Path:
    """Horovod's sdist, downloaded once into ``cache`` and checked against its sha256."""
    sdist = cache / f"horovod-{HOROVOD_VERSION}.tar.gz"
    if not sdist.exists():
        with tempfile.TemporaryDirectory() as scratch:
            pip = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps"]
            pip += ["--no-binary", ":all:", "-d", scratch, f"horovod=={HOROVOD_VERSION}"]
            if subprocess.run(pip).returncode != 0:
                raise BuildError(f"could not download horovod=={HOROVOD_VERSION}'s sdist")
            cache.mkdir(parents=True, exist_ok=True)
            shutil.move(Path(scratch) / sdist.name, sdist)
    found = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if found != SDIST_SHA256:
        sdist.unlink()
        raise BuildError(f"{sdist.name} has sha256 {found}, not {SDIST_SHA256}: removed, rerun")
    return sdist


def patched_source(sdist: Path, patches: list[str], into: Path) -> Path:
    """The sdist unpacked into ``into`` with ``patches`` applied, in order."""
    with tarfile.open(sdist) as archive:
        archive.extractall(into, filter="data")
    source = into / f"horovod-{HOROVOD_VERSION}"
    for name in patches:
        applied = subprocess.run(
            ["patch", "-p1", "--forward", "--batch", "-i", str(PATCHES / name)],
            cwd=source,
            capture_output=True,
            text=True,
        )
        if applied.returncode != 0:
            raise BuildError(f"patch {name} does not apply: {applied.stdout.strip()}")
    return source


def cuda_home() -> str:
    """The CUDA toolkit Horovod compiles its kernels with: HOROVOD_CUDA_HOME, else
    /usr/local/cuda. CMake's FindCUDAToolkit needs its bin/nvcc beside include/ and lib64/ (a
    wrapper such as /usr/local/bin/nvcc is not enough). PyPI has no CUDA 12 nvcc
    (nvidia-cuda-nvcc-cu12 ships ptxas only), so this is the system's toolkit; the CUDA
    runtime calls bind to TensorFlow's libcudart at run time."""
    home = os.environ.get("HOROVOD_CUDA_HOME", "/usr/local/cuda")
    if not (Path(home) / "bin" / "nvcc").exists():
        raise BuildError(f"no {home}/bin/nvcc: set HOROVOD_CUDA_HOME to a CUDA toolkit")
    return home


def nccl_env(scratch: Path) -> dict[str, str]:
    """The switches that point Horovod's CMake at the NCCL TensorFlow's GPU wheel brings.
    The pip package ships only ``libnccl.so.2`` and Horovod's FindNCCL looks for
    ``libnccl.so``: a symlink in ``scratch`` stands in for it during the build."""
    nccl = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "nccl"
    library = nccl / "lib" / "libnccl.so.2"
    if not (nccl / "include" / "nccl.h").exists() or not library.exists():
        raise BuildError(f"no NCCL in {nccl}: install tensorflow[and-cuda] (nvidia-nccl-cu12)")
    folder = scratch / "nccl-lib"
    folder.mkdir()
    (folder / "libnccl.so").symlink_to(library)
    return {
        "HOROVOD_CUDA_HOME": cuda_home(),
        "HOROVOD_NCCL_INCLUDE": str(nccl / "include"),
        "HOROVOD_NCCL_LIB": str(folder),
        "LDFLAGS": " ".join(filter(None, [os.environ.get("LDFLAGS", ""), NCCL_RUNPATH])),
    }


def build_wheel(source: Path, device: str, out: Path, log: Path) -> Path:
    """``pip wheel`` of the patched source against this environment's TensorFlow."""
    env = {**os.environ, **BUILD_ENV, **DEVICE_ENV[device]}
    if device == "gpu":
        env.update(nccl_env(source.parent))
    pip = [sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-v"]
    with log.open("w") as sink:
        command = [*pip, "-w", str(out), str(source)]
        built = subprocess.run(command, env=env, stdout=sink, stderr=subprocess.STDOUT)
    wheels = sorted(out.glob(f"horovod-{HOROVOD_VERSION}-*.whl"))
    if built.returncode != 0 or not wheels:
        tail = log.read_text(errors="replace").splitlines()[-40:]
        print("\n".join(tail), file=sys.stderr)
        raise BuildError("the build failed")
    return wheels[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", choices=sorted(DEVICE_ENV), default="cpu")
    parser.add_argument("--cache", type=Path, required=True, help="tntrun's cache folder")
    args = parser.parse_args(argv)
    python = ".".join(map(str, sys.version_info[:2]))
    tensorflow = "unknown"
    try:
        tensorflow = installed_tensorflow()
        facts = {"tensorflow": tensorflow, "python": python, "device": args.device}
        patches = select_patches((PATCHES / "series").read_text(), facts)
        key = f"py{python.replace('.', '')}-tf{tensorflow}-{args.device}-p{patch_set_id(patches)}"
        out = args.cache / "wheels" / key
        wheels = sorted(out.glob(f"horovod-{HOROVOD_VERSION}-*.whl"))
        if not wheels:
            wheels = [build(args.cache, out, patches, args.device, tensorflow, python)]
        print(wheels[-1])
        return 0
    except BuildError as error:
        print(
            f"Horovod {HOROVOD_VERSION} for TensorFlow {tensorflow} ({args.device}, Python "
            f"{python}): {error}",
            file=sys.stderr,
        )
        return 1


def build(cache: Path, out: Path, patches: list[str], device: str, tf: str, py: str) -> Path:
    """Fetch, patch and build into ``out``, recording what was applied in ``build.json``."""
    print(
        f"building Horovod {HOROVOD_VERSION} against TensorFlow {tf} ({device}, Python {py}), "
        f"patches: {', '.join(patches) or 'none'} (a few minutes; cached afterwards)",
        file=sys.stderr,
    )
    for tool in ("cmake", "g++", "patch"):
        if shutil.which(tool) is None:
            raise BuildError(f"{tool} is needed to build Horovod (apt-get install {tool})")
    sdist = fetch_sdist(cache)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "build.log"
    with tempfile.TemporaryDirectory() as scratch:
        try:
            wheel = build_wheel(patched_source(sdist, patches, Path(scratch)), device, out, log)
        except BuildError as error:
            raise BuildError(f"{error} (full log: {log})") from None
    record = {"horovod": HOROVOD_VERSION, "tensorflow": tf, "python": py, "device": device}
    record["patches"] = patches
    (out / "build.json").write_text(json.dumps(record, indent=1) + "\n")
    return wheel


if __name__ == "__main__":
    sys.exit(main())
