"""Incomplete factorizations: jaxdia.ilu0 and jaxdia.ic0.

Oracles: ILU(0) is the unique pair of a unit lower ``L`` and an upper ``U`` on ``A``'s
diagonals whose product matches ``A`` there (checked densely, with NumPy); IC(0) the
lower ``L`` with a positive diagonal whose ``L L^H`` does; ``M(v)`` against a dense solve
with those factors. SciPy's ``spilu`` is no oracle: it drops by threshold and by an area
rule, not by pattern (``fill_factor=1, drop_tol=0`` drops some of ``A``'s own entries on
these patterns, larger fill factors keep fill), so it never returns ILU(0). Iteration
counts are checked on the convection-diffusion problems of benchmarks/README.md at
``N = 32``. Few distinct grids and offsets: each compiles its own programs.

Given a grid, the factors keep the slots of ``A``'s diagonals that couple grid neighbours
(a diagonal such as ``n2 - 1`` also holds pairs that wrap around a grid line); on grids
with axes of 1 to 3 points they are checked against the textbook (IKJ) loops on that
pattern, run densely with NumPy.
"""

import itertools
import math
import re

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import example, given, settings, strategies as st

import jaxdia
from jaxdia._kernels.ilu import wrapped_fill
from jaxdia._linalg.incomplete import _downwind

from .grids import stencil_matrix
from .helpers import dense_f64, examples
from .test_lowering import lowered_text

# -- problems and oracles ----------------------------------------------------------------------


def convection_diffusion(grid, eps, wind):
    """``-eps Laplacian(u) + wind . grad(u)`` on the unit square (cube), first-order upwind
    differences, Dirichlet boundaries: the problems of benchmarks/README.md."""
    dim = len(grid)
    center = np.zeros(grid)
    coefficients = {}
    for axis, (size, w) in enumerate(zip(grid, wind)):
        h = 1.0 / (size + 1)
        for step in (-1, 1):
            d = tuple(step if a == axis else 0 for a in range(dim))
            upwind = max(w, 0) if step == -1 else -min(w, 0)
            coefficients[d] = np.full(grid, -eps / h**2 - upwind / h)
        center = center + 2 * eps / h**2 + abs(w) / h
    coefficients[(0,) * dim] = center
    return sp.dia_array(stencil_matrix(grid, coefficients))


def random_stencil(grid, displacements, seed, dtype=np.float64, symmetric=False):
    """A random diagonally dominant stencil with the given neighbour displacements."""
    rng = np.random.default_rng(seed)
    complex_ = np.dtype(dtype).kind == "c"

    def values(shape):
        v = rng.uniform(-1, 0, shape)
        return v + 1j * rng.uniform(-0.5, 0.5, shape) if complex_ else v

    coefficients = {d: values(grid) for d in displacements}
    coefficients[(0,) * len(grid)] = np.full(grid, 2.0 + len(displacements))
    S = stencil_matrix(grid, coefficients).astype(dtype)
    if symmetric:
        S = ((S + S.conj().T) / 2).astype(dtype)
    return sp.dia_array(S)


def stars(dim):
    return [d for d in itertools.product((-1, 0, 1), repeat=dim) if sum(map(abs, d)) == 1]


def boxes(dim):
    return [d for d in itertools.product((-1, 0, 1), repeat=dim) if any(d)]


def pattern(A):
    """The slots of ``A``'s stored diagonals, as a dense boolean matrix."""
    n = A.shape[0]
    mask = np.zeros((n, n), bool)
    for offset in A.offsets:
        rows = np.arange(max(0, -offset), min(n, n - offset))
        mask[rows, rows + offset] = True
    return mask


def as_jax(S, dtype=None):
    return jaxdia.DiaMatrix.from_scipy(S if dtype is None else S.astype(dtype))


def solve_error(M, factors, v):
    """``|M(v) - (factors)^-1 v|`` relative, in double precision."""
    want = np.linalg.solve(factors, v)
    got = np.asarray(M(jnp.asarray(v)))
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def check_ilu(A, M, tolerance):
    """The defining property of ILU(0), and ``M(v)``'s solve."""
    L, U = dense_f64(M.L), dense_f64(M.U)
    mask = pattern(A)
    dense = dense_f64(A)
    n = A.shape[0]
    np.testing.assert_array_equal(L[~(mask | np.eye(n, dtype=bool))], 0)
    np.testing.assert_array_equal(U[~mask], 0)
    np.testing.assert_allclose(np.diag(L), 1.0)
    assert np.allclose(np.tril(L), L) and np.allclose(np.triu(U), U)
    residual = np.abs((L @ U - dense)[mask]).max() / np.abs(dense).max()
    assert residual < tolerance, residual
    v = np.random.default_rng(0).standard_normal(n)
    assert solve_error(M, L @ U, v) < tolerance


