# dpstream — two commands do everything on a fresh machine:
#   make run    create .venv, install dpstream, run the main job on the bundled data
#   make test   create .venv, install dpstream with its test extras, run the whole suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip
PIP_FLAGS ?= -q --disable-pip-version-check
# setuptools tells every editable install of a package mapped from the repository root to mind
# same-named folders in the working directory (an InformationOnly notice, 10 lines); the
# repository root *is* the package here, so the notice says nothing and is filtered
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: run test test-core bench bench-quick bench-extra lint clean venv demo ci-tools

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install $(PIP_FLAGS) --upgrade pip setuptools wheel

# One stamp per extra, refreshed whenever pyproject.toml changes.
$(VENV)/.stamp-core: pyproject.toml | $(BIN)/python
	$(EDITABLE) $(PIP) install $(PIP_FLAGS) -e .
	@touch $@

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(EDITABLE) $(PIP) install $(PIP_FLAGS) -e '.[test]'
	@touch $@ $(VENV)/.stamp-core

$(VENV)/.stamp-bench: pyproject.toml | $(BIN)/python
	$(EDITABLE) $(PIP) install $(PIP_FLAGS) -e '.[bench]'
	@touch $@

$(VENV)/.stamp-broker: pyproject.toml | $(BIN)/python
	$(EDITABLE) $(PIP) install $(PIP_FLAGS) -e '.[broker]'
	@touch $@ $(VENV)/.stamp-core

$(VENV)/.stamp-lint: pyproject.toml | $(BIN)/python
	$(EDITABLE) $(PIP) install $(PIP_FLAGS) -e '.[lint]'
	@touch $@

venv: $(VENV)/.stamp-core

run: $(VENV)/.stamp-core
	$(BIN)/dpstream run

# The service on a local broker (tansu, from dpstream[broker]): 5,000 Adult records through
# `dpstream serve`, its /metrics, predictions, dead letters and status, then a resume; well
# under two minutes once the venv exists (examples/service_demo.py).
demo: $(VENV)/.stamp-broker
	$(BIN)/python examples/service_demo.py

# The suite runs in PYTEST_WORKERS processes (pytest-xdist; the number of cores, at least 2 and
# at most 4). Work stealing: a worker that runs dry takes tests a busy one has not started (a
# module fixture may then be built once per worker; on 2 cores 12.8 min against 14.5 with
# each file whole in one worker).
# The Kafka tests start their own brokers on free ports, so workers never share one.
# PYTEST_WORKERS=0 runs everything in this process.
PYTEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); \
	if [ $$n -lt 2 ]; then n=2; elif [ $$n -gt 4 ]; then n=4; fi; echo $$n)

# pytest exits 5 when it collected no test; that must fail loudly, never pass.
# The core install is a configuration of its own: a second venv made by `pip install .` alone
# (no extra) runs every command and every example that declares no extra
# (.ci/core_install.py, about 2 minutes). It is rebuilt from scratch when pyproject.toml changes;
# the package itself is reinstalled each time.
CORE_VENV := .venv-core
$(CORE_VENV)/.stamp: pyproject.toml
	rm -rf $(CORE_VENV)
	$(PYTHON) -m venv $(CORE_VENV)
	$(CORE_VENV)/bin/python -m pip install $(PIP_FLAGS) --upgrade pip
	@touch $@

test-core: $(CORE_VENV)/.stamp $(VENV)/.stamp-test
	rm -rf build   # setuptools builds in ./build: a module deleted since must not come back
	$(CORE_VENV)/bin/python -m pip install $(PIP_FLAGS) .
	$(CORE_VENV)/bin/python -m pip install $(PIP_FLAGS) --no-deps --force-reinstall .
	$(BIN)/python .ci/core_install.py --venv $(CORE_VENV)

