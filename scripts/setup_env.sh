#!/usr/bin/env bash
# Create (or repair) the tntrun virtual environment. Idempotent: every step
# checks what is already there and skips work that is done.
#
#   scripts/setup_env.sh [VENV_DIR]              CPU stack (default)
#   TNTRUN_DEVICE=gpu scripts/setup_env.sh       CUDA TensorFlow + Horovod with NCCL
#   PYTHON=python3.12 scripts/setup_env.sh       that interpreter (else the newest of 3.13-3.11)
#   TNTRUN_TF_VERSION=2.18.1 scripts/setup_env.sh  another supported TensorFlow (2.18 to 2.21)
#
# Horovod 0.28.1 is built from its sdist against the installed TensorFlow, with the patches
# of scripts/horovod/ that this TensorFlow and Python need (scripts/build_horovod.py), and the
# wheel is cached under ~/.cache/tntrun/wheels/, so a second environment installs in seconds.
set -euo pipefail

VENV=${1:-.venv}
DEVICE=${TNTRUN_DEVICE:-cpu}
TF_VERSION=${TNTRUN_TF_VERSION:-2.21.0}
TF_MINOR=${TF_VERSION%.*}
HOROVOD_VERSION=0.28.1
SUPPORTED_PYTHONS=(3.13 3.12 3.11)  # newest first: TensorFlow 2.21 has wheels for each
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/tntrun"

# Each step says when it started (seconds since the set-up began): where a slow set-up goes.
step() { printf '\n==> [%ds] %s\n' "$SECONDS" "$*"; }
die() { printf '\nsetup failed: %s\n' "$*" >&2; exit 1; }

case "$DEVICE" in
  cpu) TF_REQ="tensorflow-cpu==$TF_VERSION" ;;
  gpu) TF_REQ="tensorflow[and-cuda]==$TF_VERSION" ;;
  *) die "TNTRUN_DEVICE must be cpu or gpu, not '$DEVICE'" ;;
esac
case "$TF_VERSION" in
  2.18.*) SUPPORTED_PYTHONS=(3.12 3.11) ;;  # TensorFlow 2.18 has no wheels for Python 3.13
  2.19.*|2.20.*|2.21.*) ;;
  *) die "TNTRUN_TF_VERSION=$TF_VERSION: tntrun supports TensorFlow 2.18 to 2.21" ;;
esac

# The interpreter: the one named, else the newest supported one that runs (a pyenv shim
# for a version that is not active fails to run, so its installed versions are tried too).
supported() {
  "$1" -c 'import sys; sys.exit(f"{sys.version_info[0]}.{sys.version_info[1]}" not in sys.argv[1:])' \
    "${SUPPORTED_PYTHONS[@]}" 2>/dev/null
}
find_python() {
  local minor candidate
  for minor in "${SUPPORTED_PYTHONS[@]}"; do
    for candidate in "python$minor" "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$minor".*/bin/"python$minor"; do
      if command -v "$candidate" >/dev/null && supported "$candidate"; then
        command -v "$candidate"; return 0
      fi
    done
  done
  return 1
}
minor_of() { "$1" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null; }
if [ -x "$VENV/bin/python" ]; then
  if [ -n "${PYTHON:-}" ] && [ "$(minor_of "$PYTHON")" != "$(minor_of "$VENV/bin/python")" ]; then
    die "PYTHON=$PYTHON, but $VENV has Python $(minor_of "$VENV/bin/python"): remove $VENV to change it"
  fi
  PYTHON="$VENV/bin/python"
elif [ -n "${PYTHON:-}" ]; then
  command -v "$PYTHON" >/dev/null || die "PYTHON=$PYTHON not found"
else
  PYTHON=$(find_python) || die "no Python ${SUPPORTED_PYTHONS[*]} found: install one, or set PYTHON=/path/to/python3.1x"
fi
supported "$PYTHON" || die "$PYTHON is $("$PYTHON" --version 2>&1): TensorFlow $TF_VERSION with tntrun supports Python ${SUPPORTED_PYTHONS[*]} (set PYTHON=, or remove $VENV)"

