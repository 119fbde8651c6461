"""The suite's guard against Linux's limit on memory mappings (``tests/conftest.py``).

Each program XLA:CPU compiles maps its code into the process; past ``vm.max_map_count``
XLA's compile dies of a segmentation fault. Between tests the suite clears JAX's caches
where a worker nears the limit, which holds only while clearing them unmaps the programs.
"""

import jax
import jax.numpy as jnp
import pytest

from .helpers import mappings, release_compiled_programs

pytestmark = pytest.mark.skipif(mappings() is None, reason="Linux: reads /proc/self/maps")

PROGRAMS = 100


def test_clearing_jax_caches_unmaps_the_compiled_programs():
    release_compiled_programs()
    before = mappings()
    for size in range(1, PROGRAMS + 1):
        jax.jit(lambda x: 2 * x + 1)(jnp.ones(size)).block_until_ready()
    compiled = mappings()
    assert compiled - before >= 2 * PROGRAMS  # each program maps its code and data
    release_compiled_programs()
    assert mappings() - before < (compiled - before) / 4  # (the heap keeps a few)
