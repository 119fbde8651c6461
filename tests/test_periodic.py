"""Periodic (cyclic) banded solves: a band plus wrap-around corner diagonals.

``lu_factor``, ``solve_banded`` and ``factorized`` split such a matrix into its band and a
low-rank corner correction (Sherman-Morrison-Woodbury) instead of factoring the full band
the corners span. Oracles: NumPy's dense ``solve`` (all three ``trans``), SciPy's
``spsolve``, and ``jnp.linalg.solve``'s gradients; the split's choice against the work it
saves; the fallback when the band alone is singular.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia._linalg import banded, periodic

from .helpers import assert_close, dense_f64
from .test_band_parallel import assert_no_loop_grows, on_platform


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
    assert periodic.split(A.offsets, n) is not None
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
    assert int(jax.jit(jaxdia.lu_factor)(A).info) == banded.SINGULAR_CORRECTION
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
    split = periodic.split
    assert split((-1, 0, 1), 100) is None  # no corners
    n = 400  # a 2-D 5-point stencil on a 20 x 20 grid: ±20 are part of the band
    assert split((-20, -1, 0, 1, 20), n) is None
    assert split((-99, -1, 0, 1, 99), 100) == periodic.Split((1, 2, 3), 1, 1)
    # one corner only (a periodic upwind stencil)
    assert split((-1, 0, 99), 100) == periodic.Split((0, 1), 1, 0)
    # corners touching more than half the columns are no small correction
    assert split((-40, -1, 0, 1, 40), 100) is None


@pytest.mark.parametrize("method", ["host", "scan", "parallel"])
def test_every_band_method(monkeypatch, method):
    jax.clear_caches()
    monkeypatch.setattr(banded, "METHOD", method)
    A, dense = periodic_matrix(33, 2, seed=6)
    b = np.random.default_rng(7).standard_normal(33)
    lu = jaxdia.lu_factor(A)
    assert lu.kind == "periodic"
    assert_close(lu.solve(b), np.linalg.solve(dense, b), np.float64, 10)
    assert_close(lu.solve(b, trans=1), np.linalg.solve(dense.T, b), np.float64, 10)
    assert_close(jaxdia.solve_banded(A, b), np.linalg.solve(dense, b), np.float64, 10)
    jax.clear_caches()


def test_pytree_names_and_attributes():
    A, _ = periodic_matrix(16, 1)
    lu = jaxdia.lu_factor(A)
    names = [jax.tree_util.keystr(path) for path, _ in jax.tree_util.tree_flatten_with_path(lu)[0]]
    assert names[-4:] == [".corrections", ".capacitance_lu", ".capacitance_pivots", ".info"]
    with pytest.raises(AttributeError, match="periodic factor"):
        lu.lu  # noqa: B018
    assert_close(lu.matrix.todense(), dense_f64(A), np.float64)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_no_loop_over_the_rows_on_accelerators(monkeypatch, platform):
    on_platform(monkeypatch, platform)

    def factor_and_solve(A, b):
        lu = jaxdia.lu_factor(A)
        assert lu.kind == "periodic"
        return lu.solve(b), jaxdia.solve_banded(A, b)

    def make(n):
        A, _ = periodic_matrix(n, 2, np.float32)
        return factor_and_solve, (A, jnp.ones(n, jnp.float32))

    assert_no_loop_grows(make, platform)
