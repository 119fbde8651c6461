# The two commands a fresh machine needs (Python 3.11): `make demo` and `make test`.
# Development checks (CONTRIBUTING.md, "Commands"): `make check`, `make test-newest`,
# `make wheel-test`, `make api-docs`; `.ci/run` runs them all.
PYTHON ?= python3.11
VENV := .venv
VPY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
DEV_STAMP := $(VENV)/.installed-dev

# The newest JAX needs Python >= 3.12; it gets its own venv. The first Python 3.12 that runs:
# on PATH, else pyenv's (`command -v` is not enough: a pyenv shim exists but fails when 3.12
# is not the selected version).
PYTHON_NEWEST ?= $(shell for p in python3.12 /root/.pyenv/versions/3.12*/bin/python3.12; do \
	"$$p" -c 'import sys; print(sys.executable)' 2>/dev/null && break; done)
VENV_NEWEST := .venv-newest
NPY := $(VENV_NEWEST)/bin/python
NEWEST_STAMP := $(VENV_NEWEST)/.installed
# What `make test-newest` runs (the whole suite by default; e.g.
# NEWEST_TESTS="tests/test_lowering.py tests/test_matmul.py" for a quick look), and in its
# second pytest process, on 8 devices, NEWEST_SHARDED (tests/sharded/ by default; empty
# skips it).
NEWEST_TESTS ?=
NEWEST_SHARDED ?= tests/sharded

.PHONY: demo test test-full venv dev check lint typecheck format test-newest venv-newest wheel-test \
	api-docs clean