# Real components the tests start, from Debian: chromium (the MLflow UI browser test;
# Playwright cannot download browsers here), openssh-server (sshd in network-namespace
# hosts for the multi-host tests), slurm-wlm + munge (a real Slurm cluster), postgresql (a
# team's tracking server: PostgreSQL under `mlflow server`), openmpi-bin + libopenmpi-dev and
# mpich (launcher=mpirun under each MPI; Debian installs them side by side, `mpirun` is
# whichever its alternatives choose, the tests pick each by name). One apt-get update, one
# install, started here in the background: apt downloads and unpacks while pip installs and
# Horovod compiles (nothing in the Python environment needs these packages), and the set-up
# waits for it before its checks. As root a failed install fails the set-up (the tests would
# fail naming the component anyway); without root the tests that need them are skipped, with
# the reasons listed at the end of the test run.
missing=()
command -v chromium >/dev/null || missing+=(chromium)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v slurmctld >/dev/null || missing+=(slurm-wlm)
command -v munged >/dev/null || [ -x /usr/sbin/munged ] || missing+=(munge)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || missing+=(postgresql)
command -v mpirun.openmpi >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
command -v mpirun.mpich >/dev/null || missing+=(mpich)
apt_pid=
horovod_pid=
compile_pid=
APT_LOG="$VENV/apt-install.log"
HOROVOD_OUT="$VENV/horovod-build.out"
# A set-up that stops early still lets apt finish (no half-configured dpkg for the next one)
# and stops a Horovod build it started (its own process group: pip, cmake and the compilers).
on_exit() {
  [ -z "$horovod_pid" ] || kill -- -"$horovod_pid" 2>/dev/null || true
  [ -z "$compile_pid" ] || kill "$compile_pid" 2>/dev/null || true
  [ -z "$apt_pid" ] || wait "$apt_pid" 2>/dev/null || true
}
trap on_exit EXIT
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    step "installing ${missing[*]} (Debian, in the background) for the browser, multi-host, Slurm, MPI and team-server tests"
    mkdir -p "$VENV"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"; } \
      < /dev/null > "$APT_LOG" 2>&1 &
    apt_pid=$!
  else
    echo "note: ${missing[*]} missing and not root: the tests needing them will be skipped (sudo apt-get install ${missing[*]})"
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  step "creating $VENV with $("$PYTHON" --version)"
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip setuptools wheel
fi
PY="$VENV/bin/python"
# --no-compile: compileall compiles on every core in the background (after TensorFlow, and once
# pip is done), where pip compiles one file at a time.
INSTALL=("$PY" -m pip --quiet install --no-compile)

installed_tf=$("$PY" - <<'PY' 2>/dev/null || true
import importlib.metadata as m
for name in ("tensorflow-cpu", "tensorflow"):
    try:
        print(m.version(name)); break
    except m.PackageNotFoundError:
        pass
PY
)
if [ "$installed_tf" != "$TF_VERSION" ]; then
  step "installing TensorFlow $TF_VERSION ($DEVICE) and tf-keras"
  "${INSTALL[@]}" "$TF_REQ" || die "could not install $TF_REQ"
  # tntrun trains Keras 3; the legacy tf-keras is for development only: the hand-written
  # tf_keras baseline of bench/ and the tests that refuse a tf_keras model. It requires
  # `tensorflow`: beside tensorflow-cpu pip would install the same files a second time.
  "${INSTALL[@]}" --no-deps "tf-keras~=$TF_MINOR.0" || die "could not install tf-keras"
fi

# What is installed so far (TensorFlow and its dependencies, two thirds of the environment's
# Python files) compiles in the background from now on, while pip installs the rest beside
# it; what pip adds compiles once it is done (below).
PURELIB=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
"$PY" -m compileall -q -j0 "$PURELIB" < /dev/null > /dev/null 2>&1 &
compile_pid=$!

# Horovod needs only TensorFlow (its headers, library and flags) to build: its 3-minute
# compile runs in the background while pip installs the rest, which only adds packages
# (none that TensorFlow brought is changed). Built with the patches this TensorFlow and
# Python need, or taken from the cache; the last line of its output is the wheel.
step "building Horovod $HOROVOD_VERSION for TensorFlow $TF_VERSION in the background (or taking it from $CACHE/wheels)"
setsid -w "$PY" "$ROOT/scripts/build_horovod.py" --device "$DEVICE" --cache "$CACHE" \
  < /dev/null > "$HOROVOD_OUT" 2>&1 &
horovod_pid=$!

# Without the cpu/gpu extra: TensorFlow is in (above).
step "installing tntrun (editable) with its driver and dev dependencies"
"${INSTALL[@]}" -e "$ROOT[dev,sweepers,postgres]" || die "pip install -e .[dev,sweepers,postgres] failed"
# Horovod's runtime dependencies (it is installed with --no-deps below), and TensorBoard for
# train.tensorboard (what the cpu/gpu extras add; TensorFlow 2.20+ no longer requires it).
"${INSTALL[@]}" cloudpickle psutil pyyaml packaging cffi "tensorboard~=$TF_MINOR.0" \
  || die "could not install Horovod's dependencies and TensorBoard"

# Test-only: KerasHub, the Keras 3 library tests/zoo/test_keras_hub.py builds a user's model from.
# Not a pyproject extra, because it needs --no-deps: keras-hub requires tensorflow-text>=2.20.1,
# which requires the `tensorflow` distribution and would install it a second time beside
# tensorflow-cpu (or replace TensorFlow $TF_VERSION with another). keras_hub imports tensorflow_text
# only if it is there (for text models' tokenizers), so it is left out; keras-hub's other
# requirements are installed as usual, with $TF_REQ named so that pip keeps it and what it
# pins. `pip check` then reports only tensorflow-text missing for keras-hub.
KERAS_HUB_VERSION=0.32.0
installed_hub=$("$PY" -c 'import importlib.metadata as m; print(m.version("keras-hub"))' 2>/dev/null || true)
if [ "$installed_hub" != "$KERAS_HUB_VERSION" ]; then
  step "installing KerasHub $KERAS_HUB_VERSION for the tests (pip will say tensorflow-text is missing: left out on purpose, see setup_env.sh)"
  "${INSTALL[@]}" --no-deps "keras-hub==$KERAS_HUB_VERSION" || die "could not install keras-hub"
  "${INSTALL[@]}" "$TF_REQ" "keras>=3.15" absl-py numpy packaging regex rich sentencepiece \
      tokenizers "kagglehub!=1.0.1" "kagglesdk==0.1.28" || die "could not install keras-hub's dependencies"
  env -u TF_USE_LEGACY_KERAS KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=3 \
      "$PY" -c "import keras_hub" || die "keras_hub does not import"
