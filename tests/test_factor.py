"""Factor once, solve many: lu_factor/lu_solve, cho_factor/cho_solve, solveh_banded,
factorized, the BandedLU/BandedCholesky pytrees and the lineax BandedSolver.

Oracles: SciPy's ``solve_banded``/``solveh_banded``, LAPACK's own factors through
``scipy.linalg.lapack`` (``?gbtrf``, ``?gttrf``, ``?pbtrf``, ``?pttrf``),
``scipy.sparse.linalg.splu``/``factorized`` and dense ``jnp.linalg.solve`` (gradients).
Most tests run both implementations, forced whatever the size (``method=``): LAPACK on the
host (``"lapack"``, CPU) and the ``lax.scan`` one (``"scan"``, GPU/TPU and small systems).
"""

import pickle

import jax
import jax.extend
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.linalg.lapack as lapack
import scipy.sparse as sp
import scipy.sparse.linalg as spla
from hypothesis import given, settings, strategies as st
from jax.test_util import check_grads

import jaxdia
from jaxdia import _dispatch
from jaxdia._checks import result_dtype
from jaxdia.testing import batch_shapes, dtypes

from .helpers import Forced, assert_close, dense_f64, examples
from .test_lowering import lowered_text

METHODS = ("lapack", "scan")


@pytest.fixture(params=METHODS)
def method(request):
    """Runs a test with LAPACK on the host, then with the ``lax.scan`` implementation: the
    banded functions with that ``method`` (see ``tests.helpers.Forced``)."""
    return Forced(request.param)


