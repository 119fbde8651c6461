"""The solve side under hostile input (issue 32), each case against SciPy's behaviour: a
batch of BiCGStab systems that stop half way, right-hand sides whose norm is not finite,
float64 operands with x64 off, mixed precisions in ``solve_banded``, singular shifts and
NaN entries in ``eigsh`` and the factorizations, eager Chebyshev compiles; then a
Hypothesis sweep over the solve side's inputs."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sl
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings, strategies as st

import jaxdia
from jaxdia._linalg import krylov
from jaxdia._linalg.factor import lu_unchecked
from jaxdia._matrix import DiaMatrix
from jaxdia._parts import DiaParts

from .helpers import Compiles, dense_f64, examples


def tridiagonal(n, lower, diagonal, upper, dtype=np.float64):
    return jaxdia.diags([lower, diagonal, upper], offsets=[-1, 0, 1], shape=(n, n), dtype=dtype)


# -- BiCGStab: a batch where one system is done half way ---------------------------------------


def half_step_batch(n=16):
    """Member 0 is 2 I, which BiCGStab solves at the first half step (s = 0); member 1
    a nonsymmetric tridiagonal matrix that needs several iterations."""
    rng = np.random.default_rng(0)
    data = np.zeros((2, 3, n))
    data[0, 1] = 2.0
    data[1] = 0.3 * rng.standard_normal((3, n)) + np.array([[0.0], [3.0], [0.0]])
    return jaxdia.DiaMatrix(data, (-1, 0, 1), (n, n)), rng.standard_normal((2, n))


def scipy_bicgstab(A, b, **options):
    """SciPy's BiCGStab on each matrix of a batch: solutions and infos."""
    results = [
        spla.bicgstab(
            sp.dia_array((np.asarray(A.data[i]), A.offsets), shape=A.shape), b[i], **options
        )
        for i in range(len(b))
    ]
    return np.stack([x for x, _ in results]), [info for _, info in results]


@pytest.mark.parametrize("one_site", [False, True])
def test_bicgstab_batch_member_done_half_way_keeps_its_solution(one_site):
    A, b = half_step_batch()
    expected, infos = scipy_bicgstab(A, b, rtol=1e-10, maxiter=40)
    assert infos == [0, 0]
    threshold = krylov.threshold(jnp.asarray(b), 1e-10, 0.0)
    x, iterations = jax.jit(
        lambda A, b: krylov.bicgstab_iterations(
            krylov.vector_product(A),
            b,
            None,
            lambda v: v,
            threshold,
            np.int32(40),
            one_site=one_site,
        )
    )(A, jnp.asarray(b))
    np.testing.assert_allclose(x, expected, rtol=1e-8, atol=1e-10)
    assert int(iterations[0]) == 1 and int(iterations[1]) <= 40


def test_bicgstab_public_batch_half_step_and_maxiter():
    A, b = half_step_batch()
    expected, _ = scipy_bicgstab(A, b, rtol=1e-10, maxiter=40)
    x, info = jaxdia.bicgstab(A, b, rtol=1e-10, maxiter=40)
    np.testing.assert_allclose(x, expected, rtol=1e-8, atol=1e-10)
    assert info.converged.tolist() == [True, True] and info.iterations[0] == 1
    # The count never exceeds maxiter, however the systems stop.
    _, info = jaxdia.bicgstab(A, b, rtol=1e-14, maxiter=3)
    assert int(info.iterations.max()) <= 3


def test_bicgstab_with_a_large_preconditioner_runs_the_one_site_loop():
    A, b = half_step_batch()
    b = jnp.asarray(b)
    assert not krylov.large_program(jaxdia.jacobi(A), b)  # (multigrid's: test_complex_multigrid)

    def identity_of_many_operations(v):  # more than LARGE_PROGRAM operations, M = I
        for _ in range(krylov.LARGE_PROGRAM + 1):
            v = v * 1.0
        return v

    M = jax.tree_util.Partial(identity_of_many_operations)
    assert krylov.large_program(M, b)
    expected, _ = scipy_bicgstab(A, np.asarray(b), rtol=1e-10, maxiter=40)
    x, info = jaxdia.bicgstab(A, b, M=M, rtol=1e-10, maxiter=40)
    np.testing.assert_allclose(x, expected, rtol=1e-8, atol=1e-10)
    assert info.converged.tolist() == [True, True] and info.iterations[0] == 1


