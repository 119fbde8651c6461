"""SciPy's tests of ``eigsh`` (``scipy/sparse/linalg/_eigen/arpack/tests/test_arpack.py``)
run against jaxdia's. The tests of ``eigs`` (nonsymmetric problems) are deselected; those
that run both keep SciPy's ``eigs``.
"""

from . import adapters

_module = adapters.load(
    "scipy.sparse.linalg._eigen.arpack.tests.test_arpack",
    {("scipy.sparse.linalg._eigen.arpack", "eigsh"): adapters.eigsh},
)
globals().update(adapters.public(_module))

EIGSH = {
    "test_symmetric_modes",
    "test_hermitian_modes",
    "test_symmetric_starting_vector",
    "test_symmetric_no_convergence",
    "test_eigen_bad_shapes",
    "test_eigen_bad_kwargs",
    "test_linearoperator_deallocation",
    "test_parallel_threads",
    "test_reentering",
    "test_eigsh_for_k_greater",
}


def in_scope(item) -> bool:
    return item.originalname in EIGSH
