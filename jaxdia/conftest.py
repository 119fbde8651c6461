"""pytest configuration for the doctests in ``jaxdia/`` (run by ``make test``).

Not shipped in the wheel (see ``[tool.hatch.build.targets.wheel]`` in pyproject.toml).

The examples in the docstrings are written for JAX's defaults, as a user sees them: x64
off, so outputs show ``float32``. ``tests/conftest.py`` turns x64 on for the whole
session, so each doctest here runs inside ``jax.enable_x64(False)``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator

import jax
import pytest

# Modules whose examples need an optional extra: skipped (not failed) where it is missing.
_OPTIONAL = {"_lineax.py": "lineax", "testing.py": "hypothesis"}

collect_ignore = [
    module for module, package in _OPTIONAL.items() if importlib.util.find_spec(package) is None
]


@pytest.fixture(autouse=True)
def _fresh_interpreter(request: pytest.FixtureRequest) -> Iterator[None]:
    """Each example as pasted into a fresh interpreter: JAX's default precision, and an
    empty namespace (doctest would otherwise lend it the module's globals, and an example
    using a name it does not import would pass here but fail for a user)."""
    test = getattr(request.node, "dtest", None)
    if test is not None:
        test.globs.clear()
        test.globs["__name__"] = "__main__"
    with jax.enable_x64(False):
        yield