# -- |b| not finite in the working precision -----------------------------------------------------


@pytest.mark.parametrize(
    "b, dtype",
    [
        (np.r_[np.inf, np.ones(11)], np.float64),
        (np.full(12, 1e19), np.float32),  # |b|^2 overflows float32, b does not
        (np.r_[np.nan, np.ones(11)], np.float64),
    ],
    ids=["inf", "float32-1e19", "nan"],
)
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_no_convergence_is_reported_for_a_non_finite_norm_of_b(b, dtype, method):
    A = tridiagonal(12, -1.0, 2.5, -1.0, dtype)
    b = b.astype(dtype)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)  # SciPy's overflowing norms
        _, scipy_info = getattr(spla, method)(A.to_scipy(), b, rtol=1e-5, maxiter=20)
    assert scipy_info != 0  # SciPy reports non-convergence
    _, info = getattr(jaxdia, method)(A, b, rtol=1e-5, maxiter=20)
    assert not bool(info.converged)


# -- x64 off: SciPy's float64 solvers on a float32 DiaMatrix -------------------------------------


@pytest.mark.parametrize("solver", [spla.cg, spla.bicgstab, spla.gmres, spla.minres])
def test_scipy_float64_solvers_reach_their_tolerance_without_x64(solver):
    n = 40
    b = np.random.default_rng(1).standard_normal(n)
    with jax.enable_x64(False):
        A = tridiagonal(n, -1.0, 2.5, -1.0, np.float32)
        assert A.dtype == np.float32
        y = A.matvec(b)
        assert y.dtype == np.float64  # as SciPy's float32 dia_array times a float64 b
        np.testing.assert_array_equal(y, A.to_scipy() @ b)
        x, info = solver(A, b, rtol=1e-10, maxiter=500)
        x_ref, info_ref = solver(A.to_scipy(), b, rtol=1e-10, maxiter=500)
        assert info == info_ref == 0
        np.testing.assert_allclose(x, x_ref, rtol=1e-12, atol=1e-14)
        assert A.rmatvec(b).dtype == A.matmat(b[:, None]).dtype == A(b).dtype == np.float64
        np.testing.assert_array_equal(A.rmatmat(b[:, None])[:, 0], A.to_scipy().T @ b)
        assert A.matvec(b.astype(np.float32)).dtype == np.float32  # single stays single


# -- solve_banded promotes as jnp.linalg.solve and SciPy ------------------------------------------


