# tntrun's two entry points on a fresh machine:
#   make run    create .venv if needed, run the default experiment (ARGS="..." adds overrides)
#   make test   create .venv if needed, run the whole test suite
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.tntrun-ready
ARGS ?=

.PHONY: setup run test lint ui clean
setup: $(STAMP)

$(STAMP): pyproject.toml scripts/setup_env.sh
	bash scripts/setup_env.sh $(VENV)
	touch $@

run: setup
	$(BIN)/tntrun $(ARGS)

test: setup
	$(BIN)/python -m pytest $(ARGS)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

ui: setup
	$(BIN)/tntrun ui

clean:
	rm -rf $(VENV) build dist *.egg-info
