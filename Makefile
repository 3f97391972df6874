# The README's commands. Each target sets up (or refreshes) the local virtual environment itself.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-profilers lint bench docs venv clean

venv: $(STAMP)

# Refreshed whenever pyproject.toml or this Makefile changes. The collect extra (torch,
# torchvision, nvidia-ml-py) is installed so the end-to-end CPU collection test runs, and the dask
# extra so the distributed ingest is tested against a real loopback cluster.
$(STAMP): pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,collect,dask]'
	touch $(STAMP)

# The diagnose report's browser test needs Debian's chromium: installed here when missing and root.
test: $(STAMP)
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || \
		(apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium)
	$(PY) -m pytest -q

# The tests that run NVIDIA's profilers (nsys, nvprof, ncu; no GPU needed), after installing
# Debian 12's packages of them when missing (.ci/install-profilers: as root, else it says what).
PROFILER_TESTS := requires_nsys or requires_nvprof or requires_ncu
test-profilers: $(STAMP)
	.ci/install-profilers
	$(PY) -m pytest -q -m "$(PROFILER_TESTS)"

# The main job: a short real ResNet-50 training run under the PyTorch profiler (on the GPU when
# nvidia-smi sees one, else on the CPU), ingested into runs/demo/store, summarized, and drawn.
DEMO_DEVICE := $(shell nvidia-smi -L >/dev/null 2>&1 && echo cuda || echo cpu)
demo: $(STAMP)
	rm -rf runs/demo
	$(PY) -m traceanalyze collect --device $(DEMO_DEVICE) --profiler torch --iterations 4 \
		--batch-size 2 --image-size 64 --out runs --run-id demo
	$(PY) -m traceanalyze summary --store runs/demo/store
	$(PY) -m traceanalyze timeline runs/demo/*.pt.trace.json.gz -o runs/demo/timeline.png
	$(PY) -m traceanalyze ops runs/demo/*.pt.trace.json.gz --top 10 --plot runs/demo/ops.png
	@echo "pictures: runs/demo/timeline.png (the run over time), runs/demo/ops.png (operators)"

lint: $(STAMP)
	$(VENV)/bin/ruff check traceanalyze tests benchmarks
	$(VENV)/bin/ruff format --check traceanalyze tests benchmarks
	$(VENV)/bin/mypy traceanalyze

# Pages generated from the code (tests/test_docs.py, tests/test_schema.py and
# tests/test_cli_index.py fail when they drift); the command index first, since --help reads it.
docs: $(STAMP)
	$(PY) -m traceanalyze.cli.doc --index
	$(PY) -m traceanalyze.cli.doc docs/cli.md
	$(PY) -m traceanalyze schema --markdown > docs/schema.md.tmp && mv docs/schema.md.tmp docs/schema.md

# Every figure the docs quote (`make bench`), or one: `make bench FIGURE=kineto-speed`
# (`python benchmarks/run_all.py` lists the names).
FIGURE ?= all
bench: $(STAMP)
	$(PY) -m pip install -q -e '.[bench]'
	$(PY) benchmarks/run_all.py $(FIGURE)

clean:
	rm -rf $(VENV) runs bench-data