def random_band(n, lower, upper, dtype=np.float64, batch=(), seed=0, dominant=True, drop=()):
    """A random DiaMatrix with offsets ``-lower .. upper`` (less ``drop``) and NaN padding;
    diagonally dominant (well conditioned) unless told otherwise."""
    rng = np.random.default_rng(seed)
    offsets = tuple(k for k in range(-lower, upper + 1) if k not in drop)
    data = rng.standard_normal((*batch, len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data.shape)
    if dominant and 0 in offsets:
        main = data[..., offsets.index(0), :]
        data[..., offsets.index(0), :] = main + 2.0 * len(offsets) * np.sign(main.real)
    cols = np.arange(n)
    for k, offset in enumerate(offsets):
        data[..., k, (cols - offset < 0) | (cols - offset >= n)] = np.nan
    return jaxdia.DiaMatrix(data.astype(dtype), offsets, (n, n))


def hermitian_band(n, kd, dtype=np.float64, batch=(), seed=0, lower=False):
    """A random Hermitian positive definite band (both triangles stored, NaN padding)."""
    rng = np.random.default_rng(seed)
    offsets = tuple(range(-kd, kd + 1))
    dense = np.zeros((*batch, n, n), np.complex128 if np.dtype(dtype).kind == "c" else float)
    for offset in range(1, min(kd, n - 1) + 1):
        values = rng.standard_normal((*batch, n - offset))
        if dense.dtype.kind == "c":
            values = values + 1j * rng.standard_normal(values.shape)
        index = np.arange(n - offset)
        dense[..., index, index + offset] = values
    dense = dense + np.conj(np.swapaxes(dense, -1, -2))
    # Diagonally dominant with a positive diagonal: positive definite.
    dense[..., np.arange(n), np.arange(n)] = np.abs(dense).sum(-1) + 1.0 + rng.random((*batch, n))
    S_data = np.zeros((*batch, len(offsets), n), dense.dtype)
    for k, offset in enumerate(offsets):
        for j in range(n):
            i = j - offset
            S_data[..., k, j] = dense[..., i, j] if 0 <= i < n else np.nan
    return jaxdia.DiaMatrix(S_data.astype(dtype), offsets, (n, n))


def rhs(shape, dtype=np.float64, seed=1):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(shape)
    return b.astype(dtype)


def widths(A):
    return max(0, -A.offsets[0]) if A.offsets else 0, max(0, A.offsets[-1]) if A.offsets else 0


def ab_of(dense, lower, upper):
    """``scipy.linalg.solve_banded``'s ``ab`` of one dense matrix."""
    n = dense.shape[0]
    ab = np.zeros((lower + upper + 1, n), dense.dtype)
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            ab[upper + i - j, j] = dense[i, j]
    return ab


def scipy_solve(A, b, trans=0):
    """The oracle, system by system: ``scipy.linalg.solve_banded`` on op(A) in double
    precision, over the broadcast batch of ``A`` and ``b`` (``b`` ``(n,)`` or
    ``(..., n, k)``)."""
    dense = dense_f64(A)
    dense = {0: dense, 1: np.swapaxes(dense, -1, -2), 2: np.conj(np.swapaxes(dense, -1, -2))}[trans]
    b = np.asarray(b).astype(
        np.complex128 if np.iscomplexobj(b) or dense.dtype.kind == "c" else float
    )
    vector = b.ndim == 1
    b = b[:, None] if vector else b
    batch = np.broadcast_shapes(A.batch_shape, b.shape[:-2])
    dense = np.broadcast_to(dense, (*batch, *dense.shape[-2:]))
    b = np.broadcast_to(b, (*batch, *b.shape[-2:]))
    lower, upper = widths(A)
    if trans:
        lower, upper = upper, lower
    x = np.zeros(b.shape, np.result_type(dense, b))
    for index in np.ndindex(*batch):
        x[index] = sla.solve_banded((lower, upper), ab_of(dense[index], lower, upper), b[index])
    return x[..., 0] if vector else x


# -- LU against SciPy -----------------------------------------------------------------------


@pytest.fixture
def forced(request):
    """Like ``method``, for a test parametrized with ``method`` itself (the ``lax.scan``
    implementation compiles for seconds: it runs a subset of the cases)."""
    return Forced(request.param)


def _cases(cases, scan):
    """``cases`` with LAPACK, and those at indices ``scan`` with the scan too."""
    return [("lapack", *case) for case in cases] + [("scan", *cases[i]) for i in scan]


@pytest.mark.parametrize(
    "forced, lower, upper, dtype, columns",
    _cases(
        [
            (1, 1, np.float64, None),
            (1, 1, np.complex128, 3),
            (0, 1, np.float32, None),
            (1, 0, np.complex64, 2),
            (2, 2, np.float64, None),
            (2, 1, np.complex128, 2),
            (3, 0, np.float64, 1),
            (0, 4, np.float32, None),
            (5, 3, np.float64, 2),
        ],
        scan=[1, 2, 5, 8],
    ),
    indirect=["forced"],
)
def test_lu_matches_scipy(forced, lower, upper, dtype, columns):
    n = 19
    A = random_band(n, lower, upper, dtype, seed=lower + 3 * upper)
    lu = jax.jit(forced.lu_factor)(A)
    assert lu.kind == ("tridiagonal" if max(lower, upper) <= 1 else "band")
    b = rhs((n,) if columns is None else (n, columns), dtype)
    for trans in (0, 1, 2):
        x = jax.jit(jaxdia.lu_solve, static_argnums=2)(lu, b, trans)
        assert x.shape == b.shape and x.dtype == dtype
        assert_close(x, scipy_solve(A, b, trans), dtype, scale=100)


@pytest.mark.parametrize(
    "forced, lower, upper, dtype",
    _cases(
        [
            (1, 1, np.float64),
            (1, 1, np.complex128),
            (2, 3, np.float64),
            (2, 3, np.complex128),
            (0, 2, np.float32),
            (2, 3, np.float32),
        ],
        scan=[1, 2, 4],
    ),
    indirect=["forced"],
)
def test_lu_factor_is_lapacks(forced, lower, upper, dtype):
    """The stored factor is LAPACK's ``?gbtrf`` (``?gttrf`` for tridiagonal) factor, in
    the documented layout, whichever implementation computed it (non-dominant matrices:
    rows are interchanged)."""
    n = 11
    A = random_band(n, lower, upper, dtype, seed=7, dominant=False)
    lu = forced.lu_factor(A)
    dense = dense_f64(A).astype(dtype)
    prefix = {"f": "d", "c": "z"}[np.dtype(dtype).kind]
    prefix = (
        prefix
        if np.dtype(dtype).itemsize >= 16 or dtype == np.float64
        else {"d": "s", "z": "c"}[prefix]
    )
    rtol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    if lu.kind == "tridiagonal":
        gttrf = getattr(lapack, prefix + "gttrf")
        dl, d, du, du2, ipiv, info = gttrf(np.diag(dense, -1), np.diag(dense), np.diag(dense, 1))
        assert info == 0
        np.testing.assert_array_equal(lu.pivots, ipiv - 1)  # SciPy's ?gttrf: 1-based
        for row, expected in zip(np.asarray(lu.lu), (dl, d, du, du2)):
            np.testing.assert_allclose(row[: len(expected)], expected, rtol=rtol, atol=rtol)
        return
    ab = np.zeros((2 * lower + upper + 1, n), dense.dtype)
    ab[lower:] = ab_of(dense, lower, upper)
    gbtrf = getattr(lapack, prefix + "gbtrf")
    expected, ipiv, info = gbtrf(ab, lower, upper)
    assert info == 0
    np.testing.assert_array_equal(lu.pivots, ipiv)
    got = np.asarray(lu.lu).T
    # LAPACK leaves the corners outside the matrix unset: compare the slots inside.
    rows, cols = np.meshgrid(np.arange(ab.shape[0]), np.arange(n), indexing="ij")
    u_part = (rows <= lower + upper) & (cols - (lower + upper - rows) >= 0)
    l_part = (rows > lower + upper) & (cols + rows - lower - upper < n)
    inside = u_part | l_part
    np.testing.assert_allclose(got[inside], expected[inside], rtol=rtol, atol=rtol)


def test_lu_pivots_through_zero_diagonals(method):
    """A zero main diagonal defeats LU without pivoting; row interchanges solve it."""
    for lower, upper, drop in [(1, 1, (0,)), (3, 1, (-2, -1, 0)), (1, 3, (0, 1))]:
        A = random_band(8, lower, upper, seed=2, dominant=False, drop=drop)
        b = rhs((8,))
        lu = method.lu_factor(A)
        for trans in (0, 1):
            np.testing.assert_allclose(lu.solve(b, trans), scipy_solve(A, b, trans), rtol=1e-9)


@settings(max_examples=examples(12))
@given(st.data())
def test_lu_property(data):
    """Bands of 0 to 6 diagonals on each side (sometimes wider), batches, every dtype,
    vectors and stacks of right-hand sides broadcasting with the matrices' batch."""
    width = st.one_of(st.integers(0, 6), st.sampled_from([9, 13]))
    lower, upper = data.draw(width), data.draw(width)
    n = data.draw(st.integers(1, 18))
    dtype = data.draw(dtypes())
    batch = data.draw(batch_shapes(max_dims=2, max_size=3))
    method = data.draw(st.sampled_from(METHODS))
    seed = data.draw(st.integers(0, 2**16))
    A = random_band(n, lower, upper, dtype, batch=batch, seed=seed)
    if data.draw(st.booleans()):
        b = rhs((n,), dtype, seed + 1)
    else:
        b_batch = data.draw(st.sampled_from([(), batch, batch[1:], (2, *batch)]))
        b = rhs((*b_batch, n, data.draw(st.integers(1, 3))), dtype, seed + 1)
    trans = data.draw(st.sampled_from([0, 1, 2]))
    x = jaxdia.lu_factor(A, method=method).solve(b, trans)
    assert x.dtype == dtype
    wide = np.dtype(np.float32) if np.dtype(dtype).itemsize == 2 else dtype
    scale = 400 if np.dtype(dtype).itemsize == 2 else 100
    assert_close(np.asarray(x, wide), scipy_solve(A, b, trans), dtype, scale=scale)


# -- Cholesky against SciPy -----------------------------------------------------------------


@pytest.mark.parametrize(
    "forced, kd, dtype, columns, lower",
    _cases(
        [
            (0, np.float64, None, False),
            (1, np.float64, 2, True),
            (1, np.complex128, None, False),
            (2, np.float32, 3, True),
            (3, np.complex128, 2, False),
            (3, np.complex128, 2, True),
            (5, np.float64, None, False),
            (2, np.complex64, None, True),
        ],
        scan=[2, 3, 5],
    ),
    indirect=["forced"],
)
def test_cholesky_matches_scipy(forced, kd, dtype, columns, lower):
    n = 17
    A = hermitian_band(n, kd, dtype, seed=kd)
    c = jax.jit(forced.cho_factor, static_argnums=1)(A, lower)
    assert c.kind == ("tridiagonal" if kd <= 1 else "band") and c.lower == lower
    b = rhs((n,) if columns is None else (n, columns), dtype)
    dense = dense_f64(A)
    ab = np.stack([np.concatenate([np.zeros(k), np.diag(dense, k)]) for k in range(kd, -1, -1)])
    expected = sla.solveh_banded(ab, b.astype(dense.dtype))
    assert_close(jax.jit(jaxdia.cho_solve)(c, b), expected, dtype, scale=50)
    assert_close(forced.solveh_banded(A, b, lower=lower), expected, dtype, scale=50)
    assert_close(c.solve(b), scipy_solve(A, b), dtype, scale=50)


@pytest.mark.parametrize(
    "forced, kd, dtype",
    _cases([(1, np.float64), (1, np.complex128), (3, np.float64), (3, np.complex128)], [1, 3]),
    indirect=["forced"],
)
def test_cholesky_factor_is_lapacks(forced, kd, dtype):
    n = 9
    A = hermitian_band(n, kd, dtype, seed=3)
    dense = dense_f64(A)
    prefix = "d" if dtype == np.float64 else "z"
    for lower in (False, True):
        c = forced.cho_factor(A, lower=lower)
        if kd == 1:
            d, e, info = getattr(lapack, prefix + "pttrf")(np.diag(dense).real, np.diag(dense, -1))
            assert info == 0
            np.testing.assert_allclose(c.factors[0], d, rtol=1e-12)
            np.testing.assert_allclose(c.factors[1][:-1], e, rtol=1e-12)
            continue
        if lower:
            ab = np.stack(
                [np.concatenate([np.diag(dense, -k), np.zeros(k)]) for k in range(kd + 1)]
            )
        else:
            ab = np.stack(
                [np.concatenate([np.zeros(k), np.diag(dense, k)]) for k in range(kd, -1, -1)]
            )
        expected, info = getattr(lapack, prefix + "pbtrf")(ab, lower=int(lower))
        assert info == 0
        got = np.asarray(c.factors[0]).T
        inside = ab != 0
        np.testing.assert_allclose(got[inside], expected[inside], rtol=1e-12)


def test_cholesky_reads_one_triangle():
    """Like SciPy's: only the triangle ``lower`` selects is read (the other may hold
    anything), and the diagonal's real part."""
    A = hermitian_band(8, 2, np.complex128, seed=4)
    dense = dense_f64(A)
    offsets = A.offsets
    garbage = np.asarray(A.data).copy()
    for k, offset in enumerate(offsets):
        if offset < 0:
            garbage[k] = 99.0 + 7j
    garbage[offsets.index(0)] += 5j  # an imaginary diagonal part is ignored
    upper_only = jaxdia.DiaMatrix(garbage, offsets, A.shape)
    b = rhs((8,), np.complex128)
    np.testing.assert_allclose(jaxdia.solveh_banded(upper_only, b), np.linalg.solve(dense, b))


@settings(max_examples=examples(8))
@given(st.data())
def test_cholesky_property(data):
    kd = data.draw(st.one_of(st.integers(0, 6), st.just(10)))
    n = data.draw(st.integers(1, 16))
    dtype = data.draw(dtypes())
    batch = data.draw(batch_shapes(max_dims=2, max_size=3))
    lower = data.draw(st.booleans())
    seed = data.draw(st.integers(0, 2**16))
    A = hermitian_band(n, kd, dtype, batch=batch, seed=seed)
    b = rhs((*batch, n, 2), dtype, seed + 1)
    method = data.draw(st.sampled_from(METHODS))
    x = jaxdia.cho_factor(A, lower=lower, method=method).solve(b)
    assert x.dtype == dtype
    wide = np.dtype(np.float32) if np.dtype(dtype).itemsize == 2 else dtype
    scale = 400 if np.dtype(dtype).itemsize == 2 else 50
    assert_close(np.asarray(x, wide), scipy_solve(A, b), dtype, scale=scale)


# -- SciPy's sparse LU and factorized ------------------------------------------------------


def test_factorized_matches_splu():
    rng = np.random.default_rng(0)
    n = 30
    S = sp.diags_array(
        [
            rng.standard_normal(n - 3),
            rng.standard_normal(n - 1),
            6 + rng.random(n),
            rng.standard_normal(n - 2),
        ],
        offsets=[-3, -1, 0, 2],
    ).tocsc()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs((n, 2))
    solve = jaxdia.factorized(A)
    expected = spla.splu(S).solve(b)
    np.testing.assert_allclose(solve(b), expected, rtol=1e-12)
    np.testing.assert_allclose(jax.jit(lambda f, b: f(b))(solve, b), expected, rtol=1e-12)
    np.testing.assert_allclose(solve(b[:, 0]), spla.factorized(S)(b[:, 0]), rtol=1e-12)
    np.testing.assert_allclose(solve(b, 1), spla.splu(S).solve(b, trans="T"), rtol=1e-12)


# -- dtypes and batches --------------------------------------------------------------------


def test_dtype_rules():
    A = random_band(12, 2, 1, np.float32)
    lu = jaxdia.lu_factor(A)
    assert lu.dtype == np.float32
    b64 = rhs((12,), np.float64)
    assert lu.solve(b64).dtype == np.float64
    # A real factor solves a complex b as its real and imaginary parts.
    A64 = random_band(12, 2, 1, np.float64)
    bc = rhs((12, 2), np.complex128)
    for factor in (jaxdia.lu_factor(A64), jaxdia.cho_factor(hermitian_band(12, 2))):
        x = factor.solve(bc)
        assert x.dtype == np.complex128
        np.testing.assert_allclose(x, scipy_solve(factor.matrix, bc), rtol=1e-10)
    # 16-bit matrices are factored in float32; the solution comes back in 16 bits.
    for low in (jnp.bfloat16, np.float16):
        A16 = random_band(12, 1, 2, low)
        lu16 = jaxdia.lu_factor(A16)
        assert lu16.dtype == np.float32
        x = lu16.solve(np.ones(12, low))
        assert x.dtype == low
        assert_close(np.asarray(x, np.float32), scipy_solve(A16, np.ones(12)), low, scale=4)
    # integer right-hand sides give the default float
    assert jaxdia.lu_factor(A64).solve(np.arange(12)).dtype == np.float64


def test_solution_dtypes_follow_jax_promotion_in_every_setting():
    """A solve's dtype is promoted once per combination (the dtypes, a weakly typed b,
    JAX's x64 and promotion settings) and remembered: every setting gets its own answer,
    that of ``jnp.result_type`` on the arrays, traced too, and an error of one (strict
    promotion) is raised again, never remembered as an answer."""
    n = 6

    def expected(matrix_dtype, b):
        dtype = jnp.result_type(jnp.zeros((), matrix_dtype), b)
        return np.dtype(dtype if jnp.issubdtype(dtype, jnp.inexact) else jnp.result_type(float))

    weak = jnp.broadcast_to(jnp.asarray(2.0), (n,))
    assert weak.weak_type
    right_hand_sides = [
        np.arange(n),
        np.ones(n, np.float32),
        np.ones(n, np.float64),
        jnp.ones(n, jnp.float32),
        jnp.ones(n, jnp.bfloat16),
        jnp.ones(n, jnp.complex64),
        weak,
    ]
    for matrix_dtype in (np.float32, np.float64, np.complex64, jnp.bfloat16):
        for b in right_hand_sides:
            want = expected(matrix_dtype, b)
            assert result_dtype(matrix_dtype, b) == want, (matrix_dtype, b.dtype)
            traced = jax.eval_shape(lambda b: jnp.zeros((), result_dtype(matrix_dtype, b)), b)
            assert traced.dtype == want, (matrix_dtype, b.dtype)
    lu32 = jaxdia.lu_factor(random_band(n, 1, 1, np.float32))
    b64 = jnp.ones(n, jnp.float64)
    assert lu32.solve(weak).dtype == np.float32
    for _ in range(2):  # the second time from what was remembered
        with jax.numpy_dtype_promotion("strict"):
            with pytest.raises(Exception) as raised:  # noqa: PT011 (the oracle's type)
                jnp.result_type(jnp.zeros((), np.float32), b64)
            with pytest.raises(type(raised.value)):
                lu32.solve(b64)
        assert lu32.solve(b64).dtype == np.float64
        with jax.enable_x64(False):
            assert result_dtype(np.float32, np.ones(n)) == np.float32


@pytest.mark.parametrize("forced", ["lapack", "scan"], indirect=True)
def test_batches_broadcast(forced):
    n = 10
    A = random_band(n, 2, 1, batch=(3,), seed=5)
    lu = forced.lu_factor(A)
    assert lu.batch_shape == (3,) and lu.lu.shape == (3, n, 6) and lu.info.shape == (3,)
    for b in (rhs((n,)), rhs((3, n, 2)), rhs((2, 3, n, 1)), rhs((n, 4))):
        np.testing.assert_allclose(lu.solve(b), scipy_solve(A, b), rtol=1e-10)
    # one matrix, a batch of right-hand sides
    single = forced.lu_factor(random_band(n, 2, 1, seed=6))
    b = rhs((4, 2, n, 3))
    np.testing.assert_allclose(single.solve(b), scipy_solve(single.matrix, b), rtol=1e-10)


# -- transformations -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "forced, lower, upper",
    [("lapack", 1, 1), ("lapack", 2, 3), ("scan", 2, 3)],
    indirect=["forced"],
)
def test_vmap(forced, lower, upper):
    n, batch = 9, 4
    A = random_band(n, lower, upper, batch=(batch,), seed=8)
    offsets = A.offsets
    bs = rhs((batch, n))
    expected = scipy_solve(A, bs[..., None])[..., 0]

    def factor(d):
        return forced.lu_factor(jaxdia.DiaMatrix(d, offsets, (n, n)))

    lus = jax.vmap(factor)(A.data)
    assert lus.batch_shape == (batch,)
    np.testing.assert_allclose(jax.vmap(jaxdia.lu_solve)(lus, bs), expected, rtol=1e-10)
    # matrices only, right-hand sides only, and a factor vmapped with in_axes=None
    single = factor(A.data[0])
    np.testing.assert_allclose(
        jax.vmap(lambda lu: lu.solve(bs[0]))(lus),
        scipy_solve(A, bs[0]),
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        jax.vmap(single.solve)(bs),
        scipy_solve(single.matrix, bs.T).T,
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        jax.vmap(jaxdia.lu_solve, in_axes=(None, 0))(single, bs),
        scipy_solve(single.matrix, bs.T).T,
        rtol=1e-10,
    )
    # Cholesky, vmapped over matrices and right-hand sides together
    H = hermitian_band(n, 2, batch=(batch,), seed=9)
    solve = jax.vmap(lambda d, b: forced.solveh_banded(jaxdia.DiaMatrix(d, H.offsets, H.shape), b))
    np.testing.assert_allclose(solve(H.data, bs), scipy_solve(H, bs[..., None])[..., 0], rtol=1e-10)


