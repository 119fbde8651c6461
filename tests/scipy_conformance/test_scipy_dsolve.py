"""SciPy's tests of ``spsolve``, ``splu`` and ``factorized``
(``scipy/sparse/linalg/_dsolve/tests/test_linsolve.py``) run against jaxdia's banded
solves (``solve_banded``, ``lu_factor`` and ``factorized``, as ``docs/migration.md`` maps
them). Deselected: ``spilu``'s and ``spsolve_triangular``'s tests and those of SciPy's
internals (``TestGstrsErrors``, ``is_sptriangular``).
"""

from . import adapters

_module = adapters.load(
    "scipy.sparse.linalg._dsolve.tests.test_linsolve",
    {
        ("scipy.sparse.linalg._dsolve", "spsolve"): adapters.spsolve,
        ("scipy.sparse.linalg._dsolve", "splu"): adapters.splu,
        ("scipy.sparse.linalg._dsolve", "factorized"): adapters.factorized,
    },
)
globals().update(adapters.public(_module))


def in_scope(item) -> bool:
    if item.cls is None or item.cls.__name__ not in ("TestFactorized", "TestLinsolve", "TestSplu"):
        return False
    return not item.originalname.startswith("test_spilu")
