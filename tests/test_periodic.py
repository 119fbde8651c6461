"""Periodic (cyclic) banded solves: a band plus wrap-around corner diagonals.

``lu_factor``, ``solve_banded`` and ``factorized`` split such a matrix into its band and a
low-rank corner correction (Sherman-Morrison-Woodbury) instead of factoring the full band
the corners span. Oracles: NumPy's dense ``solve`` (all three ``trans``), SciPy's
``spsolve``, and ``jnp.linalg.solve``'s gradients; the split's choice against the work it
saves; the fallback when the band alone is singular or too ill-conditioned for the
correction (its growth), and small matrices, which are bands.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings, strategies as st

import jaxdia
from jaxdia._linalg import periodic
from jaxdia._linalg.plan import periodic_split

from .helpers import assert_close, dense_f64, examples
from .test_band_parallel import assert_no_loop_grows


def periodic_matrix(n, half, dtype=np.float64, batch=(), seed=0, dominant=True):
    """A random matrix with the periodic stencil ``-half .. half`` (corner diagonals at
    ``±(n - half) .. ±(n - 1)``), diagonally dominant unless told otherwise."""
    rng = np.random.default_rng(seed)
    dense = np.zeros((*batch, n, n), dtype)
    rows = np.arange(n)
    for offset in range(-half, half + 1):
        values = rng.standard_normal((*batch, n))
        if np.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal(values.shape)
        if offset == 0 and dominant:
            values = values + (2 * half + 2) * np.sign(values.real)
        dense[..., rows, (rows + offset) % n] = values
    members = [sp.dia_array(d) for d in dense.reshape(-1, n, n)]
    offsets = members[0].offsets
    data = np.stack([jaxdia.DiaMatrix.from_scipy(m).with_offsets(offsets).data for m in members])
    return jaxdia.DiaMatrix(data.reshape(*batch, *data.shape[-2:]), offsets, (n, n)), dense


@pytest.mark.parametrize("n, half", [(40, 1), (41, 2), (64, 5), (7, 1)])
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_lu_factor_splits_off_the_corners_and_matches_numpy(n, half, dtype):
    A, dense = periodic_matrix(n, half, dtype)
    assert max(A.offsets) == n - 1  # corners: the plain band would be the whole matrix
    lu = jaxdia.lu_factor(A)
    assert lu.kind == "periodic"
    assert (lu.lower, lu.upper) == (n - 1, n - 1)
    b = np.random.default_rng(1).standard_normal((n, 2)).astype(dtype)
    for trans, op in enumerate((dense, dense.T, dense.conj().T)):
        assert_close(lu.solve(b, trans=trans), np.linalg.solve(op, b), dtype, scale=10)
    assert_close(jaxdia.solve_banded(A, b[:, 0]), np.linalg.solve(dense, b[:, 0]), dtype, 10)
    assert_close(jaxdia.factorized(A)(b), np.linalg.solve(dense, b), dtype, scale=10)


def test_matches_spsolve():
    A, dense = periodic_matrix(300, 5, seed=2)
    b = np.random.default_rng(2).standard_normal(300)
    x = jax.jit(jaxdia.solve_banded)(A, b)
    assert_close(x, spla.spsolve(sp.csc_array(dense), b), np.float64, scale=10)


def test_batches_vmap_jit_and_complex_rhs():
    A, dense = periodic_matrix(30, 2, batch=(3,))
    b = np.random.default_rng(3).standard_normal((3, 30, 2))
    assert_close(jaxdia.lu_factor(A).solve(b), np.linalg.solve(dense, b), np.float64, 10)

    def member(data):
        return jaxdia.DiaMatrix(data, A.offsets, A.shape)

    one = jax.jit(jax.vmap(lambda d, v: jaxdia.solve_banded(member(d), v)))
    assert_close(one(A.data, b[..., 0]), np.linalg.solve(dense, b)[..., 0], np.float64, 10)
    # A complex right-hand side for a real factor.
    z = b[0] + 1j * b[1]
    x = jaxdia.lu_factor(member(A.data[0])).solve(z)
    assert_close(x, np.linalg.solve(dense[0], z), np.float64, 10)
    # A factor carried through jit and scan.
    lu = jax.jit(jaxdia.lu_factor)(member(A.data[0]))
    out, _ = jax.lax.scan(lambda u, _: (lu.solve(u), None), b[0, :, 0], length=3)
    expected = b[0, :, 0]
    for _ in range(3):
        expected = np.linalg.solve(dense[0], expected)
    assert_close(out, expected, np.float64, 100)


def test_gradients_match_the_dense_solve():
    A, dense = periodic_matrix(20, 1, seed=4)
    b = np.random.default_rng(5).standard_normal(20)

    def loss(data, rhs):
        x = jaxdia.solve_banded(jaxdia.DiaMatrix(data, A.offsets, A.shape), rhs)
        return jnp.sum(jnp.sin(x))

    def dense_loss(data, rhs):
        M = jaxdia.DiaMatrix(data, A.offsets, A.shape).todense()
        return jnp.sum(jnp.sin(jnp.linalg.solve(M, rhs)))

    got = jax.grad(loss, argnums=(0, 1))(A.data, b)
    want = jax.grad(dense_loss, argnums=(0, 1))(A.data, b)
    assert_close(got[0], want[0], np.float64, 10)
    assert_close(got[1], want[1], np.float64, 10)
    # The corner entries get their gradient (they are in the product that differentiates).
    assert np.abs(np.asarray(got[0])[list(A.offsets).index(19)]).max() > 0


def test_band_singular_falls_back_to_the_whole_band():
    """A cyclic shift: its band alone (one superdiagonal) is singular. Eagerly the plain
    band factor takes over; under ``jit`` the factor reports it and solves are NaN."""
    n = 10
    shift = np.roll(np.eye(n), 1, axis=1)
    A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(shift))
    assert periodic_split(A.offsets, n) is not None
    b = np.arange(float(n))
    lu = jaxdia.lu_factor(A)
    assert lu.kind == "band"
    assert_close(lu.solve(b), np.linalg.solve(shift, b), np.float64)
    assert_close(jaxdia.solve_banded(A, b), np.linalg.solve(shift, b), np.float64)
    traced = jax.jit(jaxdia.lu_factor)(A)
    assert traced.kind == "periodic" and int(traced.info) != 0 and not bool(traced.ok)
    assert np.isnan(np.asarray(traced.solve(b))).all()


def test_singular_matrix_raises_eagerly():
    """``I - E[0, n-1] - E[n-1, 0]`` is exactly singular (``e_0 + e_{n-1}`` is in its null
    space), and so is its correction ``S``: lu_factor raises as for any band."""
    n = 12
    dense = np.eye(n)
    dense[0, n - 1] = dense[n - 1, 0] = -1.0
    A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(dense))
    assert int(jax.jit(jaxdia.lu_factor)(A).info) == periodic.SINGULAR
    with pytest.raises(np.linalg.LinAlgError, match="singular"):
        jaxdia.lu_factor(A)
    assert np.isnan(np.asarray(jax.jit(jaxdia.solve_banded)(A, np.ones(n)))).all()


def test_non_finite_corner_is_refused():
    A, _ = periodic_matrix(16, 1)
    bad = A.data.at[list(A.offsets).index(15), 15].set(np.nan)
    with pytest.raises(ValueError, match="infs or NaNs"):
        jaxdia.lu_factor(jaxdia.DiaMatrix(bad, A.offsets, A.shape))


def test_split_choice():
    """Corners are split off only where they are a small correction."""
    split = periodic_split
    assert split((-1, 0, 1), 100) is None  # no corners
    n = 400  # a 2-D 5-point stencil on a 20 x 20 grid: ±20 are part of the band
    assert split((-20, -1, 0, 1, 20), n) is None
    assert split((-99, -1, 0, 1, 99), 100) == periodic.Split((1, 2, 3), 1, 1, (1, 1))
    # one corner only (a periodic upwind stencil)
    assert split((-1, 0, 99), 100) == periodic.Split((0, 1), 1, 0, (1, 0))
    # corners touching more than half the columns are no small correction
    assert split((-40, -1, 0, 1, 40), 100) is None


@pytest.mark.parametrize("method", ["lapack", "scan", "parallel"])
def test_every_band_method(method):
    A, dense = periodic_matrix(33, 2, seed=6)
    b = np.random.default_rng(7).standard_normal(33)
    lu = jaxdia.lu_factor(A, method=method)
    assert lu.kind == "periodic"
    assert_close(lu.solve(b), np.linalg.solve(dense, b), np.float64, 10)
    assert_close(lu.solve(b, trans=1), np.linalg.solve(dense.T, b), np.float64, 10)
    x = jaxdia.solve_banded(A, b, method=method)
    assert_close(x, np.linalg.solve(dense, b), np.float64, 10)


def test_pytree_names_and_attributes():
    A, _ = periodic_matrix(16, 1)
    lu = jaxdia.lu_factor(A)
    names = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(lu)[0]]
    assert names[-4:] == [".corrections", ".capacitance_lu", ".capacitance_pivots", ".info"]
    with pytest.raises(AttributeError, match="periodic factor"):
        lu.lu  # noqa: B018
    assert_close(lu.matrix.todense(), dense_f64(A), np.float64)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_no_loop_over_the_rows_on_accelerators(traced_as, platform):
    traced_as(platform)

    def factor_and_solve(A, b):
        lu = jaxdia.lu_factor(A)
        assert lu.kind == "periodic"
        return lu.solve(b), jaxdia.solve_banded(A, b)

    def make(n):
        A, _ = periodic_matrix(n, 2, np.float32)
        return factor_and_solve, (A, jnp.ones(n, jnp.float32))

    assert_no_loop_grows(make, platform)


# -- when the split is refused: small n, an ill-conditioned band ----------------------------


#: The growth ``1 + ||B^-1 U||_inf`` above which a periodic factor is refused, as
#: ``lu_factor``'s docstring states it (``periodic.MAX_GROWTH``).
GROWTH = 1e3


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def condition(dense) -> float:
    return float(np.linalg.cond(np.asarray(dense, np.complex128), np.inf))


def shifted_cycle(n, delta, dtype, half=0, seed=0):
    """The cyclic shift ``A[i, i + 1 mod n] = 1`` plus ``delta`` times a random matrix on
    the diagonals ``-half .. half`` (and their wrap-arounds): about as well conditioned as
    a permutation for a small ``delta``, while its band without the corners (the
    superdiagonal plus ``delta`` times the rest) is nearly nilpotent."""
    rng = np.random.default_rng(seed)
    dense = np.roll(np.eye(n), 1, axis=1).astype(np.complex128)
    rows = np.arange(n)
    for offset in range(-half, half + 1):
        values = rng.standard_normal(n) + (1j * rng.standard_normal(n) if dtype_kind(dtype) else 0)
        dense[rows, (rows + offset) % n] += delta * values
    dense = dense if dtype_kind(dtype) else dense.real
    dense = dense.astype(dtype)
    return jaxdia.DiaMatrix.from_scipy(sp.dia_array(dense)), dense


def dtype_kind(dtype) -> bool:
    """Whether ``dtype`` is complex."""
    return np.dtype(dtype).kind == "c"


def assert_solves(solution, dense, b, dtype, growth=1.0, trans=0):
    """``solution`` solves ``op(dense) x = b`` as accurately as a backward stable solve
    would, ``growth`` times less for a periodic factor: its error (infinity norm,
    relative) is within ``200 eps cond(op) growth``. Where that is 1 or more the matrix is
    singular to the working precision and any answer is within it (an ``ok`` factor
    means no zero pivot, as LAPACK's): nothing to check, and NumPy's own solve may refuse
    it (a float32 triangle with a diagonal of 1e-13, cond 1e29)."""
    op = (dense, dense.T, dense.conj().T)[trans].astype(np.complex128)
    relative_bound = 200 * eps(dtype) * condition(op) * growth
    if not relative_bound < 1:
        return
    expected = np.linalg.solve(op, np.asarray(b, np.complex128))
    error = np.abs(np.asarray(solution, np.complex128) - expected).max()
    bound = relative_bound * np.abs(expected).max()
    assert error <= bound, (error, bound)


SMALL = [(2, 1), (3, 2), (4, 3)]  # tridiagonal, pentadiagonal, heptadiagonal
ALL_DTYPES = [np.float32, np.float64, np.complex64, np.complex128]


@pytest.mark.parametrize("n, half", SMALL)
@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_small_matrices_are_bands(n, half, dtype):
    """An ``n x n`` matrix of offsets ``-half .. half`` with ``half = n - 1`` has "corners"
    at ``±(n - 1)`` that are diagonals of its band seen from the other side: it is
    factored as a band, exactly, even where its band without them is nearly singular
    (a Woodbury correction there would lose every digit, with ``info == 0``)."""
    A, dense = shifted_cycle(n, 16 * eps(dtype), dtype, half=half, seed=n)
    assert A.offsets == tuple(range(-half, half + 1))
    assert periodic_split(A.offsets, n) is None
    b = np.arange(1.0, n + 1).astype(dtype)
    lu, solutions, x = jax.jit(factor_and_solve)(A, b)
    assert lu.kind != "periodic" and bool(lu.ok)
    for trans, solution in enumerate(solutions):
        assert_solves(solution, dense, b, dtype, trans=trans)
    assert_solves(x, dense, b, dtype)


def factor_and_solve(A, b):
    """``lu_factor(A)``, its solves of ``op(A) x = b`` (all three ``trans``) and
    ``solve_banded(A, b)``, in one program."""
    lu = jaxdia.lu_factor(A)
    return lu, [lu.solve(b, trans=trans) for trans in (0, 1, 2)], jaxdia.solve_banded(A, b)


@pytest.mark.parametrize("n, half", SMALL)
def test_small_matrices_batched_under_vmap(n, half):
    members = [shifted_cycle(n, 16 * eps(np.float32), np.float32, half, seed) for seed in range(3)]
    data = jnp.stack([A.data for A, _ in members])
    offsets = members[0][0].offsets
    assert all(A.offsets == offsets for A, _ in members)
    b = np.ones((3, n), np.float32)

    def solve(d, v):
        return jaxdia.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), v)

    batched = jaxdia.DiaMatrix(data, offsets, (n, n))
    lu = jax.jit(jaxdia.lu_factor)(batched)
    assert lu.kind != "periodic" and bool(jnp.all(lu.ok))
    for x in (jax.jit(jax.vmap(solve))(data, b), lu.solve(b[..., None])[..., 0]):
        for (_, dense), xi, bi in zip(members, np.asarray(x), b, strict=True):
            assert_solves(xi, dense, bi, np.float32)


def test_separation():
    """A split needs the stencil ``-L .. U`` the offsets make on the circle of ``n``
    points to cover at most half of it: ``2 (L + U + 1) <= n``."""
    for n in range(2, 6):  # periodic tridiagonal matrices: L = U = 1
        offsets = tuple(sorted({-(n - 1), -1, 0, 1, n - 1}))
        assert periodic_split(offsets, n) is None
    assert periodic_split((-5, -1, 0, 1, 5), 6) == periodic.Split((1, 2, 3), 1, 1, (1, 1))
    # half-width 2: corners at ±(n - 2), ±(n - 1); n = 10 is the smallest that splits
    assert periodic_split((-8, -7, -2, -1, 0, 1, 2, 7, 8), 9) is None
    assert periodic_split((-9, -8, -2, -1, 0, 1, 2, 8, 9), 10) is not None
    # one corner (a periodic upwind stencil): L = 1, U = 0
    assert periodic_split((-1, 0, 2), 3) is None
    assert periodic_split((-1, 0, 3), 4) == periodic.Split((0, 1), 1, 0, (1, 0))


def ill_banded(dtype, n=40):
    """Periodic matrices, well conditioned, whose bands without the corners are nearly
    singular: a cyclic shift plus ``I / 2`` (``B^-1`` grows as ``2^k`` along the band),
    and the cyclic tridiagonal ``(1/4, 1e-8, 1)`` (odd ``n``: ``B`` has an eigenvalue
    ``1e-8``, ``A``'s are ``3/4`` or more in modulus)."""
    shift = np.roll(np.eye(n), 1, axis=1)
    tridiagonal = (
        1e-8 * np.eye(n + 1) + np.roll(np.eye(n + 1), 1, 1) + 0.25 * np.roll(np.eye(n + 1), -1, 1)
    )
    for dense in (shift + 0.5 * np.eye(n), tridiagonal):
        if dtype_kind(dtype):
            dense = dense * (1 + 1j) / np.sqrt(2)
        dense = dense.astype(dtype)
        yield jaxdia.DiaMatrix.from_scipy(sp.dia_array(dense)), dense


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_ill_conditioned_band_is_refused(dtype):
    """Outside ``jit`` the whole band is factored and solves are exact; under ``jit`` the
    factor says it failed (``info == -3``, ``ok`` False) and solves are NaN, never a
    finite answer that is wrong."""
    for A, dense in ill_banded(dtype):
        n = A.shape[0]
        assert periodic_split(A.offsets, n) is not None and condition(dense) < 10
        b = np.random.default_rng(n).standard_normal(n).astype(dtype)
        lu = jaxdia.lu_factor(A)
        assert lu.kind == "band"
        for trans in (0, 2):
            assert_solves(lu.solve(b, trans=trans), dense, b, dtype, trans=trans)
        assert_solves(jaxdia.solve_banded(A, b), dense, b, dtype)
        traced, solutions, x = jax.jit(factor_and_solve)(A, b)
        assert traced.kind == "periodic" and int(traced.info) == -3 and not bool(traced.ok)
        assert np.isnan(np.asarray([*solutions, x])).all()


def test_ill_conditioned_band_under_vmap_flags_only_its_member():
    """A batch of a good periodic matrix and one with a nearly singular band: under
    ``vmap`` (no fallback) the bad member is NaN and flagged, the good one exact."""
    n = 40
    bad = (np.roll(np.eye(n), 1, axis=1) + 0.5 * np.eye(n)).astype(np.float32)
    good = (np.roll(np.eye(n), 1, axis=1) + 3.0 * np.eye(n)).astype(np.float32)
    A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(good))
    B = jaxdia.DiaMatrix.from_scipy(sp.dia_array(bad)).with_offsets(A.offsets)
    data = jnp.stack([A.data, B.data])
    b = np.ones(n, np.float32)

    def member(d):
        M = jaxdia.DiaMatrix(d, A.offsets, A.shape)
        lu = jaxdia.lu_factor(M)
        return lu.ok, lu.solve(b), jaxdia.solve_banded(M, b)

    ok, x, y = jax.jit(jax.vmap(member))(data)
    assert np.asarray(ok).tolist() == [True, False]
    assert_solves(x[0], good, b, np.float32)
    assert_solves(y[0], good, b, np.float32)
    assert np.isnan(np.asarray(x[1])).all() and np.isnan(np.asarray(y[1])).all()
    # The batched factor outside jit falls back to the whole band for the whole batch.
    lu = jaxdia.lu_factor(jaxdia.DiaMatrix(data, A.offsets, A.shape))
    assert lu.kind == "band"
    for xi, dense in zip(np.asarray(lu.solve(np.stack([b, b])[..., None]))[..., 0], (good, bad)):
        assert_solves(xi, dense, b, np.float32)


def test_growth_below_the_bound_is_kept_and_accurate():
    """A cyclic shift plus ``0.9 I``, ``n = 40``: ``B^-1`` grows as ``0.9^-k``, a growth of
    about 70, below the bound: the periodic factor is kept, and its solves (all three
    ``trans``) are within that growth of a backward stable solve's accuracy."""
    n = 40
    for dtype in (np.float32, np.float64):
        dense = (np.roll(np.eye(n), 1, axis=1) + 0.9 * np.eye(n)).astype(dtype)
        A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(dense))
        b = np.random.default_rng(0).standard_normal(n).astype(dtype)
        for lu in (jaxdia.lu_factor(A), jax.jit(jaxdia.lu_factor)(A)):
            assert lu.kind == "periodic" and bool(lu.ok)
            growth = growths(lu)
            assert 10 < growth[0] < GROWTH
            for trans in (0, 1, 2):
                x = lu.solve(b, trans=trans)
                assert_solves(x, dense, b, dtype, growth[min(trans, 1)], trans)