def test_factor_in_loops(method):
    """Factor outside, solve inside ``lax.scan`` and ``fori_loop``; a factor as a scan
    carry and as a ``jit`` argument and result."""
    n, steps = 12, 5
    A = random_band(n, 2, 2, seed=10)
    u0 = rhs((n,))
    expected = u0
    for _ in range(steps):
        expected = scipy_solve(A, expected)

    @jax.jit
    def closed(A, u):
        lu = method.lu_factor(A)
        return jax.lax.scan(lambda u, _: (lu.solve(u), None), u, length=steps)[0]

    @jax.jit
    def carried(lu, u):
        def step(carry, _):
            lu, u = carry
            return (lu, lu.solve(u)), None

        return jax.lax.scan(step, (lu, u), length=steps)[0][1]

    lu = jax.jit(method.lu_factor)(A)
    fori = jax.jit(lambda lu, u: jax.lax.fori_loop(0, steps, lambda _, u: lu.solve(u), u))
    for got in (closed(A, u0), carried(lu, u0), fori(lu, u0)):
        np.testing.assert_allclose(got, expected, rtol=1e-10)
    c = method.cho_factor(hermitian_band(n, 3, seed=11))
    cho_fori = jax.jit(lambda c, u: jax.lax.fori_loop(0, steps, lambda _, u: c.solve(u), u))
    expected = u0
    for _ in range(steps):
        expected = scipy_solve(c.matrix, expected)
    np.testing.assert_allclose(cho_fori(c, u0), expected, rtol=1e-10)


