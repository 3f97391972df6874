# The README's commands. Each target sets up (or refreshes) the local virtual environment itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench venv clean

venv: $(STAMP)

# Refreshed whenever pyproject.toml changes. The collect extra (torch, torchvision, nvidia-ml-py)
# is installed too so the end-to-end CPU collection test runs.
$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,collect]'
	touch $(STAMP)

test: $(STAMP)
	$(PY) -m pytest -q

demo: $(STAMP)
	$(PY) -m traceanalyze ingest fixtures/kineto_json-resnet50-cpu/*.json.gz --store demo-store
	$(PY) -m traceanalyze summary --store demo-store

lint: $(STAMP)
	$(VENV)/bin/ruff check traceanalyze tests benchmarks
	$(VENV)/bin/ruff format --check traceanalyze tests benchmarks

bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run_all.py

clean:
	rm -rf $(VENV) demo-store runs
