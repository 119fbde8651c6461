"""jaxdia's main paths with 64-bit types off (JAX's default), against SciPy in double
precision: products and their gradients, conversions, every banded factorization and its
implementations, periodic bands, the Krylov solvers and preconditioners, eigenvalues, the
matrix exponential, banded Jacobians and lineax. Results must be float32 (complex64) and
accurate to float32's precision; a warning (e.g. a float64 request truncated) is an
error, as everywhere in the suite."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

RNG = np.random.default_rng(0)
EPS = float(np.finfo(np.float32).eps)


def banded_matrix(n, lower, upper, dtype=np.float32, spd=False, corners=0, seed=0):
    """A diagonally dominant banded matrix (float32 or complex64), and its SciPy double."""
    rng = np.random.default_rng(seed)
    offsets = list(range(-lower, upper + 1))
    offsets += [n - corner for corner in range(1, corners + 1)]
    offsets += [corner - n for corner in range(1, corners + 1)]
    values = rng.uniform(-1, 1, (len(offsets), n))
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.uniform(-1, 1, (len(offsets), n))
    dense = sp.dia_array((values, offsets), shape=(n, n)).toarray()
    if spd:
        dense = (dense + dense.conj().T) / 2
    dense += (np.abs(dense).sum(axis=1).max() + 1) * np.eye(n)
    A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(dense.astype(dtype)))
    return A, dense


def assert_float32(x, complex_=False):
    assert x.dtype == (jnp.complex64 if complex_ else jnp.float32), x.dtype


def assert_solves(dense, x, b, factor=64):
    """The normwise backward error of a float32 solve."""
    x = np.asarray(x, np.complex128 if np.iscomplexobj(x) else np.float64)
    residual = np.max(np.abs(dense @ x - b))
    scale = np.abs(dense).sum(axis=1).max() * np.max(np.abs(x)) + np.max(np.abs(b))
    assert residual <= factor * EPS * scale, residual / scale


class Forced:
    """jaxdia's banded functions with ``method`` forced: ``Forced("scan").lu_factor(A)``
    is ``jaxdia.lu_factor(A, method="scan")``."""

    def __init__(self, method: str):
        self.method = method

    def __getattr__(self, name: str):
        return functools.partial(getattr(jaxdia, name), method=self.method)


def test_products_conversions_and_gradients():
    A, dense = banded_matrix(50, 3, 2)
    x = jnp.asarray(RNG.standard_normal(50), jnp.float32)
    X = jnp.asarray(RNG.standard_normal((50, 3)), jnp.float32)
    for y, expected in [
        (A @ x, dense @ x),
        (A.T @ X, dense.T @ X),
        (jax.jit(jaxdia.matmul)(A, X), dense @ X),
    ]:
        assert_float32(y)
        np.testing.assert_allclose(y, expected, rtol=1e-5, atol=1e-5)

    def with_data(data):
        return jaxdia.DiaMatrix(data, A.offsets, A.shape)

    grad = jax.grad(lambda data, x: jnp.sum((with_data(data) @ x) ** 2), argnums=(0, 1))
    g_data, g_x = grad(A.data, x)
    assert_float32(g_data) and assert_float32(g_x)
    np.testing.assert_allclose(g_x, 2 * dense.T @ (dense @ x), rtol=1e-4, atol=1e-3)
    batched = jax.vmap(lambda data: with_data(data) @ x)(jnp.stack([A.data, 2 * A.data]))
    np.testing.assert_allclose(batched[1], 2 * dense @ x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(A.to_scipy().toarray(), dense.astype(np.float32))
    np.testing.assert_allclose(A.traces(3), [np.trace(dense, k) for k in range(3)], rtol=1e-5)
    np.testing.assert_array_equal(
        jaxdia.DiaMatrix.from_dense(dense.astype(np.float32)).todense(), dense.astype(np.float32)
    )
    assert (A @ A).to_scipy().dtype == np.float32


@pytest.mark.parametrize(
    ("implementation", "band"),
    [("auto", (1, 1)), ("auto", (10, 10)), ("auto", (3, 1))]
    + [("lapack", (2, 2)), ("scan", (2, 2))]
    # cyclic reduction (GPU and TPU, where x64 is mostly off) forced on CPU compiles long
    + [pytest.param("parallel", (2, 2), marks=pytest.mark.full)],
)
def test_banded_solves(implementation, band):
    A, dense = banded_matrix(300, *band)
    b = RNG.standard_normal(300)
    forced = Forced(implementation)
    x = forced.solve_banded(A, jnp.asarray(b, jnp.float32))
    assert_float32(x)
    assert_solves(dense, x, b)
    lu = forced.lu_factor(A)
    for trans, op in [(0, dense), (1, dense.T), (2, dense.conj().T)]:
        assert_solves(op, lu.solve(jnp.asarray(b, jnp.float32), trans=trans), b)
    x = jax.jit(jax.vmap(forced.solve_banded, in_axes=(None, 0)))(
        A, jnp.asarray(np.stack([b, 2 * b]), jnp.float32)
    )
    assert_solves(dense, x[1], 2 * b)
    S, spd = banded_matrix(300, band[0], band[0], spd=True)
    for lower in (False, True):
        assert_solves(spd, forced.cho_factor(S, lower=lower).solve(jnp.asarray(b, jnp.float32)), b)
    assert_solves(spd, forced.solveh_banded(S, jnp.asarray(b, jnp.float32)), b)


@pytest.mark.parametrize(
    "implementation", ["auto", pytest.param("parallel", marks=pytest.mark.full)]
)
def test_complex_and_periodic_solves(implementation):
    b = RNG.standard_normal(64) + 1j * RNG.standard_normal(64)
    forced = Forced(implementation)
    A, dense = banded_matrix(64, 2, 2, dtype=np.complex64)
    x = forced.lu_factor(A).solve(jnp.asarray(b, jnp.complex64))
    assert_float32(x, complex_=True)
    assert_solves(dense, x, b)
    P, periodic = banded_matrix(64, 1, 1, corners=1)
    assert_solves(periodic, forced.solve_banded(P, jnp.asarray(b.real, jnp.float32)), b.real)
    assert_solves(periodic, forced.factorized(P)(jnp.asarray(b.real, jnp.float32)), b.real)


def poisson(side):
    laplacian = sp.diags([-1.0, 2.0, -1.0], [-1, 0, 1], shape=(side, side))
    identity = sp.eye(side)
    return (sp.kron(laplacian, identity) + sp.kron(identity, laplacian)).todia()


@pytest.mark.parametrize("preconditioner", ["none", "jacobi", "ilu0", "ic0", "multigrid"])
@pytest.mark.parametrize("solver", ["cg", "bicgstab"])
def test_krylov_solvers_and_preconditioners(solver, preconditioner):
    side = 24
    P = poisson(side)
    A = jaxdia.DiaMatrix.from_scipy(P.astype(np.float32))
    b = jnp.asarray(RNG.standard_normal(side * side), jnp.float32)
    M = {
        "none": None,
        "jacobi": lambda: jaxdia.jacobi(A),
        "ilu0": lambda: jaxdia.ilu0(A, (side, side)),
        "ic0": lambda: jaxdia.ic0(A, (side, side)),
        "multigrid": lambda: jaxdia.multigrid(A, (side, side)),
    }[preconditioner]
    M = M() if M else None
    x, info = getattr(jaxdia, solver)(A, b, M=M, rtol=1e-4, maxiter=2000)
    assert_float32(x)
    assert bool(info.converged)
    true = np.linalg.norm(P @ np.asarray(x, np.float64) - np.asarray(b, np.float64))
    assert true <= 1.5e-4 * np.linalg.norm(b)


def test_integer_matrices_and_scipy_operators():
    """Integer matrices (dense, scipy.sparse, a LinearOperator's, DiaMatrix.from_scipy)
    compute in float32, JAX's default float; a NumPy LinearOperator and a callback work
    on float32 vectors."""
    P = poisson(6).astype(np.int32)
    b = np.arange(36)
    expected = spla.spsolve(P.tocsc().astype(np.float64), b.astype(np.float64))
    assert jaxdia.DiaMatrix.from_scipy(P).dtype == np.float32
    for A in (P.toarray(), P, spla.aslinearoperator(P), jaxdia.DiaMatrix.from_scipy(P)):
        for solver in (jaxdia.cg, jaxdia.gmres):
            seen = []
            options = {"callback_type": "x"} if solver is jaxdia.gmres else {}
            x, info = solver(A, b, rtol=1e-5, callback=seen.append, **options)
            assert_float32(x)
            assert bool(info.converged) and seen and seen[-1].dtype == np.float32
            np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-4)
    host = spla.LinearOperator(P.shape, matvec=lambda v: P @ v, dtype=np.float64)
    x, info = jaxdia.bicgstab(host, b.astype(np.float32), rtol=1e-5)
    assert_float32(x)
    np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-4)


def test_eigsh_and_expm_multiply():
    P = poisson(12)
    A = jaxdia.DiaMatrix.from_scipy(P.astype(np.float32))
    values = jaxdia.eigsh(A, k=3, which="SA")[0]
    assert_float32(values)
    np.testing.assert_allclose(np.sort(values), np.linalg.eigvalsh(P.toarray())[:3], rtol=1e-4)
    values = jaxdia.eigsh(A, k=2, sigma=0.5)[0]
    expected = np.linalg.eigvalsh(P.toarray())
    expected = expected[np.argsort(np.abs(expected - 0.5))[:2]]
    np.testing.assert_allclose(np.sort(values), np.sort(expected), rtol=1e-4)
    v = RNG.standard_normal(144)
    y = jaxdia.expm_multiply(-0.1 * A, jnp.asarray(v, jnp.float32))
    assert_float32(y)
    np.testing.assert_allclose(y, spla.expm_multiply(-0.1 * P.tocsc(), v), rtol=1e-4, atol=1e-5)


def test_banded_jacobians_and_lineax():
    lineax = pytest.importorskip("lineax")

    def f(u):
        return jnp.concatenate([u[:1], u[:-2] - 2 * u[1:-1] + u[2:] + u[1:-1] ** 3, u[-1:]])

    u = jnp.asarray(RNG.uniform(0.5, 1.0, 40), jnp.float32)
    for mode in ("fwd", "rev"):
        J = jaxdia.jacobian(f, (-1, 0, 1), mode=mode)(u)
        assert_float32(J.data)
        np.testing.assert_allclose(J.todense(), jax.jacfwd(f)(u), rtol=1e-6, atol=1e-6)
    operator = jaxdia.DiaLinearOperator(J)
    b = jnp.asarray(RNG.standard_normal(40), jnp.float32)
    solution = lineax.linear_solve(operator, b, jaxdia.BandedSolver())
    assert_float32(solution.value)
    assert_solves(np.asarray(J.todense(), np.float64), solution.value, np.asarray(b, np.float64))


def test_save_and_load(tmp_path):
    A, _ = banded_matrix(20, 1, 2)
    jaxdia.save_npz(tmp_path / "A.npz", A)
    B = jaxdia.load_npz(tmp_path / "A.npz")
    assert B.dtype == np.float32 and B.offsets == A.offsets
    np.testing.assert_array_equal(B.todense(), A.todense())
    assert scipy.linalg.norm(sp.load_npz(tmp_path / "A.npz").toarray() - A.todense()) == 0