# -- gradients -----------------------------------------------------------------------------


def _zero_padding(A):
    """``A.data`` with zeros in padding slots (finite differences perturb them too)."""
    return jnp.where(jnp.isnan(A.data), 0, A.data)


def _dense_solve(data, offsets, shape, b, trans=0, lower=None):
    D = jaxdia.DiaMatrix(data, offsets, shape).todense()
    if lower is not None:  # the Hermitian matrix one triangle defines
        T = jnp.tril(D, -1) if lower else jnp.triu(D, 1)
        D = T + T.conj().T + jnp.diag(jnp.diag(D).real)
    D = {0: D, 1: D.T, 2: D.conj().T}[trans]
    return jnp.linalg.solve(D, b)


@pytest.mark.parametrize(
    "forced, lower, upper, dtype, trans, columns",
    _cases(
        [
            (1, 1, np.float64, 0, None),
            (1, 1, np.complex128, 2, 2),
            (2, 1, np.float64, 1, 2),
            (2, 3, np.complex128, 0, None),
            (1, 2, np.complex128, 1, None),
        ],
        scan=[4],
    ),
    indirect=["forced"],
)
def test_lu_gradients(forced, lower, upper, dtype, trans, columns):
    n = 7
    A = random_band(n, lower, upper, dtype, seed=12)
    data, offsets = _zero_padding(A), A.offsets
    b = jnp.asarray(rhs((n,) if columns is None else (n, columns), dtype, seed=13))

    def solve(d, b):  # factor and solve inside the differentiated function
        return jaxdia.lu_solve(forced.lu_factor(jaxdia.DiaMatrix(d, offsets, (n, n))), b, trans)

    check_grads(jax.jit(solve), (data, b), order=1, modes=("fwd", "rev"))
    weights = jnp.asarray(rhs(b.shape, seed=14))
    got = jax.grad(lambda d, b: jnp.sum(weights * jnp.abs(solve(d, b)) ** 2), (0, 1))(data, b)
    expected = jax.grad(
        lambda d, b: jnp.sum(weights * jnp.abs(_dense_solve(d, offsets, A.shape, b, trans)) ** 2),
        (0, 1),
    )(data, b)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-11)