fi

horovod_ok() {
  "$PY" - "$TF_VERSION" <<'PY'
import json, pathlib, sys
try:
    import horovod
except ImportError:
    sys.exit(1)
meta = json.loads((pathlib.Path(horovod.__file__).parent / "metadata.json").read_text())
built = meta.get("tensorflow")
if built != sys.argv[1]:
    print(f"horovod was built for TensorFlow {built!r}, runtime needs {sys.argv[1]}")
    sys.exit(1)
import horovod.tensorflow  # noqa: F401  (fails if the TF extension was not built)
PY
}

# pip is done: what it added compiles in the background (on every core, where the Horovod
# build leaves them idle: its configure and link steps use one), after the first pass.
wait "$compile_pid" || true
"$PY" -m compileall -q -j0 "$PURELIB" < /dev/null > /dev/null 2>&1 &
compile_pid=$!

# The wheel built above (or taken from the cache), installed when the environment does not
# hold that very wheel yet.
step "waiting for the Horovod build (started after TensorFlow)"
build_status=0
wait "$horovod_pid" || build_status=$?
horovod_pid=
sed '$d' "$HOROVOD_OUT"  # what it said, the wheel's path apart
if [ "$build_status" != 0 ]; then
  tail -n1 "$HOROVOD_OUT" >&2
  die "no Horovod $HOROVOD_VERSION for TensorFlow $TF_VERSION (the reason is above)"
fi
wheel=$(tail -n1 "$HOROVOD_OUT")
wheel_record="$VENV/.horovod-wheel"
if [ "$(cat "$wheel_record" 2>/dev/null)" != "$wheel" ] || ! horovod_ok >/dev/null 2>&1; then
  step "installing $(basename "$(dirname "$wheel")")/$(basename "$wheel")"
  "${INSTALL[@]}" --force-reinstall --no-deps "$wheel" || die "could not install $wheel"
  why=$(horovod_ok 2>&1) || die "Horovod is unusable: ${why:-horovod.tensorflow does not import} (remove $(dirname "$wheel") and rerun)"
  echo "$wheel" > "$wheel_record"
fi

if [ -n "$apt_pid" ]; then
  step "waiting for the Debian packages (apt-get, started at the beginning)"
  apt_ok=0
  wait "$apt_pid" || apt_ok=$?
  apt_pid=
  if [ "$apt_ok" != 0 ]; then
    tail -n 20 "$APT_LOG" >&2
    die "could not install ${missing[*]} with apt-get (full log: $APT_LOG)"
  fi
fi

step "compiling the environment's and the checkout's Python files (every core)"
# The checkout's too: its packages are installed editable, so no compileall above reaches
# them, and where PYTHONDONTWRITEBYTECODE is set (as in some CI and agent shells) every
# driver, launcher and rank would compile each tntrun module it imports again (about 1
# CPU-s a launch). Editing a file makes only its own .pyc stale.
"$PY" -m compileall -q -j0 "$PURELIB/horovod" "$ROOT/tntrun" "$ROOT/models" "$ROOT/datasets" \
  "$ROOT/tests" > /dev/null || true
wait "$compile_pid" || true  # a file that does not compile (a py2 test fixture) is not fatal
compile_pid=

stamp="$VENV/.tntrun-verified"
if [ ! -f "$stamp" ] || [ "$stamp" -ot "$0" ]; then
  step "verifying a real 2-rank Gloo allreduce (horovodrun as tntrun starts it)"
  out=$(cd "$ROOT" && PATH="$VENV/bin:$PATH" TF_CPP_MIN_LOG_LEVEL=3 timeout 180 \
        "$PY" -m tntrun.launch.horovodrun_command -np 2 -H localhost:2 --gloo \
        "$PY" -m tntrun.engine.selfcheck 2>&1) \
    || { printf '%s\n' "$out" | tail -n 30 >&2; die "the 2-rank Horovod self-check failed"; }
  printf '%s\n' "$out" | grep -o 'selfcheck ok.*' | sort -u
  step "caching what Horovod was built with, for run records"
  "$PY" -c "from tntrun.tracking.provenance import horovod_build; print(horovod_build())"
  touch "$stamp"
fi
step "environment ready: $VENV ($DEVICE, TensorFlow $TF_VERSION, Horovod $HOROVOD_VERSION)"