# -- the factors -------------------------------------------------------------------------------

GRID_2D = (6, 7)
GRID_3D = (4, 5, 4)


@pytest.mark.parametrize(
    "grid, displacements, dtype, exact",
    [
        (GRID_2D, boxes(2), np.float64, True),  # 9-point: fill on the off-diagonals
        (GRID_3D, stars(3), np.complex128, True),  # 7-point, complex
        (GRID_3D, boxes(3), np.float64, False),  # 27-point
    ],
)
def test_ilu0_is_the_incomplete_lu_of_the_pattern(grid, displacements, dtype, exact):
    """The exact factorization (the 27-point one compiles slowly: Chow-Patel's iteration,
    converged, stands in for it), solved by hyperplanes; Chow-Patel's, solved by rows."""
    S = random_stencil(grid, displacements, seed=len(displacements), dtype=dtype)
    A = as_jax(S)
    method = "exact" if exact else "chow-patel"
    wavefront = jaxdia.ilu0(A, grid, method=method, sweeps=40, solves="wavefront")
    check_ilu(A, wavefront, 1e-12)
    scan = jaxdia.ilu0(A, grid, method="chow-patel", sweeps=40, solves="scan")
    check_ilu(A, scan, 1e-10)
    v = jnp.asarray(np.random.default_rng(1).standard_normal(A.shape[0]).astype(dtype))
    np.testing.assert_allclose(np.asarray(scan(v)), np.asarray(wavefront(v)), rtol=1e-9)


def test_ilu0_without_a_grid():
    """Any banded matrix: a 1-D convection-diffusion operator plus a far diagonal."""
    n = 40
    S = sp.dia_array(
        sp.diags_array([-2.0, 0.3, -1.5, 4.0, -0.5], offsets=[-7, -2, -1, 0, 1], shape=(n, n))
    )
    A = as_jax(S)
    M = jaxdia.ilu0(A)
    check_ilu(A, M, 1e-12)
    assert M.L.offsets == (-7, -2, -1, 0) and M.U.offsets == (0, 1) and M.grid is None


@pytest.mark.parametrize(
    "grid, displacements, dtype",
    [(GRID_2D, boxes(2), np.float64), (GRID_3D, stars(3), np.complex128)],
)
def test_ic0_is_the_incomplete_cholesky_of_the_pattern(grid, displacements, dtype):
    S = random_stencil(grid, displacements, seed=3, dtype=dtype, symmetric=True)
    A = as_jax(S)
    M = jaxdia.ic0(A, grid, method="exact", solves="wavefront")
    assert M.method == "exact" and M.grid == grid
    L = dense_f64(M.L)
    dense = dense_f64(A)
    lower = np.tril(pattern(A))
    np.testing.assert_array_equal(L[~lower], 0)
    assert np.all(np.diag(L).real > 0) and np.allclose(np.diag(L).imag, 0)
    residual = np.abs((L @ L.conj().T - dense)[lower]).max() / np.abs(dense).max()
    assert residual < 1e-12
    v = np.random.default_rng(0).standard_normal(A.shape[0])
    assert solve_error(M, L @ L.conj().T, v) < 1e-12
    # The upper triangle of A is not read.
    upper = jaxdia.DiaMatrix(
        jnp.where(jnp.asarray(A.offsets)[:, None] > 0, 3 * A.data, A.data), A.offsets, A.shape
    )
    np.testing.assert_allclose(dense_f64(jaxdia.ic0(upper, grid).L), L, rtol=1e-12)
    if dtype == np.float64:  # Chow-Patel's iteration converges to the same factor
        swept = jaxdia.ic0(A, grid, method="chow-patel", sweeps=40, solves="scan")
        np.testing.assert_allclose(dense_f64(swept.L), L, rtol=1e-10, atol=1e-10)
        # M is Hermitian: rmatvec is matvec.
        np.testing.assert_allclose(swept.rmatvec(v), swept.matvec(v), rtol=1e-12)


# -- small axes: the pattern of the grid's neighbours ---------------------------------------------

TOLERANCES = {np.float32: 2e-5, np.complex64: 2e-5, np.float64: 1e-12, np.complex128: 1e-12}