@pytest.mark.parametrize(
    "forced, kd, dtype, lower",
    _cases(
        [
            (1, np.float64, False),
            (2, np.complex128, True),
            (1, np.complex128, True),
            (2, np.float64, False),
        ],
        scan=[1],
    ),
    indirect=["forced"],
)
def test_cholesky_gradients(forced, kd, dtype, lower):
    n = 7
    H = hermitian_band(n, kd, dtype, seed=15)
    data, offsets = _zero_padding(H), H.offsets
    b = jnp.asarray(rhs((n,), dtype, seed=16))

    def solve(d, b):
        return forced.solveh_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b, lower=lower)

    check_grads(jax.jit(solve), (data, b), order=1, modes=("fwd", "rev"))
    weights = jnp.asarray(rhs((n,), seed=17))
    got = jax.grad(lambda d, b: jnp.sum(weights * jnp.abs(solve(d, b)) ** 2), (0, 1))(data, b)
    expected = jax.grad(
        lambda d, b: jnp.sum(
            weights * jnp.abs(_dense_solve(d, offsets, H.shape, b, lower=lower)) ** 2
        ),
        (0, 1),
    )(data, b)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-11)


def _subjaxprs(value):
    if isinstance(value, jax.extend.core.ClosedJaxpr):
        yield value.jaxpr
    elif isinstance(value, jax.extend.core.Jaxpr):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _subjaxprs(item)


def _count(jaxpr, name):
    """Equations of primitive ``name`` in ``jaxpr`` and its sub-jaxprs."""
    total = 0
    for eqn in jaxpr.eqns:
        total += eqn.primitive.name == name
        for value in eqn.params.values():
            total += sum(_count(sub, name) for sub in _subjaxprs(value))
    return total


