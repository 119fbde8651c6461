"""The optional lineax integration: DiaLinearOperator with lineax's solvers and queries."""

import subprocess
import sys

import jax
import jax.numpy as jnp
import lineax as lx  # in the test extra: these tests run in every `make test`
import numpy as np
import pytest
import scipy.sparse.linalg as spla

import jaxdia

from .helpers import convection_diffusion, dense_f64, helmholtz, poisson, rhs

TOL = {"rtol": 1e-11, "atol": 1e-11}


def operator(S, tags=()):
    return jaxdia.DiaLinearOperator(jaxdia.DiaMatrix.from_scipy(S), tags)


@pytest.mark.parametrize(
    "S, tags, solver",
    [
        (poisson(8, 2), lx.positive_semidefinite_tag, lx.CG(**TOL)),
        (poisson(8, 2), (), lx.GMRES(**TOL, restart=64)),
        (convection_diffusion(8), (), lx.BiCGStab(**TOL)),
        (convection_diffusion(8), (), lx.GMRES(**TOL, restart=64)),
        (helmholtz(8), (), lx.GMRES(**TOL, restart=64)),
        (poisson(40, 1), (), lx.Tridiagonal()),
        (poisson(40, 1), (), lx.AutoLinearSolver(well_posed=True)),
        (convection_diffusion(6), (), lx.AutoLinearSolver(well_posed=True)),
    ],
)
def test_linear_solve_matches_spsolve(S, tags, solver):
    A = operator(S, tags)
    b = rhs(S.shape[0], S.dtype)
    solution = jax.jit(lambda A, b: lx.linear_solve(A, b, solver).value)(A, b)
    np.testing.assert_allclose(solution, spla.spsolve(S.tocsc(), b), rtol=1e-8, atol=1e-10)


def test_structure_queries_match_dense_operator():
    """Every lineax query answers as it does for the same matrix as a dense operator."""
    rng = np.random.default_rng(0)
    for offsets, shape in [((-1, 0, 2), (6, 6)), ((-2, 1), (4, 6)), ((0, 1), (5, 3))]:
        data = rng.standard_normal((len(offsets), shape[1])) + 1j * rng.standard_normal(
            (len(offsets), shape[1])
        )
        A = jaxdia.DiaMatrix(data, offsets, shape)
        ours, dense = jaxdia.DiaLinearOperator(A), lx.MatrixLinearOperator(A.todense())
        v = jnp.asarray(rhs(shape[1], np.complex128))
        np.testing.assert_allclose(ours.mv(v), dense.mv(v), **TOL)
        np.testing.assert_allclose(ours.as_matrix(), dense.as_matrix())
        np.testing.assert_allclose(ours.T.as_matrix(), dense.T.as_matrix())
        np.testing.assert_allclose(lx.conj(ours).as_matrix(), lx.conj(dense).as_matrix())
        np.testing.assert_allclose(lx.diagonal(ours), lx.diagonal(dense))
        assert ours.in_structure() == dense.in_structure()
        assert ours.out_structure() == dense.out_structure()
        assert lx.linearise(ours) is ours and lx.materialise(ours) is ours
        if shape[0] == shape[1]:
            for got, expected in zip(lx.tridiagonal(ours), lx.tridiagonal(dense)):
                np.testing.assert_allclose(got, expected)


@pytest.mark.parametrize(
    "offsets, expected",
    [
        ((0,), {"diagonal", "tridiagonal", "lower", "upper", "symmetric"}),
        ((), {"diagonal", "tridiagonal", "lower", "upper", "symmetric"}),
        ((-1, 0, 1), {"tridiagonal"}),
        ((-2, 0), {"lower"}),
        ((0, 3), {"upper"}),
        ((-3, 1), set()),
    ],
)
def test_structure_from_offsets(offsets, expected):
    A = jaxdia.DiaMatrix(jnp.ones((len(offsets), 5)), offsets, (5, 5))
    op = jaxdia.DiaLinearOperator(A)
    found = {
        "diagonal": lx.is_diagonal(op),
        "tridiagonal": lx.is_tridiagonal(op),
        "lower": lx.is_lower_triangular(op),
        "upper": lx.is_upper_triangular(op),
        "symmetric": lx.is_symmetric(op),
    }
    assert {name for name, value in found.items() if value} == expected
    for query in (lx.is_positive_semidefinite, lx.is_negative_semidefinite, lx.has_unit_diagonal):
        assert query(op) is False
    # A rectangular matrix claims no structure.
    wide = jaxdia.DiaLinearOperator(jaxdia.DiaMatrix(jnp.ones((len(offsets), 6)), offsets, (5, 6)))
    assert not any(q(wide) for q in (lx.is_diagonal, lx.is_tridiagonal, lx.is_lower_triangular))


