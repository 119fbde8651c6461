"""expm_multiply's parameters: the 1-norm estimator for scattered offsets (a spin chain
built with kron), the first point of a time grid that starts at a negative time, and one
program per grid size whatever the times."""

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia._linalg import expm_norms
from jaxdia._parts import DiaParts

from .helpers import Compiles


def ising_chain(sites, field=0.7):
    """``-sum Z_i Z_(i+1) - field sum X_i`` as a SciPy matrix: offsets 0 and +-2^k."""
    X, Z = sp.csr_array([[0.0, 1.0], [1.0, 0.0]]), sp.csr_array([[1.0, 0.0], [0.0, -1.0]])

    def site(op, i):
        return sp.kron(sp.kron(sp.eye_array(2**i), op), sp.eye_array(2 ** (sites - i - 1)))

    H = sum(-field * site(X, i) for i in range(sites))
    return (H + sum(-(site(Z, i) @ site(Z, i + 1)) for i in range(sites - 1))).todia()


def relative_error(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    return np.abs(actual - expected).max() / np.abs(expected).max()


def test_scattered_offsets_are_estimated_and_match_scipy():
    """8 sites: the powers' offsets spread over more than POWER_ROWS diagonals, so the
    norms are estimated; the results are SciPy's (single time and a grid)."""
    S = ising_chain(8)
    A = jaxdia.DiaMatrix.from_scipy(-1j * S)
    assert expm_norms.power_grids(A.offsets, A.shape[0]) is None
    psi = np.zeros(2**8, complex)
    psi[3] = 1
    for scale in (1.0, 6.0):  # condition (3.13) holds / fails
        X = jaxdia.expm_multiply(scale * A, psi)
        assert relative_error(X, spla.expm_multiply((-1j * scale) * S.tocsr(), psi)) < 1e-12
    grid = dict(start=0.5, stop=3.0, num=6)
    X = jaxdia.expm_multiply(A, psi, **grid)
    assert relative_error(X, spla.expm_multiply((-1j * S).tocsr(), psi, **grid)) < 1e-12


def test_estimates_bound_the_norms_of_powers_from_below():
    """Higham and Tisseur's estimate is a lower bound, and within a factor 3 here (as
    their paper reports for almost every matrix), for real and complex matrices."""
    rng = np.random.default_rng(0)
    n, offsets = 60, (-37, -8, -1, 0, 2, 16, 41)
    for complex_ in (False, True):
        data = rng.standard_normal((len(offsets), n))
        if complex_:
            data = data + 1j * rng.standard_normal((len(offsets), n))
        S = sp.dia_array((data, offsets), shape=(n, n)).toarray()
        A = jaxdia.DiaMatrix(data.astype(np.complex64 if complex_ else np.float32), offsets, (n, n))
        for p in (1, 2, 5, 9):
            estimate = float(expm_norms.estimate_power_norm(A._parts, jnp.int32(p)))
            exact = np.abs(np.linalg.matrix_power(S, p)).sum(axis=0).max()
            assert exact / 3 <= estimate <= exact * (1 + 1e-5), (complex_, p, estimate, exact)
    tiny = jaxdia.DiaMatrix(jnp.array([[2.0, -3.0]]), (0,), (2, 2))  # n <= t: exact
    assert float(expm_norms.estimate_power_norm(tiny._parts, jnp.int32(2))) == 9.0


def test_program_size_does_not_grow_with_the_spread_of_the_offsets():
    """The lowered program of a 10-site chain is no larger than a 7-site one's (their
    exact powers would have 511 and 255 diagonals)."""

    def size(sites):
        A = jaxdia.DiaMatrix.from_scipy(-1j * ising_chain(sites))
        psi = jnp.zeros(2**sites, complex)
        text = jax.jit(lambda A, b: jaxdia.expm_multiply(A, b)).lower(A, psi).as_text()
        return len(text.splitlines())

    assert size(10) <= size(8) < 1.5 * size(5)


def test_negative_start_keeps_the_later_points_accurate():
    """A grid from t = -1 to 2 for diagonal A with entries in [-32, 74] (issue 32): each
    point as accurate as SciPy's (which takes the span's parameters for the first point);
    and a tridiagonal case against the dense exponential."""
    rng = np.random.default_rng(1)
    d = rng.permutation(np.linspace(-32, 74, 30))
    b = rng.standard_normal(30)
    A = jaxdia.DiaMatrix(d[None], (0,), (30, 30))
    for num in (2, 3, 11):
        times = np.linspace(-1, 2, num)
        X = jaxdia.expm_multiply(A, b, start=-1, stop=2, num=num)
        Y = spla.expm_multiply(sp.diags_array(d).tocsr(), b, start=-1, stop=2, num=num)
        for k, t in enumerate(times):
            exact = np.exp(t * d) * b
            ours, scipys = relative_error(X[k], exact), relative_error(Y[k], exact)
            assert ours <= max(10 * scipys, 1e-13), (num, t, ours, scipys)
    # Symmetric tridiagonal: rounding of the first point is amplified by the later
    # growth whatever the method; no more than SciPy's (exact: by eigendecomposition).
    T = sp.diags_array(
        [np.ones(29), rng.permutation(np.linspace(-10, 20, 30)), np.ones(29)], offsets=[-1, 0, 1]
    )
    lam, V = np.linalg.eigh(T.toarray())
    X = jaxdia.expm_multiply(jaxdia.DiaMatrix.from_scipy(T.todia()), b, start=-1, stop=2, num=4)
    Y = spla.expm_multiply(T.tocsr(), b, start=-1, stop=2, num=4)
    for k, t in enumerate(np.linspace(-1, 2, 4)):
        exact = V @ (np.exp(t * lam) * (V.T @ b))
        assert relative_error(X[k], exact) <= max(2 * relative_error(Y[k], exact), 1e-14)


def test_one_program_per_grid_size_whatever_the_times():
    """Other start/stop values and endpoint compile nothing new."""
    A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(20, 20))
    b = jnp.ones(20)
    jaxdia.expm_multiply(A, b, start=0.0, stop=1.0, num=5)
    with Compiles() as compiles:
        X = jaxdia.expm_multiply(A, b, start=-0.5, stop=2.0, num=5, endpoint=False)
        Y = jaxdia.expm_multiply(A, b, start=1.0, stop=0.0, num=5)
    assert compiles.count == 0
    dense = A.todense()
    for k, t in enumerate(np.linspace(-0.5, 2.0, 5, endpoint=False)):
        np.testing.assert_allclose(X[k], jax.scipy.linalg.expm(t * dense) @ b, rtol=1e-11)
    np.testing.assert_allclose(Y[-1], b, rtol=1e-14)


def test_estimated_norms_under_vmap():
    """A batch of chains with different norms gets each its own parameters."""
    S = ising_chain(8)
    A = jaxdia.DiaMatrix.from_scipy(S)
    data = jnp.stack([A.data, 4 * A.data])
    psi = np.zeros(2**8)
    psi[0] = 1
    X = jax.vmap(lambda d: jaxdia.expm_multiply(jaxdia.DiaMatrix(d, A.offsets, A.shape), psi))(
        data * -1j
    )
    for i, scale in enumerate((1.0, 4.0)):
        expected = spla.expm_multiply((-1j * scale) * S.tocsr(), psi)
        assert relative_error(X[i], expected) < 1e-12
    norm = expm_norms.one_norm(A._parts)
    norms = np.asarray(expm_norms.estimated_power_norms(DiaParts(A.data, A.offsets, A.shape), norm))
    dense = S.toarray()
    exact = [np.abs(np.linalg.matrix_power(dense, p)).sum(0).max() ** (1 / p) for p in range(1, 10)]
    assert norms[0] == norm
    np.testing.assert_array_less(norms, np.array(exact) * (1 + 1e-5))
    np.testing.assert_array_less(np.array(exact) / 3, norms)
