"""Tests with 64-bit types off, as JAX starts by default, in a pytest process of their own.

``tests/conftest.py`` turns x64 on for the rest of the suite (float64 and complex128 are
tested), so a path that works only with x64 on (an int64 index a kernel or a compiled
handler insists on, a float64 constant that promotes) would pass there and fail for every
user who never enables it. JAX reads the setting when it traces, and a module may read it
at import: the only faithful check is a process that never turns it on.
``tests/conftest.py`` leaves this folder out (``collect_ignore``), ``make test`` runs it in
a third process: ``python -m pytest tests/x64_off``; this conftest, loaded after the
top-level one and before any test imports jaxdia's modules, turns x64 back off.
"""

import jax
import pytest

jax.config.update("jax_enable_x64", False)


@pytest.fixture(autouse=True)
def _x64_stays_off():
    assert not jax.config.jax_enable_x64, "x64 was turned on: run tests/x64_off on its own"
    yield
    assert not jax.config.jax_enable_x64