# CI (CI=true): Debian's prometheus (promtool: tests/test_deploy.py checks deploy/prometheus/)
# and chromium (tests/test_status_page.py opens the status page in a headless browser). Never
# fails the run: without one, its checks skip and say why.
ci-tools:
	@for pair in promtool:prometheus chromium:chromium; do tool=$${pair%%:*}; pkg=$${pair#*:}; \
	command -v $$tool >/dev/null 2>&1 && continue; s=$$([ "$$(id -u)" = 0 ] || echo sudo -n); \
	export DEBIAN_FRONTEND=noninteractive; \
	{ $$s apt-get install -y -qq --no-install-recommends $$pkg || { $$s apt-get update -qq && \
	$$s apt-get install -y -qq --no-install-recommends $$pkg; }; } >/dev/null 2>&1 || \
	echo "$$tool not installed: its checks skip" >&2; done

test: test-core $(if $(filter true,$(CI)),ci-tools)
	@$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist worksteal $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "make test: pytest collected no tests -- failing" >&2; exit 1; fi; \
	exit $$rc

# The benchmark suite: every model x its paper's datasets x the epsilon grid, with scikit-learn,
# river, diffprivlib, DP-EBM and DP Mean on the same splits; resumable. bench (full, <= 60 min
# on 2 cores) is the one target that renders the project's docs/benchmarks.md and docs/img/,
# from the committed benchmarks/results/full.jsonl (--render-docs). bench-quick (<= 5 min)
# writes its page, plots and results under reports/suite-quick/ and touches no tracked file.
bench: $(VENV)/.stamp-bench
	$(BIN)/dpstream suite --profile full --render-docs

bench-quick: $(VENV)/.stamp-bench
	$(BIN)/dpstream suite --profile quick

# Every script and command quoted in docs/benchmark_notes.md (ablations, speed, service, the
# per-issue targets; tens of minutes).
bench-extra: $(VENV)/.stamp-bench
	$(BIN)/python benchmarks/sgbdt_speed.py
	$(BIN)/python benchmarks/service_bench.py
	$(BIN)/python benchmarks/sgbdt_retire_ab.py
	$(BIN)/python benchmarks/sgbdt_retire_blocks.py --drift
	$(BIN)/dpstream bench --model sgbdt --dataset abalone --epsilon 0.15,0.54 --repeats 5
	$(BIN)/dpstream bench --model sgbdt --dataset adult --epsilon 0.07,0.15,0.54 --repeats 5
	$(BIN)/dpstream bench --model sgbdt --dataset abalone-late --epsilon 0.55 --repeats 5
	$(BIN)/dpstream bench --model sgbdt --dataset abalone-late --epsilon 0.55 --repeats 5 \
		--no-individual-filter
	$(BIN)/dpstream bench --model sgbdt --dataset adult-late --epsilon 0.54 --repeats 5
	$(BIN)/dpstream bench --model sgbdt --dataset adult-late --epsilon 0.54 --repeats 5 \
		--no-individual-filter
	$(BIN)/python benchmarks/median_forest_speed.py
	for d in adult iris wine syn5d syn10d syn15d; do \
		$(BIN)/dpstream bench --model median-forest --dataset $$d --epsilon 2 || exit 1; done
	$(BIN)/dpstream bench --model median-forest --dataset adult --epsilon 2 \
		--labeled-fraction 0.2 --privacy features_and_labels
	$(BIN)/dpstream bench --model median-forest --dataset adult --epsilon 2 \
		--labeled-fraction 0.2 --privacy labels_only
	$(BIN)/dpstream bench --model median-forest --dataset adult --epsilon 2 \
		--labeled-fraction 0.2 --privacy labels_only --transductive
	$(BIN)/dpstream bench --model median-forest --dataset syn5d --epsilon 2 \
		--labeled-fraction 0.2 --privacy labels_only
	$(BIN)/python benchmarks/median_forest_drift.py
	$(BIN)/python benchmarks/median_forest_ablation.py
	$(BIN)/python benchmarks/window_forests_speed.py
	$(BIN)/python benchmarks/window_forests_message_size.py
	for m in random-forest rdt greedy-forest; do \
		$(BIN)/python benchmarks/window_forests_streams.py $$m '{}' --seeds 0 1 2 || exit 1; done
	for d in adult synth-a synth-b synth-c synth-d synth-e synth-f synth-g; do \
		$(BIN)/dpstream bench --model random-forest --dataset $$d --epsilon 0.1,0.5,1 || exit 1; done
	$(BIN)/python benchmarks/random_forest_vs_diffprivlib.py
	$(BIN)/dpstream bench --model rdt --dataset adult --epsilon 0.1,0.5,1 --repeats 10
	for d in adult syn10d; do for m in rdt rdt-sharp; do \
		$(BIN)/dpstream bench --model $$m --dataset $$d --epsilon 0.5,1 --repeats 10 \
			--labeled-fraction 0.2 || exit 1; done; done
	$(BIN)/dpstream bench --model greedy-forest --dataset adult --epsilon 0.1,0.5,1

lint: $(VENV)/.stamp-lint
	$(BIN)/ruff check accounting models stream connectors tests examples benchmarks

clean:
	rm -rf $(VENV) $(CORE_VENV) build *.egg-info .pytest_cache .hypothesis reports
