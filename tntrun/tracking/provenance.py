"""Where a run came from: code version, library versions, Horovod build (no TensorFlow import)."""

from __future__ import annotations

import getpass
import hashlib
import importlib.util
import json
import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tntrun.contract.checkpoints import file_digest
from tntrun.contract.user_cache import cache_dir


def git_tags(directory: Path) -> dict[str, str]:
    """Commit and dirty flag of the git checkout holding ``directory`` (none outside git)."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(directory), *args],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
        root = git("rev-parse", "--show-toplevel")
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"mlflow.source.git.commit": commit, "git.dirty": str(dirty).lower(), "git.repo": root}


def source_tags(argv: Sequence[str] | None = None) -> dict[str, str]:
    """MLflow's source tags: the script (its base name is the UI's Source column), who ran it.

    ``command`` keeps the whole command line (``tntrun model=cnn ...``).
    """
    argv = list(sys.argv if argv is None else argv)
    script = argv[0] if argv and argv[0] not in ("", "-c", "-") else "<console>"
    try:
        user = getpass.getuser()
    except Exception:  # no login name (a container without a passwd entry)
        user = "unknown"
    tags = {"mlflow.source.name": script, "mlflow.source.type": "LOCAL", "mlflow.user": user}
    if argv:
        tags["command"] = shlex.join([Path(script).name, *argv[1:]])[:5000]
    return tags


def build_key(package: Path) -> str:
    """The identity of the Horovod build installed at ``package``: its ``metadata.json`` and
    compiled libraries, by content, so that every environment the same wheel is installed in
    (a clean clone's, a wheel test's fresh one) finds the summary one of them cached."""
    files = sorted([package / "metadata.json", *package.rglob("*.so")])
    identity = "".join(
        f"{path.relative_to(package)} {file_digest(path)}\n" for path in files if path.is_file()
    )
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def horovod_build() -> dict[str, str]:
    """What Horovod was built with (``horovodrun --check-build``'s checked lines, cached per
    Horovod build: :func:`build_key`) and the TensorFlow it was built for.

    The lines come from :mod:`tntrun.engine.build_probe` in a child process (the driver
    imports no TensorFlow): check-build itself imports the frameworks once per question, 23
    CPU-s. ``metadata.json``'s TensorFlow version is recorded beside them.
    """
    spec = importlib.util.find_spec("horovod")
    if spec is None or spec.origin is None:
        return {}
    metadata = Path(spec.origin).parent / "metadata.json"
    built_for = (
        json.loads(metadata.read_text()).get("tensorflow", "?") if metadata.exists() else "?"
    )
    cached = cache_dir() / f"horovod-build-{build_key(metadata.parent)}.txt"
    if cached.exists():
        summary = cached.read_text()
    else:
        try:
            out = subprocess.run(
                [sys.executable, "-m", "tntrun.engine.build_probe"],
                capture_output=True,
                text=True,
                timeout=120,
                env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
            )
        except (OSError, subprocess.SubprocessError) as err:  # a busy machine: ask next time
            summary = f"unavailable: {err}"
        else:
            summary = out.stdout.strip() if out.returncode == 0 else ""
            if summary:
                cached.parent.mkdir(parents=True, exist_ok=True)
                cached.write_text(summary)
            else:
                summary = f"unavailable: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
    return {"horovod.check_build": summary, "horovod.built_for_tensorflow": built_for}
