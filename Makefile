# tntrun's two entry points on a fresh machine:
#   make run    create .venv if needed, run the default experiment (ARGS="..." adds overrides)
#   make test   create .venv if needed, run the whole test suite (as root, a missing real
#               component such as Slurm or Chromium fails its tests instead of skipping them)
#   make check  the fast tests only, the inner loop: -m "not slow", all in-process (a test
#               that starts a process must be marked slow; tests/conftest.py fails it if not)
#   make test-scale  16 and 32 netns hosts x 1 rank (tests/cluster/test_many_hosts.py): the
#               default run, a killed rank, an elastic run; not in `make test` (9 min for
#               the 32-host default run alone on 2 cores), alone (fixed host names), as root.
#   make compat-tf2.18  TensorFlow 2.18.1 still works: its own environment (.venv-tf2.18,
#               Horovod built for it), the fast tests and the default end-to-end run. Not in
#               CI: a second TensorFlow and Horovod build doubles the set-up.
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tntrun-ready
ARGS ?=

.PHONY: setup run test test-scale check lint ui clean compat-tf2.18
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup_env.sh scripts/build_horovod.py $(wildcard scripts/horovod/*)
	bash scripts/setup_env.sh $(VENV)
	touch $@

run: setup
	$(BIN)/tntrun $(ARGS)

# Root can install every component (set-up does), so under root nothing may be skipped.
REQUIRE_COMPONENTS := $(shell [ "$$(id -u)" = 0 ] && echo 1)

# One pytest worker per core and one more: a run's ranks leave the cores idle while they
# start, wait out a timeout or sync, and the other workers' tests use them (with one per
# core the CPUs stood idle a quarter of the time). tests/conftest.py keeps a module on one.
WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))
test: setup
	TNTRUN_REQUIRE_COMPONENTS=$(REQUIRE_COMPONENTS) $(BIN)/python -m pytest -n $(WORKERS) --dist loadscope $(ARGS)

test-scale: setup
	TNTRUN_SCALE_TESTS=1 TNTRUN_REQUIRE_COMPONENTS=$(REQUIRE_COMPONENTS) $(BIN)/python -m pytest -m scale -s $(ARGS)

check: setup
	$(BIN)/python -m pytest -m "not slow" -q $(ARGS)

COMPAT_VENV := .venv-tf2.18
compat-tf2.18:
	TNTRUN_TF_VERSION=2.18.1 bash scripts/setup_env.sh $(COMPAT_VENV)
	$(COMPAT_VENV)/bin/python -m pytest -m "not slow" -q $(ARGS)
	$(COMPAT_VENV)/bin/python -m pytest -q tests/system/test_end_to_end.py $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

ui: setup
	$(BIN)/tntrun ui

clean:
	rm -rf $(VENV) $(COMPAT_VENV) build dist *.egg-info