def test_tags():
    A = jaxdia.DiaMatrix.from_scipy(poisson(4, 1))
    psd = jaxdia.DiaLinearOperator(A, lx.positive_semidefinite_tag)
    assert lx.is_positive_semidefinite(psd) and lx.is_symmetric(psd) and psd.T is psd
    nsd = jaxdia.DiaLinearOperator(-A, [lx.negative_semidefinite_tag])
    assert lx.is_negative_semidefinite(nsd) and lx.is_symmetric(nsd)
    hermitian = jaxdia.DiaLinearOperator(A.astype(jnp.complex128), lx.positive_semidefinite_tag)
    assert not lx.is_symmetric(hermitian)  # Hermitian, not symmetric
    unit = jaxdia.DiaLinearOperator(jaxdia.eye(4), lx.unit_diagonal_tag)
    assert lx.has_unit_diagonal(unit)
    lower = jaxdia.DiaLinearOperator(A, lx.lower_triangular_tag)
    assert lx.is_upper_triangular(lower.T) and lx.is_lower_triangular(lower)
    assert lx.is_diagonal(jaxdia.DiaLinearOperator(A, lx.diagonal_tag))


def test_diagonal_and_triangular_solvers():
    A = jaxdia.diags([[2.0, 3.0, 4.0, 5.0]], offsets=[0], dtype=jnp.float64)
    x = lx.linear_solve(jaxdia.DiaLinearOperator(A), jnp.ones(4), lx.Diagonal()).value
    np.testing.assert_allclose(x, [1 / 2, 1 / 3, 1 / 4, 1 / 5])
    L = jaxdia.diags([[2.0] * 4, [1.0] * 2], offsets=[0, -2], dtype=jnp.float64)
    x = lx.linear_solve(jaxdia.DiaLinearOperator(L), jnp.ones(4), lx.Triangular()).value
    np.testing.assert_allclose(x, np.linalg.solve(dense_f64(L), np.ones(4)), **TOL)


@pytest.mark.parametrize(
    "S, tags, solver",
    [
        (poisson(4, 2), lx.positive_semidefinite_tag, lx.CG(**TOL)),
        (convection_diffusion(4), (), lx.GMRES(**TOL)),
        (helmholtz(4), (), lx.BiCGStab(**TOL)),
        (poisson(12, 1), (), lx.Tridiagonal()),
    ],
)
def test_gradients_match_dense(S, tags, solver):
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = jnp.asarray(rhs(S.shape[0], S.dtype, seed=4))
    weights = jnp.asarray(rhs(S.shape[0], seed=5))

    def loss(solve):
        def f(data, b):
            return jnp.sum(weights * jnp.abs(solve(data, b)) ** 2)

        return jax.grad(f, argnums=(0, 1))(A.data, b)

    def with_lineax(data, b):
        op = jaxdia.DiaLinearOperator(jaxdia.DiaMatrix(data, A.offsets, A.shape), tags)
        return lx.linear_solve(op, b, solver).value

    def dense(data, b):
        return jnp.linalg.solve(jaxdia.DiaMatrix(data, A.offsets, A.shape).todense(), b)

    for got, expected in zip(loss(with_lineax), loss(dense)):
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-9 * np.abs(expected).max())


def test_vmap_over_operators():
    S = convection_diffusion(5)
    A = jaxdia.DiaMatrix.from_scipy(S)
    scales = jnp.array([1.0, 2.0, 4.0])
    b = jnp.asarray(rhs(S.shape[0]))

    def solve(scale):
        op = jaxdia.DiaLinearOperator(jaxdia.DiaMatrix(scale * A.data, A.offsets, A.shape))
        return lx.linear_solve(op, b, lx.GMRES(**TOL)).value

    expected = spla.spsolve(S.tocsc(), np.asarray(b))
    np.testing.assert_allclose(jax.vmap(solve)(scales), expected / scales[:, None], rtol=1e-8)


def test_errors():
    with pytest.raises(TypeError, match="matrix must be a jaxdia.DiaMatrix, got ndarray"):
        jaxdia.DiaLinearOperator(np.eye(3))
    batched = jaxdia.DiaMatrix(jnp.ones((2, 1, 3)), (0,), (3, 3))
    with pytest.raises(ValueError, match=r"batch shape \(2,\).*vmap"):
        jaxdia.DiaLinearOperator(batched)
    with pytest.raises(ValueError, match="Symmetric"):
        jaxdia.DiaLinearOperator(jaxdia.eye(2, 3), lx.symmetric_tag)


def run_python(code):
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


def test_lineax_is_imported_lazily():
    result = run_python(
        "import sys, jaxdia\n"
        "assert 'lineax' not in sys.modules and 'jaxdia._lineax' not in sys.modules\n"
        "jaxdia.DiaLinearOperator\n"
        "assert 'lineax' in sys.modules\n"
    )
    assert result.returncode == 0, result.stderr


def test_missing_lineax_message():
    result = run_python(
        "import sys\nsys.modules['lineax'] = None\nimport jaxdia\njaxdia.jacobi\n"
        "jaxdia.DiaLinearOperator\n"
    )
    assert result.returncode != 0
    assert "pip install 'jaxdia[lineax]'" in result.stderr
