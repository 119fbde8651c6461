"""Test configuration: x64 on (float64/complex128 are tested), XLA's backend optimizations
off, Hypothesis profiles.

The suite compiles a few thousand small programs, and at test sizes LLVM's optimizations
cost more compile time than they save in run time (about 40% of the suite's time), as do
XLA:CPU's fusion emitters (the older loop emitters instead: the same files ran in 0.8x
the time here, CI's fast tier in half, the full tier in 0.64x).
``JAX_DISABLE_MOST_OPTIMIZATIONS=0`` runs it fully optimized, as users compile (CI's
``make test-newest`` step does).

Profiles: ``ci`` (default; derandomized, no example database, 6 examples a property so
``make test`` stays fast on 2 cores), ``full`` (44, drawn from the seed that ``make
test-full`` passes, ``--hypothesis-seed``: as reproducible as derandomized, and other
examples than ``ci``'s, where a derandomized run of 50 began with the fast tier's 10;
CI runs both, 50 distinct examples a property) and ``dev`` (random, 150) for local
runs: ``HYPOTHESIS_PROFILE=dev make test``. Tests that set their own example count scale
it with ``helpers.examples`` (a count for 10 examples: 0.6x under ``ci``, 4.4x under
``full``).

Memory maps: each program XLA:CPU compiles maps its code into the process (about 30
mappings for a program of a few dozen operations), and JAX's caches keep them while the
process lives. Linux refuses mappings past ``vm.max_map_count`` (65,530 by default), and
XLA's next compile then dies of a segmentation fault; a worker of the full tier compiles
enough programs to get there (with the loop emitters a program holds about twice the
mappings). So between tests, where the process holds more than three
quarters of that limit, JAX's caches are cleared (``pytest_runtest_teardown`` below;
``tests/test_memory_maps.py``). (Clearing them after every test file instead ran four
slow files 8% faster in one process, but the whole suite slower: each file then compiles
again the programs the files share.)

Tiers: ``make test`` deselects the tests marked ``full`` (pyproject.toml's addopts); ``make
test-full`` runs those and every Hypothesis test again under the ``full`` profile.
"""

import os
from importlib.metadata import version

import jax
import pytest
from hypothesis import HealthCheck, settings

from .helpers import mapping_share, release_compiled_programs

jax.config.update("jax_enable_x64", True)
# In the environment too, for the subprocesses (the sharding checks, the examples).
os.environ.setdefault("JAX_DISABLE_MOST_OPTIMIZATIONS", "1")
OPTIMIZATIONS_OFF = os.environ["JAX_DISABLE_MOST_OPTIMIZATIONS"].lower() in ("1", "true")
jax.config.update("jax_disable_most_optimizations", OPTIMIZATIONS_OFF)

# With the optimizations off, XLA:CPU's loop emitters instead of its fusion emitters too,
# unless XLA_FLAGS chooses (a program then holds about twice the mappings: the workers
# clear their caches more often, below, and load again from the persistent cache what
# they compiled before). An XLA flag that the running
# jaxlib does not know aborts the process, so it is set only on the jaxlib it was checked
# on (the oldest supported, which `make test` runs); set before any backend starts, and in
# the environment, so that pytest-xdist's workers and the subprocesses get it.
LOOP_EMITTERS = "--xla_cpu_use_fusion_emitters=false"
if (
    OPTIMIZATIONS_OFF
    and version("jaxlib").startswith("0.10.")
    and "--xla_cpu_use_fusion_emitters" not in os.environ.get("XLA_FLAGS", "")
):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {LOOP_EMITTERS}".strip()

# JAX's persistent compilation cache in the directory JAXDIA_TEST_COMPILATION_CACHE names
# (`make test` and `make test-full` give each run a fresh one, removed after): the pytest
# processes and workers of a run then compile a program once between them, and a worker
# that cleared its caches (below) loads what it compiled before. Every program is kept,
# however small (the suite's take tens of milliseconds).
if cache := os.environ.get("JAXDIA_TEST_COMPILATION_CACHE"):
    jax.config.update("jax_compilation_cache_dir", cache)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=6,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "full",
    database=None,
    deadline=None,
    max_examples=44,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=150,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# tests/sharded/ runs on 8 fake CPU devices, which JAX fixes when its backend starts: its
# own pytest process runs it (tests/sharded/conftest.py; `make test` runs both). So do
# tests/x64_off/ (x64 off) and tests/scipy_conformance/ (SciPy's own test modules, full
# tier only: `make test-full`; importing them would slow `make test`'s collection).
collect_ignore = ["sharded", "x64_off", "scipy_conformance"]

# Counting a busy worker's mappings costs milliseconds: they are counted every
# MAPPINGS_CHECKED_EVERY tests, and after every test once a quarter of the limit is held
# (a test compiles up to a few thousand mappings' worth of programs).
MAPPINGS_CHECKED_EVERY = 20
_tests_until_count = MAPPINGS_CHECKED_EVERY


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item, nextitem):
    global _tests_until_count
    _tests_until_count -= 1
    if _tests_until_count > 0:
        return
    share = mapping_share()
    if share > 0.75:
        release_compiled_programs()
        share = mapping_share()
    _tests_until_count = 1 if share > 0.25 else MAPPINGS_CHECKED_EVERY


#: A value in JAX's trace context that does not change a program: the regex JAX strips
#: from the source paths in HLO metadata (``traced_as`` sets one that matches nothing).
_TRACE_TAG = "jax_hlo_source_file_canonicalization_regex"


@pytest.fixture
def traced_as(monkeypatch):
    """``traced_as(platform)``: for the rest of the test, jaxdia traces its programs as on
    ``platform``'s machine (``"cpu"``, ``"tpu"``, ``"cuda"`` or ``"gpu"``: the
    ``_dispatch.default_platform`` that chooses factor layouts, coarse solves,
    Gram-Schmidt, ...), to lower them for that platform.

    JAX reuses a trace made from the same arguments in the same trace context, so each
    platform's traces are kept apart by a value of that context that does not change the
    programs (``_TRACE_TAG``, one per platform); clearing JAX's caches instead would make
    every later test of the worker compile again what it shares with the earlier ones.
    That keeps lowered programs apart; a jitted function *called* again still runs what it
    compiled (JAX's dispatch does not read that value), so a test that runs programs as
    on another platform passes ``runs=True``: JAX's caches are cleared then, and again
    after the test.
    """
    from jaxdia import _dispatch

    previous = getattr(jax.config, _TRACE_TAG)
    cleared = False

    def trace_as(platform: str, *, runs: bool = False) -> None:
        nonlocal cleared
        name = "gpu" if platform == "cuda" else platform
        monkeypatch.setattr(_dispatch, "default_platform", lambda: name)
        jax.config.update(_TRACE_TAG, None if name == "cpu" else f"(?!){name}")
        if runs:
            jax.clear_caches()
            cleared = True

    yield trace_as
    jax.config.update(_TRACE_TAG, previous)
    if cleared:
        jax.clear_caches()