def nineteen():
    return [d for d in boxes(3) if sum(map(abs, d)) <= 2]


def neighbour_pattern(offsets, grid):
    """The slots of the diagonals ``offsets`` that couple neighbours of ``grid``: the
    pattern of ``ilu0(A, grid)`` (``ic0``'s: its lower triangle)."""
    n = math.prod(grid)
    points = np.indices(grid).reshape(len(grid), n).T
    near = np.abs(points[:, None] - points[None, :]).max(axis=-1) <= 1
    mask = np.zeros((n, n), bool)
    for offset in offsets:
        rows = np.arange(max(0, -offset), min(n, n - offset))
        mask[rows, rows + offset] = True
    return mask & near


def textbook_ilu(dense, mask):
    """ILU(0) on ``mask`` by the textbook IKJ loop: ``L`` unit lower, ``U`` upper."""
    n = dense.shape[0]
    W = np.where(mask, dense, 0)
    for i in range(n):
        for k in np.flatnonzero(mask[i, :i]):
            W[i, k] /= W[k, k]
            W[i, k + 1 :] -= W[i, k] * W[k, k + 1 :] * mask[i, k + 1 :]
    return np.tril(W, -1) + np.eye(n), np.triu(W)


def textbook_ic(dense, mask):
    """IC(0) on the lower triangle of ``mask``, row by row (the IKJ order): ``L L^H``
    matches the Hermitian ``dense`` there."""
    n = dense.shape[0]
    L = np.zeros_like(dense)
    for i in range(n):
        for k in np.flatnonzero(mask[i, :i]):
            L[i, k] = (dense[i, k] - L[i, :k] @ L[k, :k].conj()) / L[k, k]
        L[i, i] = np.sqrt((dense[i, i] - L[i, :i] @ L[i, :i].conj()).real)
    return L


def dominant_stencils(grid, displacements, seed, dtype, symmetric, batch=()):
    """Random strictly diagonally dominant stencils with the given displacements (a
    batch: the same offsets, other values), as one DiaMatrix."""
    members = []
    for member in range(math.prod(batch)):
        rng = np.random.default_rng([seed, member])
        complex_ = np.dtype(dtype).kind == "c"
        coefficients = {}
        for d in displacements:
            values = rng.uniform(-1, -0.1, grid)
            coefficients[d] = values + 1j * rng.uniform(-0.5, 0.5, grid) if complex_ else values
        coefficients[(0,) * len(grid)] = np.full(grid, 1.0 + 1.2 * len(displacements))
        S = stencil_matrix(grid, coefficients).astype(dtype)
        members.append(sp.dia_array((S + S.conj().T) / 2 if symmetric else S).astype(dtype))
    offsets = members[0].offsets
    assert all(np.array_equal(S.offsets, offsets) for S in members)
    data = np.stack([np.asarray(as_jax(S).data) for S in members])
    A = as_jax(members[0])
    return jaxdia.DiaMatrix(jnp.asarray(data.reshape(*batch, *data.shape[1:])), A.offsets, A.shape)


def check_textbook(A, grid, kind, tolerance, order=(), adjoint=False, **options):
    """``ilu0(A, grid)`` (``kind="ilu"``) or ``ic0`` against the textbook loops on the
    neighbour pattern (for ``order``, of ``P A P^T``), and ``M(v)`` (with ``adjoint``,
    ``M^H v`` too, for one matrix) against dense solves with the textbook factors."""
    n = A.shape[0]
    function = jaxdia.ilu0 if kind == "ilu" else jaxdia.ic0
    M = function(A, grid, order=order, **options)
    P = np.eye(n)[np.flip(np.arange(n).reshape(grid), order).ravel()]
    dense = P @ dense_f64(A).reshape(-1, n, n) @ P.T
    offsets = M.L.offsets if kind == "ic" else M.L.offsets + M.U.offsets
    mask = neighbour_pattern(offsets, grid)
    # One compiled call for the factors as DiaMatrix (eager, each step compiles its own).
    factors = jax.jit(lambda M: (M.L, M.U) if kind == "ilu" else (M.L,))(M)
    got_L, *got_U = (dense_f64(F).reshape(-1, n, n) for F in factors)
    v = np.random.default_rng(0).standard_normal((len(dense), n))
    got = np.asarray(M(jnp.asarray(v.reshape(*A.batch_shape, n)))).reshape(-1, n)
    for member, matrix in enumerate(dense):
        if kind == "ilu":
            L, U = textbook_ilu(matrix, mask)
            np.testing.assert_allclose(got_U[0][member], U, rtol=tolerance, atol=tolerance)
        else:
            L = textbook_ic(matrix, np.tril(mask))
            U = L.conj().T
        np.testing.assert_allclose(got_L[member], L, rtol=tolerance, atol=tolerance)
        want = P.T @ np.linalg.solve(L @ U, P @ v[member])
        np.testing.assert_allclose(got[member], want, rtol=10 * tolerance, atol=10 * tolerance)
        if adjoint:
            want = P.T @ np.linalg.solve((L @ U).conj().T, P @ v[member])
            np.testing.assert_allclose(M.rmatvec(v[member]), want, rtol=10 * tolerance)


