"""What ``import jaxdia`` costs: it loads jaxdia's core and nothing optional.

Pinned by what is imported rather than by a timing (which a loaded machine would make
flaky): SciPy, the Pallas kernel families and the lineax/equinox glue load on first use.
``benchmarks/bench_startup.py`` measures the time (about 0.07 s over ``import jax``).
"""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxdia

ROOT = Path(__file__).resolve().parents[1]

#: Modules that ``import jaxdia`` must not load (a prefix covers its submodules).
LAZY_MODULES = (
    "scipy",  # scipy.sparse (~0.1 s), scipy.linalg's LAPACK (the FFI handlers)
    "jax.experimental.pallas",  # the Pallas TPU, Triton and Mosaic GPU kernels
    "jaxdia._kernels.pallas_",
    "jax.experimental.sparse",
    "lineax",
    "equinox",
    "optimistix",
    "diffrax",
    "matplotlib",
    "jaxdia._lineax",
    "jaxdia._kernels._lapack_ffi",
)


def test_import_loads_nothing_optional(tmp_path):
    script = "import json, sys, jaxdia\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path)},
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded = json.loads(result.stdout)
    assert "jaxdia._linalg.factor" in loaded  # the listing is real
    eager = [m for m in loaded if any(m == p or m.startswith(p) for p in LAZY_MODULES)]
    assert eager == [], f"import jaxdia loads {eager}: import them where they are used"
    assert list(tmp_path.iterdir()) == []  # and creates no file (no cache directory)


def _lazy_imports_for_type_checkers() -> dict[str, str]:
    """The names the ``if TYPE_CHECKING:`` block of ``jaxdia/__init__.py`` imports."""
    tree = ast.parse((ROOT / "jaxdia" / "__init__.py").read_text())
    names = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom)
                for alias in statement.names:
                    names[alias.asname or alias.name] = "." * statement.level + (
                        statement.module or ""
                    )
    return names


def test_lazy_names_resolve_and_are_typed():
    """Each name of the table loads from its module, and type checkers see the same one."""
    table = jaxdia._LAZY
    assert table  # the lineax classes at least
    assert _lazy_imports_for_type_checkers() == table
    for name, module in table.items():
        assert name in dir(jaxdia)
        value = getattr(jaxdia, name)
        assert value is getattr(sys.modules["jaxdia" + module], name)


def test_unknown_names_raise_attribute_error():
    with pytest.raises(AttributeError, match="module 'jaxdia' has no attribute 'gmress'"):
        _ = jaxdia.gmress  # type: ignore[attr-defined]