@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-2, -1, 0, 1, 2)], ids=["tridiagonal", "band"])
def test_solve_banded_with_float32_A_and_float64_b_solves_in_float64(offsets):
    n = 30
    rng = np.random.default_rng(2)
    data = rng.standard_normal((len(offsets), n)).astype(np.float32)
    data[offsets.index(0)] += 5
    A = jaxdia.DiaMatrix(data, offsets, (n, n))
    b = rng.standard_normal(n)
    dense = np.asarray(A.todense(), np.float64)
    expected = np.linalg.solve(dense, b)
    u = max(offsets)
    ab = np.zeros((len(offsets), n), np.float32)
    for k, offset in enumerate(sorted(offsets, reverse=True)):
        ab[k] = data[offsets.index(offset)]
    scipy_x = sl.solve_banded((-min(offsets), u), ab, b)
    assert scipy_x.dtype == np.float64
    for x in (jaxdia.solve_banded(A, b), jnp.linalg.solve(jnp.asarray(dense, np.float32), b)):
        assert x.dtype == np.float64
        np.testing.assert_allclose(x, expected, rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(scipy_x, expected, rtol=1e-12, atol=1e-13)


# -- NaN and inf entries in the factorizations -----------------------------------------------------


def pentadiagonal(n, bad, where=(0, 7)):
    """A diagonally dominant pentadiagonal matrix with ``bad`` in slot ``where`` of data
    (default: offset -2, column 7, i.e. A[9, 7], in the lower triangle)."""
    data = np.ones((5, n))
    data[2] = 6.0
    data[where] = bad
    return jaxdia.DiaMatrix(data, (-2, -1, 0, 1, 2), (n, n))


@pytest.mark.parametrize("n", [10, 40])  # the scan below 16 rows, LAPACK above
def test_factorizations_refuse_non_finite_entries_as_scipy(n):
    for bad in (np.nan, np.inf):
        A = pentadiagonal(n, bad)
        with pytest.raises(ValueError, match="must not contain infs or NaNs"):
            sl.lu_factor(A.toarray())  # SciPy's check_finite
        for function in (jaxdia.lu_factor, jaxdia.factorized):
            with pytest.raises(ValueError, match=rf"infs or NaNs.*A\[9, 7\] = {bad}"):
                function(A)
        with pytest.raises(ValueError, match=r"A\[9, 7\]"):
            jaxdia.cho_factor(A, lower=True)
    assert bool(jaxdia.cho_factor(A).ok)  # the upper triangle, the one it reads, is finite


def test_factorizations_report_non_finite_entries_under_jit():
    A = pentadiagonal(40, np.nan)
    with pytest.raises(ValueError, match=r"solve_banded: A must not contain infs or NaNs"):
        jaxdia.solve_banded(A, np.ones(40))
    lu = jax.jit(jaxdia.lu_factor)(A)
    assert int(lu.info) == -1 and not bool(lu.ok)  # LAPACK's own info would be 0
    assert np.isnan(np.asarray(lu.solve(jnp.ones(40)))).all()
    assert np.isnan(np.asarray(jax.jit(jaxdia.solve_banded)(A, jnp.ones(40)))).all()


def test_factorization_names_the_batch_member_with_the_non_finite_entry():
    data = np.ones((2, 3, 8))
    data[:, 1] = 4.0
    data[1, 2, 5] = np.nan  # offset 1, column 5: A[4, 5] of matrix 1
    A = jaxdia.DiaMatrix(data, (-1, 0, 1), (8, 8))
    with pytest.raises(ValueError, match=r"A\[4, 5\] = nan \(matrix \(1,\) of the batch\)"):
        jaxdia.lu_factor(A)


# -- eigsh: a singular shift or NaN entries fail at once -----------------------------------------


@pytest.mark.parametrize(
    "A, sigma",
    [
        (tridiagonal(201, -1.0, 2.0, -1.0), 2.0),  # n odd: 2 is an eigenvalue
        (jaxdia.diags([np.arange(200.0)], offsets=[0]).with_offsets([-2, 0, 2]), 7.0),
    ],
    ids=["tridiagonal", "banded"],
)
def test_eigsh_singular_shift_raises_as_scipy(A, sigma):
    with pytest.raises(RuntimeError, match="exactly singular"):
        spla.eigsh(A.to_scipy(), k=3, sigma=sigma)
    with pytest.raises(np.linalg.LinAlgError, match="A - sigma I is exactly singular"):
        jaxdia.eigsh(A, k=3, sigma=sigma, return_info=True)
    # The same compiled solve under jit, where nothing can raise: it stopped after one
    # restart, not maxiter (10 n) of them.
    w, _, info = jax.jit(lambda A: jaxdia.eigsh(A, k=3, sigma=sigma, return_info=True))(A)
    assert int(info.iterations) == 1 and not bool(info.converged)
    assert not np.isfinite(np.asarray(w)).all()


def test_eigsh_nan_entries_fail_at_once():
    A = tridiagonal(201, -1.0, 2.0, -1.0)
    nan = DiaMatrix._wrap(DiaParts(A.data.at[1, 50].set(np.nan), A.offsets, A.shape))
    with pytest.raises(ValueError, match=r"infs or NaNs, but A\[50, 50\] = nan"):
        jaxdia.eigsh(nan, k=3)
    # The compiled shift-invert loop of the test above on it (under jit, not checked):
    # one restart.
    solve = jax.jit(lambda A: jaxdia.eigsh(A, k=3, sigma=2.5, return_info=True))
    _, _, info = solve(nan)
    assert int(info.iterations) == 1 and not bool(info.converged)


# -- one compile per eager preconditioner ---------------------------------------------------------


def test_eager_preconditioners_compile_once():
    A = tridiagonal(64, -1.0, 2.0, -1.0)
    v = jnp.ones(64)
    chebyshev = jaxdia.chebyshev(A, 16)
    assert not krylov.large_program(chebyshev, v)  # BiCGStab applies it at two sites
    for M in (chebyshev, jaxdia.jacobi(A)):
        first = M(v)
        with Compiles() as compiles:
            for _ in range(3):
                np.testing.assert_array_equal(M(v), first)
        assert compiles.count == 0


def test_a_right_hand_side_of_another_dtype_compiles_no_other_solve():
    """``b`` (and ``x0``, and ``eigsh``'s ``v0``) are converted to the solution's dtype
    before the compiled call: after a float64 solve, float32, int32 and bfloat16
    right-hand sides of a float64 matrix compile nothing (each compiled a whole solver),
    with the same solutions."""
    A = tridiagonal(32, -1.0, 3.0, -1.2)
    b = np.random.default_rng(5).standard_normal(32)
    lu = jaxdia.lu_factor(A)
    solves = {
        "solve_banded": lambda b: jaxdia.solve_banded(A, b),
        "lu.solve": lambda b: lu.solve(b, trans=1),
        "cg": lambda b: jaxdia.cg(A + A.T, b, x0=np.zeros(32, np.float32))[0],
        "bicgstab": lambda b: jaxdia.bicgstab(A, b, rtol=1e-12)[0],
        "gmres": lambda b: jaxdia.gmres(A, b, rtol=1e-12)[0],
        "eigsh's start": lambda v0: jaxdia.eigsh(A + A.T, k=2, v0=v0)[0],
    }
    others = (b.astype(np.float32), np.round(4 * b).astype(np.int32), jnp.asarray(b, jnp.bfloat16))
    for name, solve in solves.items():
        exact = [solve(np.asarray(other, np.float64)) for other in others]
        with Compiles() as compiles:
            solutions = [solve(other) for other in others]
        # The eager conversion of the bfloat16 array: one small program, not a solver.
        assert compiles.count <= 1, name
        for x, expected in zip(solutions, exact):
            assert x.dtype == np.float64, name
            np.testing.assert_allclose(x, expected, rtol=1e-12, atol=1e-12)


# -- a sweep over the solve side's inputs ------------------------------------------------------

SWEEP_N = 8
SWEEP_OFFSETS = (-2, -1, 0, 1)  # a band: the LU factor path (tridiagonal ones: above)
MATRIX_KINDS = ("regular", "near-singular", "singular", "nan", "inf")
RHS_KINDS = ("regular", "inf", "huge")


@st.composite
def hostile_batches(draw):
    """A batch of 3 systems of one precision (float64, or float32 with x64 off), each
    matrix and right-hand side of a drawn kind."""
    precision = draw(st.sampled_from(["float64", "float32, x64 off"]))
    matrices = draw(st.lists(st.sampled_from(MATRIX_KINDS), min_size=3, max_size=3))
    rhs = draw(st.lists(st.sampled_from(RHS_KINDS), min_size=3, max_size=3))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    dtype = np.float64 if precision == "float64" else np.float32
    n = SWEEP_N
    data = 0.5 * rng.standard_normal((3, len(SWEEP_OFFSETS), n))
    data[:, SWEEP_OFFSETS.index(0)] += 4.0
    b = rng.standard_normal((3, n))
    for i, kind in enumerate(matrices):
        j = int(rng.integers(2, n - 1))  # a column every diagonal reaches
        if kind == "near-singular":
            data[i, :, j] *= 1e-5
        elif kind == "singular":
            data[i, :, j] = 0.0  # a zero column: an exactly zero pivot
        elif kind in ("nan", "inf"):
            data[i, int(rng.integers(len(SWEEP_OFFSETS))), j] = np.nan if kind == "nan" else np.inf
    for i, kind in enumerate(rhs):
        if kind == "inf":
            b[i, 0] = np.inf
        elif kind == "huge":
            b[i] = 1e19  # |b|^2 overflows float32 (not float64)
    return precision, matrices, rhs, data.astype(dtype), b.astype(dtype)


def scipy_lu_outcome(dense):
    """What SciPy's lu_factor does with one dense matrix: "non-finite" (ValueError),
    "singular" (its LinAlgWarning of an exactly zero pivot) or "ok"."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", sl.LinAlgWarning)
        try:
            sl.lu_factor(dense)
        except ValueError:
            return "non-finite"
        except sl.LinAlgWarning:
            return "singular"
    return "ok"


@settings(max_examples=examples(12))
@given(batch=hostile_batches())
def test_solve_side_sweep(batch):
    precision, matrices, rhs, data, b = batch
    with jax.enable_x64(precision != "float32, x64 off"):
        A = jaxdia.DiaMatrix(data, SWEEP_OFFSETS, (SWEEP_N, SWEEP_N))
        dense = dense_f64(A)
        eps = float(np.finfo(data.dtype).eps)
        # The factor, as under jit (no exception): info per member as SciPy decides.
        lu = lu_unchecked(A)
        info = np.asarray(lu.info)
        outcomes = [scipy_lu_outcome(dense[i]) for i in range(3)]
        for i, outcome in enumerate(outcomes):
            assert (info[i] == -1) == (outcome == "non-finite"), (i, info, outcomes)
            assert (info[i] > 0) == (outcome == "singular"), (i, info, outcomes)
        x = np.asarray(lu.solve(b[..., None]))[..., 0].astype(np.float64)
        for i in range(3):
            if info[i] != 0:
                assert np.isnan(x[i]).all()
            elif np.isfinite(b[i]).all():  # backward stable: a residual of rounding size
                scale = np.abs(dense[i]).max() * np.abs(x[i]).max() + np.abs(b[i]).max()
                assert np.abs(dense[i] @ x[i] - b[i]).max() <= 100 * SWEEP_N * eps * scale
        # Eagerly, the first refusal SciPy would make.
        if "non-finite" in outcomes:
            with pytest.raises(ValueError, match="infs or NaNs"):
                jaxdia.lu_factor(A)
        elif "singular" in outcomes:
            with pytest.raises(np.linalg.LinAlgError, match="exactly singular"):
                jaxdia.lu_factor(A)
        # The Krylov report: never converged on a non-finite system, a converged system's
        # residual is the true one and meets the tolerance, and a hostile neighbour in
        # the batch changes nothing for a regular system.
        rtol = 1e-4 if data.dtype == np.float32 else 1e-9
        # (cg's report is the same code, tested above.)
        solution, report = jaxdia.bicgstab(A, b, rtol=rtol, maxiter=30)
        solution = np.asarray(solution).astype(np.float64)
        for i in range(3):
            norm_b = np.linalg.norm(b[i].astype(np.float64))
            finite = np.isfinite(dense[i]).all() and np.isfinite(b[i]).all()
            assert int(report.iterations[i]) <= 30
            if not (finite and norm_b**2 < np.finfo(data.dtype).max):
                assert not bool(report.converged[i]), (i, report)
            if bool(report.converged[i]):
                true = np.linalg.norm(b[i] - dense[i] @ solution[i])
                assert true <= 1.01 * rtol * norm_b + 10 * eps * norm_b, (i, true)
            if matrices[i] == rhs[i] == "regular":
                assert bool(report.converged[i]), (i, report)
