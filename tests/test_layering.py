"""The package's modules import only from layers below their own (so there are no cycles).

The layers, bottom up (``CONTRIBUTING.md`` describes them):

1. foundations: argument checks, DIA geometry, the ``DiaParts`` triple, the SciPy-name
   hints; the helpers the Pallas kernels share;
2. backends, siblings that never import each other: XLA, Pallas Triton, Pallas TPU,
   LAPACK on the host, the ``lax.scan`` banded factorizations;
3. the JAX primitives;
4. array-level operations on ``(data, offsets, shape)``: conversions, products, traces,
   arithmetic, banded factorizations, solvers (never ``DiaMatrix``);
5. the ``DiaMatrix`` class;
6. public functions of matrices;
7. integrations: sharding, lineax, ``.npz`` files, ``jaxdia.testing``, the package.

Every import counts, including those inside functions. A new module must be given a
layer here.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdia"

# Layer of each module; finer steps (1.5, 4.1, ...) order modules within a layer.
LAYERS = {
    "_checks": 1,
    "_geometry": 1,
    "_parts": 1,
    "_scipy_names": 1,
    "_sharding": 1,
    "_pallas_common": 1.5,
    "_xla": 2,
    "_xla_runs": 2,
    "_pallas_triton": 2,
    "_pallas_tpu": 2,
    "_lapack": 2,
    "_band_scan": 2,
    "_ilu_kernels": 2,
    "_primitives": 3,
    "_band_primitives": 3,
    "_ilu_primitives": 3,
    "_convert": 4,
    "_products": 4,
    "_sharded_products": 3.5,
    "_traces": 4,
    "_ops": 4.1,
    "_banded": 4.2,
    "_ilu": 4.25,
    "_solve": 4.3,
    "_expm": 4.3,
    "_lanczos": 4.4,
    "_krylov": 4,
    "_multigrid": 4.3,
    "_matrix": 5,
    "_construct": 6,
    "_functions": 6,
    "_linalg": 6,
    "_spectral": 6.1,
    "_factor": 6.1,
    "_precond": 6.1,
    "_incomplete": 6.2,
    "_io": 7,
    "_lineax": 7,
    "_shard": 7,
    "testing": 7,
    "conftest": 8,
    "__init__": 8,
}
BACKENDS = {
    "_xla",
    "_xla_runs",
    "_pallas_triton",
    "_pallas_tpu",
    "_lapack",
    "_band_scan",
    "_ilu_kernels",
}


def _package_imports(path: Path) -> set[str]:
    """The package modules that ``path`` imports (relative or absolute, anywhere in it)."""
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level == 1 or module == "jaxdia" or module.startswith("jaxdia."):
                base = module.removeprefix("jaxdia").lstrip(".")
                if base:
                    imported.add(base.split(".")[0])
                else:  # ``from . import _ops`` or ``from jaxdia import _ops``
                    imported.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jaxdia."):
                    imported.add(alias.name.split(".")[1])
    return imported


def _modules() -> dict[str, set[str]]:
    return {path.stem: _package_imports(path) for path in sorted(PACKAGE.glob("*.py"))}


def test_every_module_has_a_layer():
    assert set(_modules()) == set(LAYERS), "give new modules a layer in LAYERS"


def test_modules_import_only_lower_layers():
    upward = [
        f"{module} (layer {LAYERS[module]}) imports {other} (layer {LAYERS[other]})"
        for module, imports in _modules().items()
        for other in sorted(imports)
        if LAYERS[other] >= LAYERS[module]
    ]
    assert not upward, "\n".join(upward)


def test_backends_do_not_import_each_other():
    crossing = {
        module: imports & BACKENDS for module, imports in _modules().items() if module in BACKENDS
    }
    assert not any(crossing.values()), crossing


def test_the_layering_test_sees_imports():
    # A guard against a parser that finds nothing: _matrix imports from below.
    assert {"_ops", "_checks", "_geometry"} <= _modules()["_matrix"]