SMALL_AXES = [
    ((4, 3), boxes(2), np.float64),  # the offset 2 of (-1, 1) is also two steps along axis 1
    ((5, 3), boxes(2), np.complex128),
    ((3, 3), boxes(2), np.float32),
    ((2, 3), boxes(2), np.complex64),
    ((4, 2), boxes(2), np.float64),
    ((1, 4), boxes(2), np.float64),
    ((3, 2), stars(2), np.complex128),
    ((4, 3), [(0, -1), (1, -1), (1, 1), (-1, 0)], np.float64),  # no box, nor symmetric
    ((3, 3, 3), boxes(3), np.float32),
    ((4, 4, 3), boxes(3), np.complex128),
    ((4, 3, 4), boxes(3), np.float64),
    ((3, 2, 3), nineteen(), np.float64),
    ((4, 3, 1), stars(3), np.complex128),
]


#: SMALL_AXES's cases in the fast tier: an axis that offsets alias, a complex one, the
#: unsymmetric pattern, a 3-D grid, an axis of 1 (the rest in the full tier).
SMALL_AXES_FAST = {0, 3, 7, 8, 12}


@pytest.mark.parametrize(
    "grid, displacements, dtype",
    [
        pytest.param(*case, marks=() if i in SMALL_AXES_FAST else pytest.mark.full)
        for i, case in enumerate(SMALL_AXES)
    ],
)
def test_small_axes_give_the_textbook_factors_of_the_neighbour_pattern(grid, displacements, dtype):
    """Axes of 1 to 3 points, where a diagonal's slots that wrap around a grid line can
    take fill (on an axis of 3 points two steps along it land on a neighbour's offset):
    ILU(0) and IC(0) exactly as the textbook loops give them on the neighbour pattern,
    the ILU solves by hyperplanes, IC's by rows."""
    tolerance = TOLERANCES[dtype]
    A = dominant_stencils(grid, displacements, 0, dtype, symmetric=False)
    check_textbook(A, grid, "ilu", tolerance, method="exact", solves="wavefront")
    H = dominant_stencils(grid, displacements, 1, dtype, symmetric=True)
    check_textbook(H, grid, "ic", tolerance, method="exact", solves="scan")


@pytest.mark.parametrize("kind", ["ilu", "ic"])
def test_small_axes_chow_patel_batches_and_orderings(kind):
    """Chow-Patel's sweeps converge to the same factors; a batch, and an ordering that
    reverses the axis of 3 points."""
    grid = (4, 3)
    A = dominant_stencils(grid, boxes(2), 2, np.float64, kind == "ic", batch=(2,))
    check_textbook(A, grid, kind, 1e-10, method="chow-patel", sweeps=40)
    one = jaxdia.DiaMatrix(A.data[0], A.offsets, A.shape)
    check_textbook(one, grid, kind, 1e-12, order=(1,), adjoint=True, method="exact")


@st.composite
def small_stencils(draw):
    """A grid with axes of 1 to 5 points (2-D or 3-D), a stencil on it (5-, 9-, 7-, 19-
    or 27-point, or any set of neighbours), a dtype, a batch."""
    dim = draw(st.sampled_from([2, 3]))
    grid = tuple(draw(st.integers(1, 5)) for _ in range(dim))
    shapes = {"star": stars(dim), "box": boxes(dim)} | ({"19": nineteen()} if dim == 3 else {})
    shape = draw(st.sampled_from([*shapes, "some"]))
    if shape == "some":
        displacements = draw(st.lists(st.sampled_from(boxes(dim)), max_size=8, unique=True))
    else:
        displacements = shapes[shape]
    dtype = draw(st.sampled_from(list(TOLERANCES)))
    batch = draw(st.sampled_from([(), (2,)]))
    return grid, displacements, dtype, batch


