# embedscope: `make demo` and `make test` work on a fresh machine (they set up .venv first).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEMO := demo-output
export MPLBACKEND := Agg
export PYTHONHASHSEED := 0

.PHONY: setup demo test test-slow test-all lint bench notebooks clean

setup: $(STAMP)

# Re-installs only when pyproject.toml or the C extension's source changed (or the venv is missing); the
# install compiles the extension (embedscope/metrics/search/_fused.c) where a C compiler is
$(STAMP): pyproject.toml embedscope/metrics/search/_fused.c
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	$(PY) -m pip install -q -e ".[test]"
	@touch $(STAMP)

# whole files to each worker, in tests/conftest.py's order (longest first), not xdist's (most tests first)
test: $(STAMP)
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder tests

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow tests

test-all: $(STAMP)
	$(PY) -m pytest -q -m "slow or not slow" -n 2 --dist loadfile --no-loadscope-reorder tests

lint: $(STAMP)
	$(VENV)/bin/ruff check embedscope tests benchmarks scripts

bench: $(STAMP)
	@for b in benchmarks/*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

demo: $(STAMP)
	DEMO=$(DEMO) ES=$(VENV)/bin/embedscope PY=$(PY) bash scripts/demo.sh

NB_OUT := notebook-output
# the study notebooks at full settings, with HTML copies in notebook-output/: the quick ones
# first (minutes each), 01 (33 training runs: ~25 min on a 2-core CPU) last; a failing notebook does not
# stop the others, and the target fails at the end if any did
NOTEBOOKS := $(filter-out notebooks/01_%,$(sort $(wildcard notebooks/[0-9]*.ipynb))) $(wildcard notebooks/01_*.ipynb)
notebooks: $(STAMP)
	$(PY) -m pip install -q -e ".[test,notebooks]"
	@mkdir -p $(NB_OUT)
	@failed=""; for nb in $(NOTEBOOKS); do echo "== $$nb ($$(date +%H:%M:%S))"; \
	  $(PY) -m jupyter nbconvert --to html --execute --ExecutePreprocessor.timeout=-1 \
	    --ExecutePreprocessor.kernel_name=python3 --output-dir $(NB_OUT) "$$nb" || failed="$$failed $$nb"; done; \
	  if [ -n "$$failed" ]; then echo "failed:$$failed"; exit 1; fi

clean:
	rm -rf $(DEMO) .pytest_cache