def growths(lu, member=()) -> tuple[float, float]:
    """``||B^-1 A||`` in the infinity and the 1-norm for a periodic factor (``member`` of
    its batch; ``B^-1 A = I + Z V^T``): by how much its solves' errors, of ``A x = b`` and
    of the transposed systems, may exceed a backward stable solve's (see
    ``jaxdia._linalg.periodic``)."""
    n = lu.shape[0]
    G = np.eye(n, dtype=np.complex128)
    where = periodic_split(lu.matrix.offsets, n)
    G[:, periodic.columns(n, where)] += np.asarray(lu.factors[-3][member], np.complex128)
    return float(np.abs(G).sum(1).max()), float(np.abs(G).sum(0).max())


#: The main diagonal's scale in each member of :func:`periodic_systems`' batches.
SCALES = (1.0, 1e-3, 1e-6, 1e-12, 0.0)


@st.composite
def periodic_systems(draw):
    """A batch of random matrices of a band ``-l .. u`` and corners reaching ``p`` and
    ``q`` columns (offsets ``n - p .. n - 1`` and ``-(n - 1) .. -(n - q)``), ``n`` from 2
    to 12, their main diagonals scaled by :data:`SCALES` (so that their bands without the
    corners are often nearly singular), and right-hand sides."""
    n = draw(st.integers(2, 12))
    l, u, p, q = (draw(st.integers(0, 2)) for _ in range(4))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.complex128]))
    seed = draw(st.integers(0, 2**16))
    offsets = {*range(-l, u + 1), *range(n - p, n), *range(-(n - 1), -(n - q) + 1)}
    offsets = tuple(sorted(k for k in offsets if -n < k < n))
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((len(SCALES), len(offsets), n))
    if dtype_kind(dtype):
        data = data + 1j * rng.standard_normal(data.shape)
    if 0 in offsets:
        data[:, offsets.index(0)] *= np.array(SCALES)[:, None]
    A = jaxdia.DiaMatrix(data.astype(dtype), offsets, (n, n))
    return A, rng.standard_normal((len(SCALES), n, 1)).astype(dtype)


