"""SciPy's tests of ``cg``, ``bicgstab`` and ``gmres``
(``scipy/sparse/linalg/_isolve/tests/test_iterative.py``) run against jaxdia's.

In scope: the tests parametrized by one of these three solvers (or by a case of one),
``TestGMRES``, and ``test_precond_inverse``, which runs every solver (SciPy's others as
they are). SciPy's other solvers' tests are deselected.
"""

from . import adapters

_module = adapters.load(
    "scipy.sparse.linalg._isolve.tests.test_iterative",
    {
        ("scipy.sparse.linalg._isolve", "cg"): adapters.cg,
        ("scipy.sparse.linalg._isolve", "bicgstab"): adapters.bicgstab,
        ("scipy.sparse.linalg._isolve", "gmres"): adapters.gmres,
    },
)
globals().update(adapters.public(_module))

OURS = {"cg", "bicgstab", "gmres"}


def in_scope(item) -> bool:
    if item.cls is not None:
        return item.cls.__name__ == "TestGMRES"
    if item.originalname == "test_precond_inverse":
        return True
    params = item.callspec.params if hasattr(item, "callspec") else {}
    solver = params.get("solver") or getattr(params.get("case"), "solver", None)
    return getattr(solver, "__name__", None) in OURS