@pytest.mark.parametrize("cholesky", [False, True])
def test_gradients_reuse_the_factor(cholesky):
    """The backward (and forward-mode) pass solves with the stored factor: the
    differentiated program factors once."""
    n = 8
    A = hermitian_band(n, 2, seed=18) if cholesky else random_band(n, 2, 1, seed=18)

    def loss(d, b):
        matrix = jaxdia.DiaMatrix(d, A.offsets, A.shape)
        factor = jaxdia.cho_factor(matrix) if cholesky else jaxdia.lu_factor(matrix)
        x = factor.solve(b)
        return jnp.sum(factor.solve(x) ** 2)  # two solves with one factor

    data, b = _zero_padding(A), jnp.asarray(rhs((n,)))
    grad = jax.make_jaxpr(jax.grad(loss, argnums=(0, 1)))(data, b).jaxpr
    assert _count(grad, "jaxdia_band_factor") == 1
    assert _count(grad, "jaxdia_band_solve") >= 4  # forward and transposed solves
    jvp = jax.make_jaxpr(lambda d, b: jax.jvp(loss, (d, b), (d, b)))(data, b).jaxpr
    assert _count(jvp, "jaxdia_band_factor") == 1


# -- bad input -----------------------------------------------------------------------------


def test_errors():
    with pytest.raises(ValueError, match="square"):
        jaxdia.lu_factor(jaxdia.eye(3, 4))
    with pytest.raises(ValueError, match="square"):
        jaxdia.cho_factor(jaxdia.eye(4, 3))
    with pytest.raises(TypeError, match="DiaMatrix"):
        jaxdia.lu_factor(np.eye(3))
    with pytest.raises(TypeError, match="lower must be a bool"):
        jaxdia.cho_factor(jaxdia.eye(3), lower="upper")
    lu = jaxdia.lu_factor(random_band(5, 1, 1))
    for bad in (3, "C", 1.0, True):
        with pytest.raises(ValueError, match="trans must be 0, 1, 2, 'N', 'T' or 'H'"):
            lu.solve(np.ones(5), trans=bad)
    with pytest.raises(ValueError, match=r"b must have shape \(5,\) or \(\.\.\., 5, k\)"):
        lu.solve(np.ones(4))
    with pytest.raises(TypeError, match="BandedLU"):
        jaxdia.lu_solve(jaxdia.cho_factor(jaxdia.eye(3)), np.ones(3))
    with pytest.raises(TypeError, match="BandedCholesky"):
        jaxdia.cho_solve(lu, np.ones(5))
    with pytest.raises(TypeError, match="lu_factor"):
        jaxdia.BandedLU()
    with pytest.raises(ValueError, match="do not broadcast"):
        jaxdia.lu_factor(random_band(5, 1, 2, batch=(2,))).solve(np.ones((3, 5, 1)))
    # vmap over a matrix without batch dims maps its diagonals: an error, as in DiaMatrix
    unbatched = random_band(5, 1, 1)
    for factor in (jaxdia.lu_factor, jaxdia.cho_factor, jaxdia.factorized):
        with pytest.raises(ValueError, match=r"data has shape \(5,\)"):
            jax.vmap(factor)(unbatched)


def test_singular_and_indefinite(method):
    """Outside jit: a LinAlgError naming LAPACK's info; under jit: NaN and ``info``."""
    A = random_band(6, 2, 1, dominant=False, seed=19)
    singular = jaxdia.DiaMatrix(A.data.at[:, 3].set(0.0), A.offsets, A.shape)  # zero column 3
    with pytest.raises(np.linalg.LinAlgError, match=r"pivot U\[3, 3\] is zero \(LAPACK info = 4\)"):
        method.lu_factor(singular)
    lu = jax.jit(method.lu_factor)(singular)
    assert int(lu.info) == 4 and not bool(lu.ok)
    assert np.isnan(jax.jit(jaxdia.lu_solve)(lu, np.ones(6))).all()
    assert np.isnan(method.solve_banded(singular, np.ones(6))).all()  # never raises
    # a batch names the failing matrix
    batch = jaxdia.DiaMatrix(jnp.stack([A.data, singular.data]), A.offsets, A.shape)
    with pytest.raises(np.linalg.LinAlgError, match=r"matrix \(1,\) of the batch"):
        method.lu_factor(batch)
    tridiagonal = jaxdia.diags([[1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 0.0]], [-1, 0, 1])
    with pytest.raises(np.linalg.LinAlgError, match=r"U\[2, 2\] is zero \(LAPACK info = 3\)"):
        method.lu_factor(tridiagonal)  # rows 0 and 1 are equal: row 2 is swapped up
    for kd in (1, 3):
        H = hermitian_band(7, kd, seed=20)
        bad = jaxdia.DiaMatrix(H.data.at[kd, 2].set(-50.0), H.offsets, H.shape)  # A[2, 2] < 0
        with pytest.raises(np.linalg.LinAlgError, match="leading minor of order 3"):
            method.cho_factor(bad)
        with pytest.raises(np.linalg.LinAlgError, match="not Hermitian positive definite"):
            method.solveh_banded(bad, np.ones(7))
        c = jax.jit(method.cho_factor)(bad)
        assert int(c.info) == 3 and not bool(c.ok)
        assert np.isnan(jax.jit(jaxdia.cho_solve)(c, np.ones(7))).all()


def test_edge_cases():
    empty = jaxdia.lu_factor(jaxdia.eye(0))
    assert empty.solve(jnp.zeros(0)).shape == (0,)
    one = jaxdia.lu_factor(jaxdia.diags([[2.0]], offsets=[0]))
    np.testing.assert_allclose(one.solve(jnp.array([4.0])), [2.0])
    with pytest.raises(np.linalg.LinAlgError):
        jaxdia.lu_factor(jaxdia.DiaMatrix(jnp.zeros((0, 3)), (), (3, 3)))  # no diagonal
    np.testing.assert_allclose(jaxdia.cho_factor(jaxdia.eye(4)).solve(jnp.ones(4)), 1.0)