@settings(max_examples=examples(5))  # each example compiles its factorization and solves
@given(small_stencils(), st.sampled_from(["ilu", "ic"]), st.integers(0, 2**16))
@example(((2, 3), boxes(2), np.complex128, (2,)), "ic", 0)  # fill in wrapped slots
@example(((3, 2, 3), nineteen(), np.float32, ()), "ilu", 0)
def test_small_axes_property(stencil, kind, seed):
    grid, displacements, dtype, batch = stencil
    A = dominant_stencils(grid, displacements, seed, dtype, kind == "ic", batch)
    check_textbook(A, grid, kind, TOLERANCES[dtype], method="exact")


@settings(max_examples=examples(100))
@given(small_stencils(), st.integers(0, 2**16))
def test_the_pattern_is_masked_as_the_factorization_runs_wherever_it_matters(stencil, seed):
    """Where ``wrapped_fill`` says no fill reaches a wrapped slot, the factorization keeps
    its programs: it runs on the whole diagonals and masks after. The textbook loops
    (with NumPy: nothing to compile) agree there with those on the neighbour pattern."""
    grid, displacements, _, _ = stencil
    for kind in ("ilu", "ic"):
        S = dominant_stencils(grid, displacements, seed, np.float64, symmetric=kind == "ic")
        dense = dense_f64(S)
        offsets = S.offsets if kind == "ilu" else tuple(o for o in S.offsets if o <= 0)
        if wrapped_fill(offsets, grid, kind):
            continue
        mask = neighbour_pattern(offsets, grid)
        if kind == "ilu":
            got, want = textbook_ilu(dense, pattern(S)), textbook_ilu(dense, mask)
        else:
            got, want = [textbook_ic(dense, np.tril(pattern(S)))], [textbook_ic(dense, mask)]
        for F, G in zip(got, want):
            np.testing.assert_allclose(F * mask, G, atol=1e-14)


# -- orderings ---------------------------------------------------------------------------------


def test_order_auto_reverses_the_axes_against_the_flow():
    grid = (5, 6)
    n = math.prod(grid)
    A = as_jax(convection_diffusion(grid, 1e-2, (-1.0, 0.5)))
    M = jaxdia.ilu0(A, grid, order="auto")
    assert M.order == (0,)
    # The factor is ILU(0) of P A P^T, P reversing axis 0; M works in A's ordering.
    P = np.eye(n)[np.flip(np.arange(n).reshape(grid), 0).ravel()]
    reordered = P @ dense_f64(A) @ P.T
    L, U = dense_f64(M.L), dense_f64(M.U)
    mask = np.abs(reordered) > 0
    assert np.abs((L @ U - reordered)[mask]).max() < 1e-12 * np.abs(reordered).max()
    v = np.random.default_rng(0).standard_normal(n)
    assert solve_error(M, P.T @ L @ U @ P, v) < 1e-12
    # Both axes against the flow, and a symmetric matrix (no flow): as expected (the
    # choice alone, read off A's values on the host).
    for wind, axes in (((-1.0, -0.5), (0, 1)), ((0.0, 0.0), ())):
        S = convection_diffusion(grid, 1e-2, wind)
        assert _downwind(S.data[None], tuple(S.offsets), grid) == axes
    # An explicit order gives the same factor, also under jit (where "auto" cannot read A).
    again = jax.jit(lambda A: jaxdia.ilu0(A, grid, order=M.order).U)(A)
    np.testing.assert_allclose(dense_f64(again), U, rtol=1e-12)
    with pytest.raises(TypeError, match=r"order='auto' .* traced"):
        jax.jit(lambda A: jaxdia.ilu0(A, grid, order="auto").U)(A)


# -- iteration counts ----------------------------------------------------------------------------

N = 32


def test_convection_dominated_iteration_counts():
    """BiCGStab with ILU(0) at N = 32 (measured counts in the comments, eps = 1e-3 and
    1e-4): few iterations in the ordering of the flow (5, 3), the same after
    ``order="auto"`` reversed an axis against it, several times more without (16, 17);
    Chow-Patel's two sweeps as few as the exact factorization (5, 3). (Jacobi takes 64
    and breaks down at 1e-4; benchmarks/README.md has the other preconditioners.)"""
    b = jnp.ones(N * N)
    for eps, most in ((1e-3, 6), (1e-4, 4)):
        forward = as_jax(convection_diffusion((N, N), eps, (1.0, 0.5)))
        against = as_jax(convection_diffusion((N, N), eps, (-1.0, 0.5)))

        def iterations(A, **options):
            _, info = jaxdia.bicgstab(A, b, M=jaxdia.ilu0(A, (N, N), **options), rtol=1e-8)
            assert bool(info.converged)
            return int(info.iterations)

        exact = iterations(forward, method="exact")
        assert exact <= most
        assert iterations(forward, method="chow-patel") <= exact + 1
        assert iterations(against, method="exact", order="auto") == exact
        assert iterations(against, method="exact") >= 3 * exact


