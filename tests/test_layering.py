"""The package's modules import only from layers below their own (so there are no cycles).

``jaxdia/`` holds the foundations, the matrix modules and two family folders. The layers,
bottom up (``CONTRIBUTING.md`` describes them):

1. foundations: argument checks, DIA geometry, the ``DiaParts`` triple, the immutable
   pytree base, the SciPy-name hints, what a sharding says, the shared type names, the
   rules of which implementation runs where;
2. ``_kernels/``: the JAX primitives and what they lower to (XLA, Pallas Mosaic GPU,
   Pallas Triton, Pallas TPU, LAPACK through XLA's FFI, the ``lax.scan``
   factorizations, block cyclic reduction and its refinement). It imports only the
   foundations (and itself), and it is the only place that registers a lowering;
3. array-level operations on ``(data, offsets, shape)``: conversions, products, traces,
   arithmetic (never ``DiaMatrix``);
4. the ``DiaMatrix`` class, assembled from groups of thin methods (elementwise
   arithmetic, reductions, structure edits, products and SciPy's operator protocol) over
   one base, and its constructors, and the row-sharded ``ShardedDiaMatrix`` beside it
   (the solvers take both);
5. ``_linalg/``: banded factors, Krylov solvers, preconditioners, multigrid, ``eigsh``,
   ``expm_multiply``, in five steps: modules that import no sibling (the Krylov loops,
   smoothers, ILU rows, stencil geometry, ...); banded solves, Jacobi and deep halos; the
   factors, ``eigsh``, ILU(0), the multigrid hierarchy and Chebyshev; sharded multigrid;
   the multigrid front, which dispatches to both hierarchies;
6. integrations: lineax, ``.npz`` files, ``jaxdia.testing``, the package.

Every import counts, including those inside functions (the Pallas families are imported
inside a function, when a product is lowered for their platform). A new module must be
given a layer here; its place inside the layer follows from its imports, which must form
no cycle.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "jaxdia"

# The layer of each module (dotted below jaxdia), bottom up, as the docstring lists them.
# An import goes to a lower layer or to the module's own; inside a layer the order is the
# imports' own (``_depths``), which must have no cycle.
LAYERS = {
    "_checks": 1,
    "_geometry": 1,
    "_parts": 1,
    "_pytree": 1,
    "_scipy_names": 1,
    "_scipy_operator": 1,
    "_sharding": 1,
    "_typing": 1,
    "_dispatch": 1,
    "_kernels": 2,
    "_kernels.pallas_common": 2,
    "_kernels.xla": 2,
    "_kernels.xla_runs": 2,
    "_kernels.pallas_triton": 2,
    "_kernels.pallas_mosaic_gpu_plan": 2,
    "_kernels.pallas_mosaic_gpu": 2,
    "_kernels.pallas_tpu": 2,
    "_kernels.lapack": 2,
    "_kernels.band_layouts": 2,
    "_kernels.shared": 2,
    "_kernels.band_scan": 2,
    "_kernels.band_parallel": 2,
    "_kernels.band_refine": 2,
    "_kernels.primitives": 2,
    "_kernels.band_primitives": 2,
    "_kernels.ilu": 2,
    "_kernels.ilu_primitives": 2,
    "_sharded_products": 3,
    "_host": 3,
    "_convert": 3,
    "_products": 3,
    "_traces": 3,
    "_colouring": 3,
    "_ops": 3,
    "_matrix_base": 4,
    "_matrix_elementwise": 4,
    "_matrix_reductions": 4,
    "_matrix_structure": 4,
    "_matrix_operator": 4,
    "_matrix": 4,
    "_functions": 4,
    "_construct": 4,
    "_shard": 4,
    "_jacobian": 4,
    "_linalg": 5,
    "_linalg.periodic": 5,
    "_linalg.plan": 5,
    "_linalg.operators": 5,
    "_linalg.operands": 5,
    "_linalg.krylov": 5,
    "_linalg.smoothers": 5,
    "_linalg.ilu": 5,
    "_linalg.expm_norms": 5,
    "_linalg.expm_taylor": 5,
    "_linalg.expm_gradients": 5,
    "_linalg.expm_operators": 5,
    "_linalg.expm": 5,
    "_linalg.stencil": 5,
    "_linalg.banded": 5,
    "_linalg.selected_inverse": 5,
    "_linalg.determinant": 5,
    "_linalg.jacobi": 5,
    "_linalg.gmres": 5,
    "_linalg.deep_halo": 5,
    "_linalg.factor": 5,
    "_linalg.direct": 5,
    "_linalg.lanczos": 5,
    "_linalg.eigsh_modes": 5,
    "_linalg.eigsh_checks": 5,
    "_linalg.eigsh": 5,
    "_linalg.incomplete": 5,
    "_linalg.multigrid_hierarchy": 5,
    "_linalg.chebyshev": 5,
    "_linalg.sharded_multigrid": 5,
    "_linalg.lstsq": 5,
    "_linalg.multigrid": 5,
    "_bdf": 5,
    "_ivp_checks": 5,
    "_ivp_cache": 5,
    "_ivp_host": 5,
    "_ivp_jacobian": 5,
    "_ivp_output": 5,
    "_ivp_events": 5,
    "_ivp_problem": 5,
    "_ivp": 5,
    "_io": 6,
    "_compilation_cache": 6,
    "_lineax": 6,
    "testing": 6,
    "conftest": 7,
    "__init__": 7,
}
#: The implementations the primitives lower to: siblings that never import each other.
BACKENDS = {
    "_kernels.xla",
    "_kernels.xla_runs",
    "_kernels.pallas_triton",
    "_kernels.pallas_mosaic_gpu",
    "_kernels.pallas_tpu",
    "_kernels.lapack",
    "_kernels.band_scan",
    "_kernels.band_parallel",
    "_kernels.ilu",
}
KERNELS = "_kernels"


def _name(path: Path) -> str:
    """``path``'s module name below ``jaxdia`` (``_kernels.xla``; a package's
    ``__init__`` is the package, the top one ``__init__``)."""
    parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def _resolve(module: str, base: str) -> str:
    """The module in ``LAYERS`` that ``base`` (a dotted name below jaxdia) or its parent
    package is: ``_kernels.xla.spmm_xla`` is ``_kernels.xla``."""
    while base and base not in LAYERS:
        base = base.rpartition(".")[0]
    return base


def _package_imports(path: Path) -> set[str]:
    """The package modules that ``path`` imports (relative or absolute, anywhere in it)."""
    here = _name(path).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    if here == ["__init__"]:
        package = []
    imported = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package[: len(package) - (node.level - 1)] + module.split(".")
            elif module == "jaxdia" or module.startswith("jaxdia."):
                base = module.split(".")[1:]
            else:
                continue
            base_name = ".".join(part for part in base if part)
            for alias in node.names:  # ``from . import _ops`` imports a module
                candidate = ".".join(p for p in (base_name, alias.name) if p)
                imported.add(_resolve(candidate, candidate) or _resolve(base_name, base_name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("jaxdia."):
                    imported.add(_resolve(alias.name, alias.name.removeprefix("jaxdia.")))
    imported.discard("")
    imported.discard(_name(path))
    return imported


def _modules() -> dict[str, set[str]]:
    return {_name(path): _package_imports(path) for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_layer():
    assert set(_modules()) == set(LAYERS), "give new modules a layer in LAYERS"


def test_the_package_is_two_folders_and_flat_modules():
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir()} - {"__pycache__"}
    assert folders == {"_kernels", "_linalg"}


def _within(module: str, imports: set[str]) -> set[str]:
    """The modules of ``module``'s own layer among ``imports`` (a package's own modules
    are below it)."""
    return {
        other
        for other in imports
        if LAYERS[other] == LAYERS[module] and not other.startswith(module + ".")
    }


def _depths(modules: dict[str, set[str]]) -> dict[str, int]:
    """Each module's step inside its layer, derived from the imports: one more than the
    deepest module of its layer that it imports (0: none). A cycle has no order: an
    AssertionError naming it."""
    depths: dict[str, int] = {}

    def depth(module: str, path: tuple[str, ...]) -> int:
        if module in path:
            cycle = " -> ".join((*path[path.index(module) :], module))
            raise AssertionError(f"an import cycle: {cycle}")
        if module not in depths:
            below = _within(module, modules[module])
            depths[module] = 1 + max((depth(o, (*path, module)) for o in below), default=-1)
        return depths[module]

    for module in modules:
        depth(module, ())
    return depths


def test_modules_import_only_lower_layers():
    upward = [
        f"{module} (layer {LAYERS[module]}) imports {other} (layer {LAYERS[other]})"
        for module, imports in _modules().items()
        for other in sorted(imports)
        if LAYERS[other] > LAYERS[module]
    ]
    assert not upward, "\n".join(upward)


def test_imports_within_a_layer_have_an_order():
    """No cycle, and the order the docstring describes: ``_linalg``'s modules in steps
    (those that import no sibling, the banded solves, the factors and ``eigsh``, ...)."""
    depths = _depths(_modules())
    assert depths["_linalg.periodic"] == depths["_linalg.operators"] == 0
    assert depths["_linalg.operators"] < depths["_linalg.operands"] < depths["_linalg.krylov"]
    assert depths["_linalg.plan"] < depths["_linalg.banded"] < depths["_linalg.factor"]
    assert depths["_linalg.factor"] < depths["_linalg.direct"]
    assert depths["_linalg.multigrid"] > depths["_linalg.multigrid_hierarchy"]
    assert depths["_kernels.band_primitives"] > depths["_kernels.band_parallel"]
    groups = ("_matrix_elementwise", "_matrix_reductions", "_matrix_structure", "_matrix_operator")
    assert all(depths["_matrix_base"] < depths[group] < depths["_matrix"] for group in groups)


def test_kernels_import_only_the_foundations():
    outside = {
        module: sorted(other for other in imports if LAYERS[other] >= LAYERS[KERNELS])
        for module, imports in _modules().items()
        if module.startswith(KERNELS)
    }
    outside = {
        module: [other for other in others if not other.startswith(KERNELS)]
        for module, others in outside.items()
    }
    assert not any(outside.values()), outside


def test_only_kernels_register_lowerings():
    registering = sorted(
        _name(path)
        for path in PACKAGE.rglob("*.py")
        if "register_lowering" in path.read_text() or "register_ffi_target" in path.read_text()
    )
    assert registering and all(name.startswith(KERNELS + ".") for name in registering), registering


def test_backends_do_not_import_each_other():
    crossing = {
        module: imports & BACKENDS for module, imports in _modules().items() if module in BACKENDS
    }
    assert not any(crossing.values()), crossing


def test_the_layering_test_sees_imports():
    # A guard against a parser that finds nothing: the matrix modules import from below,
    # and the folders' relative imports resolve.
    modules = _modules()
    assert {"_convert", "_checks", "_matrix_operator"} <= modules["_matrix"]
    assert {"_ops", "_matrix_base", "_parts"} <= modules["_matrix_elementwise"]
    assert {"_kernels.band_scan", "_kernels.lapack", "_geometry"} <= modules[
        "_kernels.band_primitives"
    ]
    assert {"_linalg.banded", "_linalg.smoothers", "_parts"} <= modules[
        "_linalg.multigrid_hierarchy"
    ]
    assert {"_linalg.factor", "_linalg.multigrid", "_matrix"} <= modules["__init__"]


#: The test file of each ``_linalg`` module whose behaviour is reached through another
#: module's public names (the others have ``tests/test_<module>.py``; CONTRIBUTING.md).
TESTED_IN = {
    "deep_halo": "sharded/test_sharded_precond.py",
    "determinant": "test_logdet.py",
    "direct": "test_banded.py",
    "expm_gradients": "test_expm.py",
    "expm_taylor": "test_expm.py",
    "eigsh_checks": "test_eigsh.py",
    "eigsh_modes": "test_eigsh.py",
    "incomplete": "test_ilu.py",
    "lanczos": "test_eigsh.py",
    "multigrid_hierarchy": "test_multigrid.py",
    "operands": "test_operators.py",
    "plan": "test_dispatch.py",
    "selected_inverse": "test_logdet.py",
    "sharded_multigrid": "sharded/test_sharded_multigrid.py",
    "smoothers": "test_multigrid.py",
    "stencil": "test_multigrid.py",
}


def test_every_linalg_module_has_its_test_file():
    tests = Path(__file__).resolve().parent
    modules = {path.stem for path in (PACKAGE / "_linalg").glob("*.py")} - {"__init__"}
    missing = {
        name: TESTED_IN.get(name, f"test_{name}.py")
        for name in sorted(modules)
        if not (tests / TESTED_IN.get(name, f"test_{name}.py")).is_file()
    }
    assert not missing, f"_linalg modules without their test file (module: file): {missing}"
    assert set(TESTED_IN) <= modules, f"TESTED_IN names no module: {set(TESTED_IN) - modules}"