def test_eager_solves_trace_once(caplog):
    """An eager solve is one call of a program compiled once per layout, ``b``'s shape and
    dtype, and ``trans``: a second call, another ``b`` of the same kind (a JAX, NumPy or
    integer array), another factor of the same layout trace and compile nothing, and the
    answers stay right. JAX's compile log is the witness: a new shape does log."""
    A, H = random_band(9, 2, 1, seed=31), hermitian_band(9, 1, seed=32)
    lu, c = jaxdia.lu_factor(A), jaxdia.cho_factor(H)
    b = rhs(9)
    for solve in (lu.solve, lambda b: lu.solve(b, 1), c.solve):
        solve(jnp.asarray(b))  # traced and compiled here
    other = jaxdia.lu_factor(random_band(9, 2, 1, seed=33))
    with jax.log_compiles(), caplog.at_level("WARNING", logger="jax"):
        caplog.clear()
        x = lu.solve(jnp.asarray(b))
        x_numpy = lu.solve(b)
        x_integers = lu.solve(np.arange(9))
        x_transposed = lu.solve(jnp.asarray(b), 1)
        x_cholesky = c.solve(jnp.asarray(b))
        x_other = other.solve(jnp.asarray(b))
        assert [record.getMessage() for record in caplog.records] == []
        lu.solve(jnp.ones((9, 2)))  # a new shape: traced and compiled
        assert any("_solve" in record.getMessage() for record in caplog.records)
    assert_close(x, scipy_solve(A, b), np.float64)
    assert_close(x_numpy, scipy_solve(A, b), np.float64)
    assert_close(x_integers, scipy_solve(A, np.arange(9.0)), np.float64)
    assert_close(x_transposed, scipy_solve(A, b, 1), np.float64)
    assert_close(x_cholesky, scipy_solve(H, b), np.float64)
    assert_close(x_other, scipy_solve(other.matrix, b), np.float64)


# -- the pytrees ---------------------------------------------------------------------------


def test_pytree_structure():
    A = random_band(6, 2, 1, batch=(2,))
    lu = jaxdia.lu_factor(A)
    leaves, tree = jax.tree_util.tree_flatten(lu)
    assert len(leaves) == 4  # data, lu, pivots, info
    again = jax.tree_util.tree_unflatten(tree, leaves)
    np.testing.assert_array_equal(again.solve(np.ones(6)), lu.solve(np.ones(6)))
    paths = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(lu)[0]]
    assert paths == [".data", ".lu", ".pivots", ".info"]
    assert repr(lu) == (
        "BandedLU(shape=(6, 6), dtype=float64, kind='band', lower=2, upper=1, batch_shape=(2,))"
    )
    assert "leaves=" in repr(jax.tree.map(lambda _: None, lu))
    with pytest.raises(AttributeError, match="immutable"):
        lu.lu = None  # type: ignore[misc]
    restored = pickle.loads(pickle.dumps(lu))
    np.testing.assert_array_equal(restored.lu, lu.lu)
    c = jaxdia.cho_factor(hermitian_band(5, 1), lower=True)
    keys = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(c)[0]]
    assert keys == [".data", ".d", ".e", ".info"]
    assert repr(c) == (
        "BandedCholesky(shape=(5, 5), dtype=float64, kind='tridiagonal', lower=True, bandwidth=1)"
    )
    assert c.matrix.shape == (5, 5) and c.factors[0].shape == (5,)
    band = jaxdia.cho_factor(hermitian_band(6, 2))
    keys = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(band)[0]]
    assert keys == [".data", ".c", ".info"]
    assert band.bandwidth == 2


# -- lowering: LAPACK on CPU only ----------------------------------------------------------


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("cholesky", [False, True])
@pytest.mark.parametrize("lower", [1, 3])
def test_accelerators_lower_the_scan(platform, cholesky, lower):
    """LAPACK's kinds of factor (the CPU's; traced here on a CPU) lower to ``lax.scan``
    loops on GPU and TPU, never a host call (the CPU program of the same function calls
    LAPACK). A factor traced for GPU or TPU is cyclic reduction's instead
    (``tests/test_band_parallel.py``)."""
    n = _dispatch.SCAN_ROWS + 1
    A = hermitian_band(n, lower, np.float32) if cholesky else random_band(n, lower, 2, np.float32)

    def factor_and_solve(A, b):
        factor = jaxdia.cho_factor(A) if cholesky else jaxdia.lu_factor(A)
        return jax.vmap(factor.solve)(b)

    b = jnp.ones((3, n), jnp.float32)
    assert "jaxdia_lapack" in lowered_text(factor_and_solve, A, b, platform="cpu")
    text = lowered_text(factor_and_solve, A, b, platform=platform)
    assert "jaxdia_lapack" not in text and "stablehlo.while" in text


def test_solve_banded_tridiagonal_on_gpu_is_one_library_call():
    """A one-shot tridiagonal solve on GPU keeps cuSPARSE's ``gtsv2`` (parallel, with
    pivoting), and so do its gradients; the factor's scan would take ``n`` steps."""
    n = 40
    A = random_band(n, 1, 1, np.float32)
    b = jnp.ones(n, jnp.float32)
    text = lowered_text(jaxdia.solve_banded, A, b, platform="cuda")
    assert "gtsv2" in text and "stablehlo.while" not in text

    def loss(d, b):
        return jaxdia.solve_banded(jaxdia.DiaMatrix(d, A.offsets, A.shape), b).sum()

    text = lowered_text(jax.grad(loss, argnums=(0, 1)), _zero_padding(A), b, platform="cuda")
    assert "gtsv2" in text and "stablehlo.while" not in text
    assert "gtsv2" not in lowered_text(jaxdia.solve_banded, A, b, platform="cpu")