# The C extension's source: its .c files and the headers and template they include.
C_SOURCE := $(wildcard csrc/lapack_ffi/*)

# The editable install compiles the C extension in place (a C compiler is needed).
$(STAMP): pyproject.toml setup.py $(C_SOURCE)
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install --quiet --upgrade pip
	$(VPY) -m pip install --quiet -e '.[test]'
	@touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(VPY) examples/demo.py

# The tests and the docstring examples (pyproject.toml: --doctest-modules over jaxdia/), on
# every core (pytest-xdist: the tests mostly compile, and XLA compiles on one thread; idle
# workers steal queued tests). PYTEST_WORKERS=0 runs them in this process.
PYTEST_WORKERS ?= auto
PYTEST_PARALLEL := -n $(PYTEST_WORKERS) --dist worksteal

#
# Three pytest processes: the suite on one device; tests/sharded/ on 8 fake CPU devices (JAX
# fixes the device count when it starts; tests/sharded/conftest.py); tests/x64_off/ with
# 64-bit types off, JAX's default, which the rest of the suite turns on
# (tests/x64_off/conftest.py). All run, and the target fails if any does. They share one
# persistent compilation cache (tests/conftest.py): the directory JAXDIA_TEST_COMPILATION_CACHE
# names if the caller set it (.ci/run, so that `make test-full` loads what `make test`
# compiled), else a fresh one for the run, removed after in the background (deleting its
# ~20,000 files takes half a minute here).
SHARDED_TESTS := tests/sharded
X64_OFF_TESTS := tests/x64_off
FRESH_CACHE := if [ -z "$$JAXDIA_TEST_COMPILATION_CACHE" ]; then \
	export JAXDIA_TEST_COMPILATION_CACHE=$$(mktemp -d); \
	trap '(rm -rf "$$JAXDIA_TEST_COMPILATION_CACHE" >/dev/null 2>&1 &)' EXIT; fi

test: $(STAMP)
	@status=0; $(FRESH_CACHE); \
	echo "pytest: the suite on one device"; \
	$(VPY) -m pytest -q $(PYTEST_PARALLEL) || status=1; \
	echo "pytest: $(SHARDED_TESTS) on 8 devices"; \
	$(VPY) -m pytest -q $(PYTEST_PARALLEL) $(SHARDED_TESTS) || status=1; \
	echo "pytest: $(X64_OFF_TESTS) with x64 off"; \
	$(VPY) -m pytest -q $(PYTEST_PARALLEL) $(X64_OFF_TESTS) || status=1; \
	exit $$status

# The full tier: the tests marked `full` (trimmed from `make test` for time) and every
# Hypothesis test again with 44 examples (the `full` profile), other examples than the
# fast tier's 6, drawn from HYPOTHESIS_SEED (reproducible; another seed draws others); then,
# in a fourth process, SciPy's own tests of the functions jaxdia replaces, run against
# jaxdia (tests/scipy_conformance/conftest.py; its expected failures are strict: one that
# passes fails the run).
HYPOTHESIS_SEED ?= 20261207
FULL_TIER := HYPOTHESIS_PROFILE=full $(VPY) -m pytest -q $(PYTEST_PARALLEL) \
	--hypothesis-seed=$(HYPOTHESIS_SEED) -m 'full or hypothesis'
CONFORMANCE_TESTS := tests/scipy_conformance

test-full: $(STAMP)
	@status=0; $(FRESH_CACHE); \
	echo "pytest: the full tier on one device"; \
	$(FULL_TIER) tests || status=1; \
	echo "pytest: the full tier of $(SHARDED_TESTS) on 8 devices"; \
	$(FULL_TIER) $(SHARDED_TESTS) || status=1; \
	echo "pytest: the full tier of $(X64_OFF_TESTS) with x64 off"; \
	$(FULL_TIER) $(X64_OFF_TESTS) || status=1; \
	echo "pytest: SciPy's own tests against jaxdia ($(CONFORMANCE_TESTS))"; \
	$(VPY) -m pytest -q -rfE $(PYTEST_PARALLEL) -m full $(CONFORMANCE_TESTS) || status=1; \
	exit $$status

# -- development tools: ruff, pyright, build (the `dev` extra) -------------------------------

$(DEV_STAMP): $(STAMP) pyproject.toml setup.py
	$(VPY) -m pip install --quiet -e '.[dev]'
	@touch $(DEV_STAMP)

dev: $(DEV_STAMP)

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(DEV_STAMP)
	$(VENV)/bin/pyright --pythonpath $(VPY)

# Static checks: lint, formatting, types (settings in pyproject.toml). All three run, and
# the target fails if any does.
check: $(DEV_STAMP)
	@status=0; \
	echo "ruff check ."; $(VENV)/bin/ruff check . || status=1; \
	echo "ruff format --check ."; $(VENV)/bin/ruff format --check . || status=1; \
	echo "pyright"; $(VENV)/bin/pyright --pythonpath $(VPY) || status=1; \
	exit $$status

# Rewrites the code: formatting and the safe lint fixes.
format: $(DEV_STAMP)
	$(VENV)/bin/ruff format .
	$(VENV)/bin/ruff check --fix .

# -- the newest JAX that pyproject.toml allows, on Python 3.12 ------------------------------

$(NEWEST_STAMP): pyproject.toml setup.py $(C_SOURCE)
	@test -n "$(PYTHON_NEWEST)" || { echo "make test-newest needs Python 3.12:" \
		"none found on PATH or in /root/.pyenv; set PYTHON_NEWEST=/path/to/python3.12"; exit 1; }
	@test -x $(NPY) || $(PYTHON_NEWEST) -m venv $(VENV_NEWEST)
	$(NPY) -m pip install --quiet --upgrade pip
	$(NPY) -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test,lineax,plot]'
	@touch $(NEWEST_STAMP)

venv-newest: $(NEWEST_STAMP)

# Compiled fully optimized, as users compile (tests/conftest.py: `make test` turns XLA's
# backend optimizations off to compile faster).
test-newest: $(NEWEST_STAMP)
	@$(NPY) -c 'import jax, jaxlib; print("jax", jax.__version__, "jaxlib", jaxlib.__version__)'
	@status=0; \
	echo "pytest: $(or $(NEWEST_TESTS),the suite) on one device"; \
	JAX_DISABLE_MOST_OPTIMIZATIONS=0 $(NPY) -m pytest -q $(PYTEST_PARALLEL) $(NEWEST_TESTS) \
		|| status=1; \
	$(if $(NEWEST_SHARDED),echo "pytest: $(NEWEST_SHARDED) on 8 devices"; \
	JAX_DISABLE_MOST_OPTIMIZATIONS=0 $(NPY) -m pytest -q $(PYTEST_PARALLEL) $(NEWEST_SHARDED) \
		|| status=1;) \
	echo "pytest: $(X64_OFF_TESTS) with x64 off"; \
	JAX_DISABLE_MOST_OPTIMIZATIONS=0 $(NPY) -m pytest -q $(PYTEST_PARALLEL) $(X64_OFF_TESTS) \
		|| status=1; \
	exit $$status

# -- packaging ---------------------------------------------------------------------------------

# Builds wheel and sdist into dist/, installs the wheel into a fresh venv, runs a smoke test.
wheel-test: $(DEV_STAMP)
	BUILDER=$(CURDIR)/$(VPY) PYRIGHT=$(CURDIR)/$(VENV)/bin/pyright .ci/wheel-test $(PYTHON)

# Regenerates docs/api.md from the docstrings.
api-docs: $(DEV_STAMP)
	$(VPY) scripts/api_md.py

clean:
	rm -rf $(VENV) $(VENV_NEWEST) .pytest_cache .hypothesis build dist .ruff_cache *.egg-info
	rm -f jaxdia/_kernels/_lapack_ffi*.so