# -- other solvers: JAX, SciPy, lineax -----------------------------------------------------------


@pytest.fixture(scope="module")
def problem():
    S = convection_diffusion((8, 8), 1e-2, (-1.0, 0.5))
    A = as_jax(S)
    b = np.random.default_rng(0).standard_normal(S.shape[0])
    return S, A, b, jaxdia.ilu0(A, (8, 8), order="auto"), spla.spsolve(S.tocsc(), b)


def test_scipy_solvers_take_the_preconditioner(problem):
    S, _, b, M, expected = problem
    iterations = []
    x, info = spla.bicgstab(S.tocsr(), b, M=M, rtol=1e-10, callback=lambda _: iterations.append(1))
    assert info == 0 and len(iterations) < 15
    np.testing.assert_allclose(x, expected, rtol=1e-8)
    operator = spla.aslinearoperator(M)
    assert operator.shape == M.shape and operator.dtype == np.float64
    v = np.arange(S.shape[0], dtype=np.float64)
    assert M.matvec(v).shape == v.shape and M.matvec(v[:, None]).shape == (v.size, 1)
    np.testing.assert_allclose(M.matmat(np.stack([v, 2 * v], 1))[:, 1], 2 * M.matvec(v))
    # M^H: <M x, y> == <x, M^H y>.
    y = np.cos(v)
    np.testing.assert_allclose(np.dot(M.matvec(v), y), np.dot(v, M.rmatvec(y)), rtol=1e-12)
    np.testing.assert_allclose(M.rmatmat(y[:, None])[:, 0], M.rmatvec(y))


def test_jax_solvers_and_lineax_take_the_preconditioner(problem):
    lx = pytest.importorskip("lineax")
    _, A, b, M, expected = problem
    b = jnp.asarray(b)
    x, _ = jax.jit(lambda A, b, M: jsl.gmres(A, b, M=M, tol=1e-10))(A, b, M)
    np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-8)
    # lineax: M as a FunctionLinearOperator in the solver's options.
    preconditioner = lx.FunctionLinearOperator(M, jax.ShapeDtypeStruct(b.shape, b.dtype))
    operator = jaxdia.DiaLinearOperator(A)

    solution = lx.linear_solve(
        operator,
        b,
        lx.GMRES(rtol=1e-10, atol=1e-10, restart=30),
        options={"preconditioner": preconditioner},
    )
    np.testing.assert_allclose(np.asarray(solution.value), expected, rtol=1e-8)
    assert int(solution.stats["num_steps"]) < 10


# -- jit, vmap, grad ------------------------------------------------------------------------------


def test_jit_and_vmap():
    grid = (6, 6)
    batch = [convection_diffusion(grid, eps, (1.0, -0.5)) for eps in (1.0, 0.1, 0.01)]
    data = jnp.stack([as_jax(S).data for S in batch])
    offsets, shape = as_jax(batch[0]).offsets, batch[0].shape
    v = jnp.asarray(np.random.default_rng(0).standard_normal((3, shape[0])))

    def apply(data, v):
        M = jaxdia.ilu0(jaxdia.DiaMatrix(data, offsets, shape), grid, order=(1,))
        return M(v)

    one_by_one = np.stack([np.asarray(apply(d, w)) for d, w in zip(data, v)])
    np.testing.assert_allclose(
        np.asarray(jax.jit(jax.vmap(apply))(data, v)), one_by_one, rtol=1e-12
    )
    batched = jaxdia.ilu0(jaxdia.DiaMatrix(data, offsets, shape), grid, order=(1,))
    assert batched.batch_shape == (3,)
    np.testing.assert_allclose(np.asarray(batched(v)), one_by_one, rtol=1e-12)
    # vmap over matrices, each M applied to the same stack of two vectors.
    stacks = jax.vmap(apply, in_axes=(0, None))(data, v[:2])
    np.testing.assert_allclose(np.asarray(stacks[1]), np.asarray(apply(data[1], v[:2])), rtol=1e-12)
    # vmap over vectors for one factor, and a complex vector for a real factor.
    M = jaxdia.ilu0(jaxdia.DiaMatrix(data[0], offsets, shape), grid, order=(1,))
    np.testing.assert_allclose(np.asarray(jax.vmap(M)(v)), np.asarray(M(v)), rtol=1e-12)
    z = v[0] + 1j * v[1]
    np.testing.assert_allclose(np.asarray(M(z)), np.asarray(M(v[0]) + 1j * M(v[1])), rtol=1e-12)


