"""Banded least squares: ``jaxdia.lstsq_banded`` and ``jaxdia.BandedSolver`` on tall
operators (lineax, optimistix), against NumPy's and SciPy's least squares."""

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
import pytest
import scipy.optimize
import scipy.sparse as sp

import jaxdia
from jaxdia._geometry import in_bounds
from jaxdia._linalg import lstsq

from .helpers import dense_f64, program_lines
from .test_dispatch import lapack_calls, loops_grow_with_n
from .test_lowering import lowered_text


def tall(m, n, offsets, dtype=np.float64, batch=(), seed=0):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((*batch, len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data.shape)
    if 0 in offsets:  # keep random square ones away from singular
        data[..., offsets.index(0), :] += 3.0
    return jaxdia.DiaMatrix(data.astype(dtype), offsets, (m, n))


def rhs(m, dtype=np.float64, shape=None, seed=1):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(shape or (m,))
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(b.shape)
    return b.astype(dtype)


def oracle(A, b):
    """``np.linalg.lstsq`` in double precision, matrix by matrix and column by column."""
    dense, b = dense_f64(A), np.asarray(b).astype(np.complex128)
    if b.ndim == 1:
        return np.linalg.lstsq(dense, b, rcond=None)[0]
    batch = np.broadcast_shapes(dense.shape[:-2], b.shape[:-2])
    dense = np.broadcast_to(dense, (*batch, *dense.shape[-2:]))
    b = np.broadcast_to(b, (*batch, *b.shape[-2:]))
    x = np.zeros((*batch, dense.shape[-1], b.shape[-1]), np.complex128)
    for index in np.ndindex(*batch):
        x[index] = np.linalg.lstsq(dense[index], b[index], rcond=None)[0]
    return x


def assert_solves(x, A, b, rtol):
    expected = oracle(A, b)
    assert x.shape == expected.shape
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(np.asarray(x).astype(np.complex128), expected, atol=rtol * scale)


SHAPES = [
    # (m, n, offsets)
    (1, 1, (0,)),
    (2, 1, (-1, 0)),
    (3, 2, (-1, 0, 1)),
    (3, 3, (-2, 0, 2)),
    (5, 3, (-10, -4, 0, 1, 7)),  # offsets beyond the matrix: a band wider than n
    (12, 12, (-1, 0, 1)),  # square
    (40, 25, (-15, -2, 0, 3)),
    (300, 40, (-260, -100, -30, 0, 2)),  # m much larger than n
]
TOLERANCES = {np.float64: 1e-10, np.complex128: 1e-10, np.float32: 2e-4, np.complex64: 2e-4}
#: Every shape in float64, and each in one other dtype, in turn.
CASES = [(*shape, np.float64) for shape in SHAPES] + [
    pytest.param(*shape, dtype, marks=() if i < 3 else pytest.mark.full)
    for i, (shape, dtype) in enumerate(
        zip(SHAPES[::-1], [np.complex128, np.float32, np.complex64] * len(SHAPES))
    )
]


@pytest.mark.parametrize("m, n, offsets, dtype", CASES)
def test_matches_numpy(m, n, offsets, dtype):
    A, b = tall(m, n, offsets, dtype), rhs(m, dtype)
    x = jaxdia.lstsq_banded(A, b)
    assert x.dtype == dtype
    assert_solves(x, A, b, TOLERANCES[dtype])


def difference_matrix(n, corner):
    """``(n + 2) x n``, offsets 0 and 1: first differences, whose null vector is
    ``ones(n)`` when ``corner`` (the last column's diagonal entry) is 0."""
    data = np.stack([-np.ones(n), np.ones(n)])
    data[0, -1] = corner
    return jaxdia.DiaMatrix(data, (0, 1), (n + 2, n))


def test_ill_conditioned_columns():
    # Columns scaled over 12 orders of magnitude: the column scaling removes it.
    # Column j of A * scales is A's times scales[j]: x * scales solves A's problem (which
    # the dense oracle solves accurately; it would not solve the scaled one componentwise).
    B = tall(60, 40, (-3, -1, 0, 2))
    scales = 10.0 ** np.linspace(-6, 6, 40)
    A = jaxdia.DiaMatrix(B.data * scales, B.offsets, B.shape)
    b = rhs(60)
    x = jaxdia.lstsq_banded(A, b)
    np.testing.assert_allclose(x * scales, oracle(B, b).real, rtol=1e-10, atol=1e-12)
    # A genuinely ill-conditioned matrix (kappa ~ 1e5 after scaling): a tolerance of
    # kappa^2 eps times the residual's share, as for any least-squares method.
    A = difference_matrix(30, 1e-5)
    b = rhs(A.shape[0])
    x = jaxdia.lstsq_banded(A, b)
    kappa = np.linalg.cond(dense_f64(A))
    assert 1e5 < kappa < 1e7
    assert_solves(x, A, b, 10 * kappa**2 * np.finfo(np.float64).eps)


def test_float32_ill_conditioned_is_reported_or_accurate():
    for tilt in (1e-1, 1e-2, 1e-3):
        A = jaxdia.diags([1.0, -1.0 + tilt], offsets=[0, -1], shape=(22, 20), dtype=np.float32)
        b = rhs(22, np.float32)
        kappa = np.linalg.cond(dense_f64(A))
        try:
            x = jaxdia.lstsq_banded(A, b)
        except np.linalg.LinAlgError:
            assert kappa**2 * np.finfo(np.float32).eps > 1e-3  # refused only when hard
            continue
        expected = oracle(A, b).real
        error = np.max(np.abs(x - expected)) / np.max(np.abs(expected))
        assert error < 10 * kappa * np.finfo(np.float32).eps * max(1.0, kappa * 0.1)


def test_batches_broadcast():
    A = tall(9, 5, (-4, -1, 0, 1), batch=(2, 3))
    b = rhs(9)
    assert_solves(jaxdia.lstsq_banded(A, b[None, :, None]), A, b[None, :, None], 1e-10)
    B = rhs(9, shape=(3, 9, 2))
    x = jaxdia.lstsq_banded(A, B)
    assert x.shape == (2, 3, 5, 2)
    assert_solves(x, A, B, 1e-10)
    one = tall(9, 5, (-4, -1, 0, 1))
    assert_solves(jaxdia.lstsq_banded(one, B), one, B, 1e-10)


def test_jit_and_vmap():
    A = tall(20, 12, (-8, -1, 0, 2), batch=(4,))
    B = rhs(20, shape=(4, 20))
    solve = jax.jit(jaxdia.lstsq_banded)
    x = jax.vmap(solve)(A, B)
    for i in range(4):
        one = jaxdia.DiaMatrix(A.data[i], A.offsets, A.shape)
        assert_solves(x[i], one, B[i], 1e-10)
    x = jax.vmap(jaxdia.lstsq_banded, in_axes=(None, 0))(
        jaxdia.DiaMatrix(A.data[0], A.offsets, A.shape), B
    )
    assert_solves(x[1], jaxdia.DiaMatrix(A.data[0], A.offsets, A.shape), B[1], 1e-10)


@pytest.mark.parametrize("dtype", [np.complex128, pytest.param(np.float64, marks=pytest.mark.full)])
def test_gradients_match_dense_lstsq(dtype):
    A, b = tall(14, 9, (-5, -1, 0, 2), dtype), rhs(14, dtype)
    mask = np.asarray(in_bounds(A.offsets, A.shape))
    weights = jnp.asarray(rhs(9, dtype, seed=5))

    def loss(solve):
        def f(data, b):
            x = solve(jaxdia.DiaMatrix(data, A.offsets, A.shape), b)
            return jnp.sum(jnp.abs(x * weights) ** 2 + jnp.real(x))

        return f

    banded = loss(jaxdia.lstsq_banded)
    dense = loss(lambda M, b: jnp.linalg.lstsq(M.todense(), b)[0])
    tangent = jnp.asarray(rhs(A.data.size, dtype, seed=7).reshape(A.data.shape)) * mask

    def derivatives(loss):
        """Reverse mode in A.data and b, and forward mode along (tangent, b)."""

        def run(data, b):
            grads = jax.grad(loss, argnums=(0, 1))(data, b)
            return grads[0] * mask, grads[1], jax.jvp(loss, (data, b), (tangent, b))[1]

        return jax.jit(run)(A.data, b)

    for g, e in zip(derivatives(banded), derivatives(dense)):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("case", ["zero column", "dependent", "nearly dependent", "nan"])
def test_rank_deficiency_is_reported(case):
    if case == "dependent":
        A = difference_matrix(8, 0.0)
    elif case == "nearly dependent":
        A = difference_matrix(8, 1e-11)  # kappa ~ 1e12: kappa^2 eps far above 1
    else:
        data = np.asarray(tall(12, 8, (-2, 0, 1)).data).copy()
        if case == "zero column":
            data[:, 3] = 0.0
        else:
            data[1, 2] = np.nan
        A = jaxdia.DiaMatrix(data, (-2, 0, 1), (12, 8))
    b = rhs(A.shape[0])
    message = "holds a NaN" if case == "nan" else "is rank deficient"
    with pytest.raises(np.linalg.LinAlgError, match=f"lstsq_banded: A {message}"):
        jaxdia.lstsq_banded(A, b)
    x = jax.jit(jaxdia.lstsq_banded)(A, b)
    assert np.all(np.isnan(x))
    # A well-conditioned neighbour is solved.
    if case == "nearly dependent":
        A = difference_matrix(8, 0.5)
        assert_solves(jaxdia.lstsq_banded(A, b), A, b, 1e-10)


@pytest.mark.parametrize(("shape", "offsets"), [((1, 1), (-5, -3)), ((5, 2), ())])
def test_no_stored_diagonal_is_rank_deficient(shape, offsets):
    """Offsets all outside the matrix (or none): A is zero, so rank deficient. Reading which
    slots hold nonzeros reshaped a size-0 array with -1 (NumPy's ValueError)."""
    data = jnp.ones((len(offsets), shape[1]), jnp.float32)
    A = jaxdia.DiaMatrix(data, offsets, shape)
    for b in (rhs(shape[0]).astype(np.float32), rhs(shape[0], shape=(shape[0], 2))):
        with pytest.raises(np.linalg.LinAlgError, match="lstsq_banded: A is rank deficient"):
            jaxdia.lstsq_banded(A, b)
    assert np.all(np.isnan(jax.jit(jaxdia.lstsq_banded)(A, rhs(shape[0]))))


def test_rank_deficient_batch_member_is_named():
    A = tall(10, 6, (-3, 0, 1), batch=(3,))
    data = np.asarray(A.data).copy()
    data[1, :, 4] = 0.0
    A = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    with pytest.raises(np.linalg.LinAlgError, match=r"matrix \(1,\) of the batch"):
        jaxdia.lstsq_banded(A, rhs(10))
    x = jax.jit(jaxdia.lstsq_banded)(A, rhs(10, shape=(3, 10, 1)))
    x = np.asarray(x)
    assert np.all(np.isnan(x[1])) and np.all(np.isfinite(x[[0, 2]]))


def test_errors():
    with pytest.raises(ValueError, match=r"at least as many rows as columns.*\(3, 5\)"):
        jaxdia.lstsq_banded(tall(3, 5, (0, 1)), np.ones(3))
    with pytest.raises(ValueError, match=r"b must have shape \(6,\) or \(\.\.\., 6, k\)"):
        jaxdia.lstsq_banded(tall(6, 4, (-1, 0)), np.ones(4))
    with pytest.raises(TypeError, match="lstsq_banded: A"):
        jaxdia.lstsq_banded(np.ones((6, 4)), np.ones(6))
    with pytest.raises(ValueError, match="lstsq_banded: A and b"):
        jaxdia.lstsq_banded(tall(6, 4, (-1, 0), batch=(2,)), np.ones((3, 6, 1)))


# -- where it runs: LAPACK's banded Cholesky on CPU, cyclic reduction on accelerators -------


def test_cpu_calls_lapack_cholesky():
    A, b = tall(200, 150, (-50, -1, 0, 2)), rhs(200)
    text = lowered_text(jaxdia.lstsq_banded, A, b, platform="cpu")
    assert lapack_calls(text) == {"pbtrf", "pbtrs"}


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_no_loop_over_rows_on_accelerators(platform, traced_as):
    traced_as(platform)

    def make_args(n):
        return tall(n + 8, n, (-8, -1, 0, 1)), jnp.ones(n + 8)

    fn = jaxdia.lstsq_banded
    text = lowered_text(fn, *make_args(128), platform=platform)
    assert not lapack_calls(text)
    assert not loops_grow_with_n(fn, make_args, platform, 128)


# -- lineax and optimistix ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float64, pytest.param(np.complex128, marks=pytest.mark.full)])
def test_banded_solver_on_tall_operator(dtype):
    A, b = tall(25, 16, (-9, -1, 0, 3), dtype), rhs(25, dtype)
    solver = jaxdia.BandedSolver()
    solution = lx.linear_solve(jaxdia.DiaLinearOperator(A), jnp.asarray(b), solver)
    assert_solves(solution.value, A, b, 1e-10)
    # Any tall operator, materialised from its offsets.
    vector = jax.ShapeDtypeStruct((16,), dtype)
    operator = lx.FunctionLinearOperator(lambda v: A @ v, vector)
    value = jax.jit(lambda b: lx.linear_solve(operator, b, jaxdia.BandedSolver(A.offsets)).value)
    assert_solves(value(jnp.asarray(b)), A, b, 1e-10)
    mask = np.asarray(in_bounds(A.offsets, A.shape))

    def loss(solve):
        def f(data, b):
            x = solve(jaxdia.DiaMatrix(data, A.offsets, A.shape), b)
            return jnp.sum(jnp.abs(x) ** 2)

        return f

    with_lineax = loss(
        lambda M, b: lx.linear_solve(jaxdia.DiaLinearOperator(M), b, jaxdia.BandedSolver()).value
    )
    dense = loss(lambda M, b: jnp.linalg.lstsq(M.todense(), b)[0])
    for argnum in (0, 1):
        got = jax.grad(with_lineax, argnums=argnum)(A.data, jnp.asarray(b))
        expected = jax.grad(dense, argnums=argnum)(A.data, jnp.asarray(b))
        if argnum == 0:
            got, expected = got * mask, expected * mask
        np.testing.assert_allclose(got, expected, rtol=1e-8, atol=1e-10)


def test_banded_solver_reports_rank_deficiency():
    data = np.ones((2, 6))
    data[:, 2] = 0.0
    A = jaxdia.DiaMatrix(data, (-1, 0), (7, 6))
    solution = lx.linear_solve(
        jaxdia.DiaLinearOperator(A), jnp.ones(7), jaxdia.BandedSolver(), throw=False
    )
    assert solution.result == lx.RESULTS.singular
    with pytest.raises(ValueError, match="needs a square operator, got 3 outputs for 4 inputs"):
        jaxdia.BandedSolver((0,)).init(lx.MatrixLinearOperator(jnp.ones((3, 4))), {})


def fun_broyden(x):
    """SciPy's ``least_squares`` example (its docs): the Broyden tridiagonal function."""
    f = (3 - x) * x + 1
    f = f.at[1:].add(-x[:-1])
    return f.at[:-1].add(-2 * x[1:])


def test_broyden_tridiagonal_matches_scipy():
    n = 200
    sparsity = sp.diags([1, 1, 1], [-1, 0, 1], shape=(n, n), dtype=float)
    expected = scipy.optimize.least_squares(
        lambda x: np.asarray(fun_broyden(jnp.asarray(x))),
        -np.ones(n),
        jac_sparsity=sparsity,
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    result = optx.least_squares(
        lambda x, _: fun_broyden(x),
        optx.GaussNewton(rtol=1e-10, atol=1e-12, linear_solver=jaxdia.BandedSolver((-1, 0, 1))),
        -jnp.ones(n),
        max_steps=100,
    )
    np.testing.assert_allclose(result.value, expected.x, atol=1e-8)


def whittaker(n, lam=3.0, seed=0):
    """A nonlinear smoothing fit, overdetermined: ``exp(y) ~ obs`` (``n`` residuals) and a
    second-difference penalty (``n - 2`` more): ``2 n - 2`` residuals, ``n`` unknowns,
    offsets ``0`` and ``-n .. -n + 2``."""
    t = np.linspace(0, 1, n)
    obs = np.exp(np.sin(6 * t)) + 0.05 * np.random.default_rng(seed).standard_normal(n)

    def fun(y, _=None):
        penalty = jnp.sqrt(lam) * (y[:-2] - 2 * y[1:-1] + y[2:])
        return jnp.concatenate([jnp.exp(y) - obs, penalty])

    sparsity = sp.vstack([sp.eye(n), sp.diags([1.0, 1.0, 1.0], [0, 1, 2], shape=(n - 2, n))])
    mask = np.ones((4, n), bool)  # the penalty's diagonals start in the fit's rows
    mask[2, 0] = False
    mask[3, :2] = False
    return fun, sparsity, (0, -n, -n + 1, -n + 2), mask


@pytest.mark.parametrize(
    "solver", [optx.LevenbergMarquardt, pytest.param(optx.GaussNewton, marks=pytest.mark.full)]
)
def test_overdetermined_fit_matches_scipy(solver):
    n = 80
    fun, sparsity, offsets, mask = whittaker(n)
    expected = scipy.optimize.least_squares(
        lambda y: np.asarray(fun(jnp.asarray(y))),
        np.zeros(n),
        jac_sparsity=sparsity,
        xtol=1e-15,
        ftol=1e-15,
        gtol=1e-15,
    )
    cost = 0.5 * np.sum(expected.fun**2)
    result = optx.least_squares(
        fun,
        solver(rtol=1e-12, atol=1e-12, linear_solver=jaxdia.BandedSolver(offsets, mask=mask)),
        jnp.zeros(n),
        max_steps=200,
    )
    assert result.result == optx.RESULTS.successful
    # SciPy's trf stops on its own tolerances (its lsmr steps are inexact): the same point
    # to 1e-6, and a cost no larger.
    np.testing.assert_allclose(result.value, expected.x, atol=1e-6)
    assert 0.5 * float(jnp.sum(fun(result.value) ** 2)) <= cost * (1 + 1e-10)


def test_stacked_blocks_keep_the_normal_band_narrow():
    """A fit stacked over its penalty: the penalty's diagonals start in the fit's rows.
    Their structural zeros (read from a concrete A's values, or from ``mask`` under
    ``jit``) keep ``A^H A`` pentadiagonal instead of as wide as the matrix."""
    n = 40
    _, _, offsets, mask = whittaker(n)
    rng = np.random.default_rng(3)
    data = rng.standard_normal((4, n)) * mask
    A = jaxdia.DiaMatrix(data, offsets, (2 * n - 2, n))
    mask = mask[np.argsort(offsets)]  # rows in the order of A.offsets (sorted)
    b = rhs(2 * n - 2)
    expected = oracle(A, b)
    for x in (
        jaxdia.lstsq_banded(A, b),
        jax.jit(lambda A, b: jaxdia.lstsq_banded(A, b, mask=mask))(A, b),
        jax.jit(jaxdia.lstsq_banded)(A, b),  # no mask: the wide band, the same answer
    ):
        np.testing.assert_allclose(x, expected.real, rtol=1e-10, atol=1e-12)
    narrow = lstsq.factor_least_squares(A, mask).factor
    wide = lstsq.factor_least_squares(A).factor
    assert narrow.bandwidth == 2 and wide.bandwidth == n - 1
    with pytest.raises(
        ValueError, match=r"mask must be a boolean array of shape \(len\(A.offsets\)"
    ):
        jaxdia.lstsq_banded(A, b, mask=mask[:2])


def drifting(count, n=120):
    """A tall banded problem whose rows each see 3 neighbouring unknowns: ``m = n + count
    - 3`` observations spread over ``n`` unknowns, so that in DIA storage the band drifts
    across ``count`` diagonals (or a few more)."""
    m = n + count - 3
    rows = np.arange(m)
    first = (rows * (n - 3)) // (m - 1)
    dense = np.zeros((m, n))
    rng = np.random.default_rng(count)
    for t in range(3):
        dense[rows, first + t] = rng.standard_normal(m) + 2
    return jaxdia.DiaMatrix.from_dense(dense), rhs(m)


def lineax_lstsq(A, b):
    return lx.linear_solve(jaxdia.DiaLinearOperator(A), b, jaxdia.BandedSolver()).value


def test_least_squares_program_does_not_grow_with_pairs():
    """The normal equations are one loop over A's diagonals (their program is the same
    for 13 and 53 diagonals: unrolled, it grew with the pairs, 111,740 lines and minutes
    of compilation at 103); the whole lineax solve grows by the products' unrolled terms
    below their own thresholds, not by pairs, and not at all beyond them."""
    pairs = lambda A: lstsq.normal_pairs(A.offsets, A.shape, np.ones((A.n_diags, A.shape[1]), bool))  # noqa: E731
    normal = {}
    for count in (13, 53):
        A, _ = drifting(count)
        normal[count] = program_lines(lambda A: lstsq.normal_upper(A._parts, pairs(A)).data, A)
    assert abs(normal[13][0] - normal[53][0]) <= 4 and abs(normal[13][1] - normal[53][1]) <= 4
    lowered = {}
    for count in (5, 53, 70, 103):
        A, b = drifting(count)
        lowered[count] = program_lines(lineax_lstsq, A, jnp.asarray(b), compiled=count > 53)
    assert lowered[53][0] - lowered[5][0] <= 60 * (53 - 5)  # unrolled pairs: ~10 lines each
    assert abs(lowered[70][0] - lowered[103][0]) <= 40
    assert abs(lowered[70][1] - lowered[103][1]) <= 40


def test_lineax_least_squares_with_a_drifting_band_matches_numpy():
    """A band drifting across 103 diagonals (more than 17 minutes of compilation before)."""
    A, b = drifting(103)
    x = jax.jit(lineax_lstsq)(A, jnp.asarray(b))
    assert_solves(x, A, b, 1e-10)