def test_cpu_chooses_by_size():
    """Small systems, and batches of many small systems, run the scan on CPU too."""
    assert not _dispatch.host_is_faster(_dispatch.SCAN_ROWS, 1, 100)
    assert _dispatch.host_is_faster(_dispatch.SCAN_ROWS + 1, 1, 100)
    assert not _dispatch.host_is_faster(32, 1000, 100)
    assert _dispatch.host_is_faster(1000, 1000, 4000)
    assert not _dispatch.host_is_faster(10**9, 1, 3 * 10**9)  # LAPACK's 32-bit ints


# -- lineax --------------------------------------------------------------------------------


def test_lineax_solver_factors_once():
    n = 12
    A = random_band(n, 2, 1, seed=21)
    operator = jaxdia.DiaLinearOperator(A)
    solver = jaxdia.BandedSolver()
    b1, b2 = jnp.asarray(rhs((n,), seed=22)), jnp.asarray(rhs((n,), seed=23))

    @jax.jit
    def two_solves(operator, b1, b2):
        state = solver.init(operator, {})
        x1 = lx.linear_solve(operator, b1, solver, state=state).value
        return x1, lx.linear_solve(operator, b2, solver, state=state).value

    for got, b in zip(two_solves(operator, b1, b2), (b1, b2)):
        np.testing.assert_allclose(got, scipy_solve(A, b), rtol=1e-10)
    jaxpr = jax.make_jaxpr(two_solves)(operator, b1, b2).jaxpr
    assert _count(jaxpr, "jaxdia_band_factor") == 1
    # Transposed operator (lineax's transpose of the state), and gradients through
    # linear_solve with a given state, against the dense solve.
    transposed = lx.linear_solve(
        operator.T, b1, solver, state=solver.transpose(solver.init(operator, {}), {})[0]
    )
    np.testing.assert_allclose(transposed.value, scipy_solve(A, b1, 1), rtol=1e-10)
    data = _zero_padding(A)
    state = solver.init(operator, {})

    def loss(d, b):
        op = jaxdia.DiaLinearOperator(jaxdia.DiaMatrix(d, A.offsets, A.shape))
        return jnp.sum(lx.linear_solve(op, b, solver, state=state).value ** 3)

    def dense_loss(d, b):
        return jnp.sum(_dense_solve(d, A.offsets, A.shape, b) ** 3)

    for g, e in zip(jax.grad(loss, (0, 1))(data, b1), jax.grad(dense_loss, (0, 1))(data, b1)):
        np.testing.assert_allclose(g, e, rtol=1e-8, atol=1e-11)


def test_lineax_solver_cholesky_and_failures():
    n = 10
    H = hermitian_band(n, 2, np.complex128, seed=24)
    operator = jaxdia.DiaLinearOperator(H, lx.positive_semidefinite_tag)
    solver = jaxdia.BandedSolver()
    state = solver.init(operator, {})
    assert isinstance(state[0], jaxdia.BandedCholesky)
    b = jnp.asarray(rhs((n,), np.complex128))
    np.testing.assert_allclose(
        lx.linear_solve(operator, b, solver, state=state).value, scipy_solve(H, b), rtol=1e-10
    )
    conj_state, _ = solver.conj(state, {})
    np.testing.assert_allclose(
        lx.linear_solve(lx.conj(operator), b, solver, state=conj_state).value,
        np.linalg.solve(np.conj(dense_f64(H)), b),
        rtol=1e-10,
    )
    singular = jaxdia.DiaLinearOperator(jaxdia.DiaMatrix(jnp.zeros((1, 4)), (0,), (4, 4)))
    solution = lx.linear_solve(singular, jnp.ones(4), solver, throw=False)
    assert solution.result == lx.RESULTS.singular
    with pytest.raises(ValueError, match="DiaLinearOperator"):
        solver.init(lx.MatrixLinearOperator(jnp.eye(3)), {})


def test_scipy_spellings():
    """SciPy's spellings: ``trans`` as splu's letters, solve_banded's overwrite and
    check_finite arguments, and integer matrices (upcast to JAX's default float type, as
    SciPy's solvers upcast them)."""
    dense = np.array([[4, 1, 0, 0], [2, 5, 1, 0], [0, 2, 6, 1], [0, 0, 2, 7]])
    b = np.arange(1.0, 5.0)
    A = jaxdia.DiaMatrix(
        jaxdia.DiaMatrix.from_dense(dense).data.astype(np.int32), (-1, 0, 1), (4, 4)
    )
    assert A.dtype == jnp.result_type(float)
    lu = jaxdia.lu_factor(A)
    for letter, code, matrix in [("N", 0, dense), ("T", 1, dense.T), ("H", 2, dense.T)]:
        np.testing.assert_allclose(lu.solve(b, trans=letter), lu.solve(b, trans=code))
        np.testing.assert_allclose(matrix @ np.asarray(lu.solve(b, trans=letter)), b, rtol=1e-12)
    x = jaxdia.solve_banded(A, b, overwrite_ab=True, overwrite_b=True, check_finite=False)
    np.testing.assert_allclose(x, np.linalg.solve(dense, b), rtol=1e-12)
    bad = jaxdia.DiaMatrix(A.data.at[1, 2].set(np.inf), A.offsets, A.shape)
    with pytest.raises(ValueError, match="infs or NaNs"):
        jaxdia.solve_banded(bad, b)
    unchecked = jaxdia.solve_banded(bad, b, check_finite=False)  # as under jit: no check
    np.testing.assert_array_equal(unchecked, jax.jit(jaxdia.solve_banded)(bad, b))
    hermitian = jaxdia.DiaMatrix.from_dense(dense + dense.T)
    x = jaxdia.solveh_banded(hermitian, b, overwrite_ab=True, check_finite=False)
    np.testing.assert_allclose(x, np.linalg.solve(dense + dense.T, b), rtol=1e-12)