def test_gradients_do_not_differentiate_the_preconditioner():
    grid = (6, 6)
    A = as_jax(convection_diffusion(grid, 0.1, (1.0, 0.5)))
    b = jnp.asarray(np.random.default_rng(0).standard_normal(A.shape[0]))

    def matrix(data):
        return jaxdia.DiaMatrix(data, A.offsets, A.shape)

    def loss(data, b):
        x, _ = jaxdia.bicgstab(matrix(data), b, M=jaxdia.ilu0(matrix(data), grid), rtol=1e-12)
        return jnp.sum(x**2)

    def exact_loss(data, b):  # the exact solution, differentiated by JAX
        return jnp.sum(jnp.linalg.solve(matrix(data).todense(), b) ** 2)

    got = jax.grad(loss, argnums=(0, 1))(A.data, b)
    want = jax.grad(exact_loss, argnums=(0, 1))(A.data, b)
    for g, w in zip(got, want):
        np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-8, atol=1e-12)
    # The factor is a constant (stop_gradient); M(v) is linear in v, its transpose M^T.
    M = jaxdia.ilu0(A, grid)
    w = jnp.cos(b)
    assert not np.any(
        np.asarray(jax.grad(lambda d: jnp.sum(jaxdia.ilu0(matrix(d), grid)(b)))(A.data))
    )
    transposed = jax.grad(lambda v: jnp.dot(M(v), w))(b)  # M^T w, by the transpose rule
    want = np.linalg.solve((dense_f64(M.L) @ dense_f64(M.U)).T, np.asarray(w))
    np.testing.assert_allclose(np.asarray(transposed), want, rtol=1e-10)


# -- breakdowns and arguments ---------------------------------------------------------------------


def test_a_breakdown_raises_and_a_shift_repairs_it():
    n = 6
    # The second pivot is 1 - 1 * 1 / 1 = 0.
    A = jaxdia.diags([[1.0] * (n - 1), [1.0] * n, [1.0] * (n - 1)], offsets=[-1, 0, 1])
    with pytest.raises(ValueError, match=r"ilu0: pivot 0.0 at row 1: .* shift"):
        jaxdia.ilu0(A)
    M = jaxdia.ilu0(A, shift=0.5)
    np.testing.assert_allclose(np.diag(dense_f64(M.U))[:2], [1.5, 1.5 - 1 / 1.5])
    # An indefinite matrix for IC(0), a grid point named in A's ordering.
    S = sp.dia_array(sp.diags_array([-1.0, 1.5, -1.0], offsets=[-1, 0, 1], shape=(n, n)))
    with pytest.raises(
        ValueError,
        match=r"ic0: pivot nan at row 2 \(grid point \(2,\)\): A is not positive definite",
    ):
        jaxdia.ic0(as_jax(S), (n,), order=(0,))
    # Under jit nothing can raise: the breakdown shows as non-finite values.
    assert not np.all(np.isfinite(jax.jit(lambda A: jaxdia.ilu0(A)(jnp.ones(n)))(A)))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda A: jaxdia.ilu0(A, method="lu"), ValueError, "method must be one of"),
        (lambda A: jaxdia.ilu0(A, sweeps=0), ValueError, "sweeps must be >= 1"),
        (lambda A: jaxdia.ilu0(A, solves="wavefront"), ValueError, "pass grid="),
        (lambda A: jaxdia.ilu0(A, order="auto"), ValueError, "needs grid="),
        (lambda A: jaxdia.ilu0(A, (4, 4), order=(2,)), ValueError, "distinct axes"),
        (lambda A: jaxdia.ilu0(A, (4, 4), order="flow"), ValueError, "order must be"),
        (lambda A: jaxdia.ilu0(A, (4, 5)), ValueError, "ilu0: grid"),
        (lambda A: jaxdia.ilu0(A, shift=-1.0), ValueError, "shift must be"),
        (lambda A: jaxdia.ilu0(A, dtype=jnp.complex64), TypeError, "dtype must be float32"),
        (lambda A: jaxdia.ic0(A.astype(jnp.float16)), TypeError, "got float16"),
        (lambda A: jaxdia.ilu0(A)(jnp.ones(3)), ValueError, r"v must have shape \(16,\)"),
    ],
)
def test_arguments_are_checked(call, error, message):
    A = as_jax(convection_diffusion((4, 4), 1.0, (1.0, 0.5)))
    with pytest.raises(error, match=message):
        call(A)


