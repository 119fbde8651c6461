"""SciPy's tests of ``scipy.linalg.solve_banded`` and ``solveh_banded``
(``scipy/linalg/tests/test_basic.py``, classes ``TestSolveBanded`` and
``TestSolveHBanded``) run against jaxdia's. The rest of that module is deselected.
"""

from . import adapters

_module = adapters.load(
    "scipy.linalg.tests.test_basic",
    {
        ("scipy.linalg", "solve_banded"): adapters.solve_banded,
        ("scipy.linalg", "solveh_banded"): adapters.solveh_banded,
    },
)
globals().update(adapters.public(_module))


def in_scope(item) -> bool:
    return item.cls is not None and item.cls.__name__ in ("TestSolveBanded", "TestSolveHBanded")
