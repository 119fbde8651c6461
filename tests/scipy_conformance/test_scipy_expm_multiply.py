"""SciPy's tests of ``expm_multiply`` (``scipy/sparse/linalg/tests/test_expm_multiply.py``)
run against jaxdia's.

Deselected: the tests of SciPy's private helpers (``_theta``, ``_compute_p_max``,
``_onenormest_matrix_power``, ``_expm_multiply_simple``, ``_expm_multiply_interval``),
which are SciPy's implementation, not its interface.
"""

from . import adapters

_module = adapters.load(
    "scipy.sparse.linalg.tests.test_expm_multiply",
    {("scipy.sparse.linalg._expm_multiply", "expm_multiply"): adapters.expm_multiply},
)
globals().update(adapters.public(_module))

PRIVATE = {
    "test_theta_monotonicity",
    "test_p_max_default",
    "test_p_max_range",
    "test_onenormest_matrix_power",
    "test_scaled_expm_multiply",
    "test_scaled_expm_multiply_single_timepoint",
    "test_expm_multiply_interval_status_0",
    "test_expm_multiply_interval_status_1",
    "test_expm_multiply_interval_status_2",
}


def in_scope(item) -> bool:
    return item.originalname not in PRIVATE