@jax.jit
def factor_and_solve_all(A, b):
    lu = jaxdia.lu_factor(A)
    # A^H x = b is A^T x = b for the real dtypes.
    return lu, {trans: lu.solve(b, trans=trans) for trans in (0, 2)}


# Few examples, each a batch: every one compiles its programs (about a second).
@settings(max_examples=examples(4))
@given(periodic_systems())
def test_accurate_or_flagged(systems):
    """Under ``jit`` (no fallback), ``A x = b`` and ``A^H x = b``: a factor with ``ok``
    solves to the accuracy its condition number allows (times its growth, at most the
    documented bound, for a periodic one), and one without gives NaN; never a wrong
    finite answer with ``ok``."""
    A, b = systems
    dense = dense_f64(A)
    lu, solutions = factor_and_solve_all(A, b)
    for member, ok in enumerate(np.asarray(lu.ok)):
        growth = growths(lu, member) if lu.kind == "periodic" and ok else (1.0, 1.0)
        for trans, x in solutions.items():
            x = np.asarray(x[member, :, 0])
            if ok:
                allowed = min(growth[min(trans, 1)], GROWTH)
                assert_solves(x, dense[member], b[member, :, 0], A.dtype, allowed, trans)
            else:
                assert np.isnan(x).all()
        assert growth[0] <= GROWTH
