# Two commands a user needs: `make demo` (the main job) and `make test`; `make docs` builds the manual.
# Both create/reuse .venv, install torch first (CPU build by default; override with
# TORCH_SPEC="torch" or any pip requirement), then this project with its extras.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
EXTRAS ?= dev,bench
PY := $(VENV)/bin/python
comma := ,
STAMP := $(VENV)/.installed-$(subst $(comma),-,$(EXTRAS))

.PHONY: venv demo test test-slow test-all docs bench lint clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

# The distribution was named chunkstore until 0.2 (a PyPI name another project holds); a venv made
# then still has it beside chunkstore-rl, both claiming the same packages: it goes first.
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip uninstall -q -y chunkstore 2>/dev/null || true
	$(PY) -m pip install -q -e ".[$(EXTRAS)]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest -q

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow"

# the manual, strictly: a broken link or anchor, a missing reference or a failing mkdocstrings
# lookup fails; the benchmark pages must match results/ (python tools/bench_pages.py rewrites them)
docs: $(STAMP)
	$(PY) tools/bench_pages.py --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict

bench: $(STAMP)
	$(PY) tools/bench_sampling.py --out results/bench_sampling.json
	$(PY) tools/bench_codecs.py --out results/bench_codecs.json
	$(PY) tools/bench_buffers.py --out results/bench_buffers.json
	$(PY) tools/bench_persistence.py --out results/bench_persistence.json
	$(PY) tools/bench_distributed.py --out results/bench_distributed.json
	$(PY) tools/bench_prioritized.py --out results/bench_prioritized.json
	$(PY) tools/bench_pages.py

lint: $(STAMP)
	$(VENV)/bin/ruff check chunkstore sb3_integration tools tests examples
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build site *.egg-info .pytest_cache .hypothesis
