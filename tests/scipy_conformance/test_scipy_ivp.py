"""SciPy's tests of ``solve_ivp(method="BDF")`` (``scipy/integrate/_ivp/tests/test_ivp.py``)
run against jaxdia's ``solve_ivp``.

In scope: the tests parametrized by ``method="BDF"`` and those that loop over methods
including BDF (the adapter hands every other method to SciPy). Deselected: the other
methods' tests and those of SciPy's internals (``num_jac``, ``OdeSolution``, the solver
classes).
"""

from . import adapters

_module = adapters.load(
    "scipy.integrate._ivp.tests.test_ivp",
    {("scipy.integrate", "solve_ivp"): adapters.solve_ivp},
)
globals().update(adapters.public(_module))

LOOPS_OVER_BDF = {
    "test_integration",
    "test_integration_complex",
    "test_integration_sparse_difference",
    "test_integration_const_jac",
    "test_events",
    "test_max_step",
    "test_first_step",
    "test_t_eval_early_event",
    "test_no_integration",
    "test_empty",
}


def in_scope(item) -> bool:
    params = item.callspec.params if hasattr(item, "callspec") else {}
    if "method" in params:
        return params["method"] == "BDF"
    return item.originalname in LOOPS_OVER_BDF