def test_matrices_that_do_not_fit_are_rejected():
    with pytest.raises(ValueError, match="stores no main diagonal"):
        jaxdia.ilu0(jaxdia.eye(4, k=1))
    with pytest.raises(ValueError, match="must be square"):
        jaxdia.ic0(jaxdia.eye(4, 5))
    lines = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(16, 16))
    with pytest.raises(ValueError, match=r"ilu0: A\[4, 3\] = -1.0 couples grid points \(1, 0\)"):
        jaxdia.ilu0(lines, (4, 4))  # a 1-D chain of 16 points is no stencil on a 4 x 4 grid


@pytest.mark.parametrize(
    "cls, function", [(jaxdia.IncompleteLU, jaxdia.ilu0), (jaxdia.IncompleteCholesky, jaxdia.ic0)]
)
def test_preconditioners_come_from_their_functions_and_describe_themselves(cls, function):
    with pytest.raises(
        TypeError, match=rf"{cls.__name__} is not built directly: .*{function.__name__}"
    ):
        cls(jaxdia.eye(3))
    A = jaxdia.diags([-1.0, 4.0, -1.0], offsets=[-1, 0, 1], shape=(9, 9))
    assert (
        repr(function(A, 9))
        == f"{cls.__name__}(shape=(9, 9), dtype=float64, grid=(9,), method='auto')"
    )


# -- accelerators ----------------------------------------------------------------------------------


def _trip_counts(text):
    """The constant trip counts of the lowered program's loops (``i < constant``)."""
    counts = []
    for cond in re.findall(r"cond \{(.*?)\} do", text, re.S):
        constants = dict(
            re.findall(r"%(\S+) = stablehlo.constant dense<(\d+)> : tensor<i\d+>", cond)
        )
        for bound in re.findall(r"stablehlo.compare\s+LT, %\S+, %(\S+),", cond):
            counts.append(int(constants.get(bound, -1)))
    return counts


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_accelerators_run_no_loop_over_the_unknowns(platform):
    """On GPU and TPU the factorization is Chow-Patel's (2 sweeps) and the solves run by
    hyperplanes (N1 + N2 - 1 = 23 steps on a 13 x 11 grid), not row by row (143)."""
    grid = (13, 11)
    A = as_jax(convection_diffusion(grid, 1e-2, (1.0, 0.5)), np.float32)
    b = jnp.ones(A.shape[0], jnp.float32)

    def solve(A, b):
        return jaxdia.ilu0(A, grid, order=(0,))(b)

    assert max(_trip_counts(lowered_text(solve, A, b, platform="cpu"))) == 143
    assert sorted(_trip_counts(lowered_text(solve, A, b, platform=platform))) == [2, 23, 23]
    if platform == "cuda":  # so with the ILU smoother of multigrid (9-point coarse levels)
        cycle = lowered_text(
            lambda A, b: jaxdia.multigrid(A, grid, smoother="ilu", max_coarse=20)(b),
            A,
            b,
            platform=platform,
        )
        assert max(_trip_counts(cycle)) == 23


# -- ILU as a multigrid smoother ---------------------------------------------------------------


def test_multigrid_with_the_ilu_smoother_converges_where_convection_dominates():
    """eps = 1e-4 at N = 32 (cell Peclet 170): the Chebyshev-smoothed V-cycle breaks down
    in BiCGStab (measured); with ILU(0) smoothing two iterations suffice."""
    A = as_jax(convection_diffusion((N, N), 1e-4, (1.0, 0.5)))
    b = jnp.ones(N * N)
    M = jaxdia.multigrid(A, (N, N), smoother="ilu", sweeps=1)
    assert M.smoother == "ilu"
    x, info = jaxdia.bicgstab(A, b, M=M, rtol=1e-8)
    assert bool(info.converged) and int(info.iterations) <= 3
    np.testing.assert_allclose(
        np.asarray(x), spla.spsolve(sp.csc_array(dense_f64(A)), np.ones(N * N)), rtol=1e-6
    )
