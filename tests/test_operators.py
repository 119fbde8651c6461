"""Every operator SciPy's Krylov solvers take, as ``A`` and ``M`` of jaxdia's
(jaxdia/_linalg/operators.py), and SciPy's habits around them (jaxdia/_linalg/operands.py,
krylov.py, gmres.py): ``callback`` with each iterate (``gmres``'s ``callback_type``),
``x0="Mb"``, SciPy's errors for SciPy's bad arguments, a zero right-hand side, integer
and long double matrices; and gmres with a singular preconditioner. Oracles: NumPy's
solve and SciPy's own solvers (their iterates, through their callbacks)."""

import functools

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia._linalg import krylov, operands, operators

SOLVERS = {"cg": jaxdia.cg, "bicgstab": jaxdia.bicgstab, "gmres": jaxdia.gmres}
SCIPY = {"cg": spla.cg, "bicgstab": spla.bicgstab, "gmres": spla.gmres}


def _matrix(n=8, dtype=np.float64, symmetric=True):
    """A well-conditioned tridiagonal matrix (symmetric positive definite, or not)."""
    upper = -1.0 if symmetric else -0.6
    A = 4 * np.eye(n) - np.eye(n, k=-1) + upper * np.eye(n, k=1)
    return A.astype(dtype)


def _b(n=8, dtype=np.float64):
    return np.linspace(1.0, 2.0, n).astype(dtype)


class Counting(spla.LinearOperator):
    """A LinearOperator written in NumPy that counts its calls (the host path)."""

    def __init__(self, A):
        super().__init__(A.dtype, A.shape)
        self.A = A
        self.matvecs = 0
        self.matmats = 0

    def _matvec(self, x):
        self.matvecs += 1
        return self.A @ x

    def _matmat(self, X):
        self.matmats += 1
        return self.A @ X

    def _rmatvec(self, x):
        return self.A.conj().T @ x


class Duck:
    """What ``aslinearoperator`` takes besides matrices: ``shape`` and ``matvec``."""

    def __init__(self, A):
        self.shape = A.shape
        self.dtype = A.dtype
        self._A = A

    def matvec(self, x):
        return self._A @ x


def _kinds(A):
    """``A`` as every kind of operator SciPy takes (and lineax's)."""
    return {
        "dense": A,
        "jax": jnp.asarray(A),
        "csr": sp.csr_array(A),
        "aslinearoperator(dense)": spla.aslinearoperator(A),
        "aslinearoperator(csr)": spla.aslinearoperator(sp.csr_array(A)),
        "LinearOperator": Counting(A),
        "duck": Duck(A),
        "lineax": lx.MatrixLinearOperator(jnp.asarray(A)),
        "DiaLinearOperator": jaxdia.DiaLinearOperator(jaxdia.DiaMatrix.from_dense(A)),
        "function": functools.partial(_times, jnp.asarray(A)),
    }


def _times(A, v):
    return v @ A.T


@pytest.mark.parametrize("kind", list(_kinds(_matrix())))
def test_every_kind_of_A(kind):
    """cg takes every kind, and solves as NumPy does (gmres and bicgstab: the host kind
    below, and all kinds in the full tier)."""
    A, b = _matrix(), _b()
    x, info = jaxdia.cg(_kinds(A)[kind], b, rtol=1e-12)
    assert bool(info.converged)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-10)


@pytest.mark.full
@pytest.mark.parametrize("method", ["bicgstab", "gmres"])
@pytest.mark.parametrize("kind", list(_kinds(_matrix())))
def test_every_kind_of_A_nonsymmetric(kind, method):
    A, b = _matrix(symmetric=False), _b()
    x, info = SOLVERS[method](_kinds(A)[kind], b, rtol=1e-12)
    assert bool(info.converged)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-10)


@pytest.mark.parametrize(
    "method",
    [pytest.param("cg", marks=pytest.mark.full), pytest.param("bicgstab", marks=pytest.mark.full)]
    + ["gmres"],
)
def test_every_kind_of_M(method):
    """M as a dense matrix, a csr matrix, a LinearOperator (host), a lineax operator and a
    DiaMatrix (with a batch of right-hand sides): the iterations of the same M given as
    a function."""
    A = _matrix(symmetric=method == "cg")
    D = np.diag(1 / np.diag(A))  # Jacobi
    b = np.stack([_b(), -_b()[::-1]])
    _, reference = SOLVERS[method](A, b, M=lambda v: v * jnp.diag(D), rtol=1e-10)
    for M in (
        D,
        sp.csr_array(D),
        Counting(D),
        lx.MatrixLinearOperator(jnp.asarray(D)),
        jaxdia.DiaMatrix.from_dense(D),
    ):
        x, info = SOLVERS[method](A, b, M=M, rtol=1e-10)
        assert np.all(info.converged), type(M).__name__
        np.testing.assert_array_equal(info.iterations, reference.iterations)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b.T).T, rtol=1e-8)


def test_host_operator_under_jit_and_vmap_and_its_batches():
    """A NumPy LinearOperator runs under jit (compiled once for the same operator) and
    vmap; a batch of vectors goes to matmat in one call; differentiating raises a
    TypeError saying why."""
    A, b = _matrix(), _b()
    op = Counting(A)
    solve = jax.jit(lambda b: jaxdia.cg(op, b, rtol=1e-12)[0])
    np.testing.assert_allclose(np.asarray(solve(b)), np.linalg.solve(A, b), rtol=1e-10)
    before = jaxdia.cg(op, b)  # eager: compiles once ...
    size = krylov._run_krylov._cache_size()
    again = jaxdia.cg(op, 2 * b)  # ... and not again for the same operator
    assert krylov._run_krylov._cache_size() == size
    np.testing.assert_allclose(np.asarray(again[0]), 2 * np.asarray(before[0]), rtol=1e-6)
    B = np.stack([b, 2 * b, -b])
    X = jax.vmap(lambda b: jaxdia.cg(op, b, rtol=1e-12)[0])(B)
    np.testing.assert_allclose(np.asarray(X), np.linalg.solve(A, B.T).T, rtol=1e-10)
    op.matvecs = op.matmats = 0
    X, info = jaxdia.cg(op, B, rtol=1e-12)  # a batch: one matmat per product (x0 = 0:
    assert op.matvecs == 0 and op.matmats == int(info.iterations.max()) + 1  # + residual)
    with pytest.raises(TypeError, match="cannot differentiate"):
        jax.grad(lambda b: jaxdia.cg(op, b)[0].sum())(b)


@pytest.mark.parametrize("method", ["bicgstab", "gmres"])
def test_host_operator_nonsymmetric(method):
    """bicgstab and gmres with a host A (no transposed solve) and a host M."""
    A, b = _matrix(symmetric=False), _b()
    M = Counting(np.diag(1 / np.diag(A)))
    x, info = SOLVERS[method](Counting(A), b, M=M, rtol=1e-12)
    assert bool(info.converged)
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-10)


def test_where_each_kind_runs():
    """Matrices, lineax operators and functions run in the compiled program; only a
    LinearOperator written in NumPy calls back to the host (read in the lowered
    program)."""
    A, b = _matrix(), _b()
    for kind, operator in _kinds(A).items():
        text = jax.jit(lambda b, op=operator: jaxdia.cg(op, b)[0]).lower(b).as_text()
        assert ("callback" in text) == (kind in ("LinearOperator", "duck")), kind


def _scipy_iterates(method, A, b, **kwargs):
    seen = []
    SCIPY[method](A, b, callback=lambda xk: seen.append(np.copy(xk)), **kwargs)
    return seen


@pytest.mark.parametrize("method", ["cg", "bicgstab"])
def test_callback_sees_scipys_iterates(method):
    """Each iterate, in order, as SciPy's callback sees them: eagerly and under jit."""
    A, b = _matrix(12, symmetric=method == "cg"), _b(12)
    expected = _scipy_iterates(method, A, b, rtol=1e-10)
    for run in (SOLVERS[method], jax.jit(SOLVERS[method], static_argnames="callback")):
        seen = []
        x, info = run(A, b, rtol=1e-10, callback=seen.append)
        assert len(seen) == len(expected) == int(info.iterations)
        for xk, reference in zip(seen, expected, strict=True):
            assert isinstance(xk, np.ndarray) and xk.flags.writeable
            np.testing.assert_allclose(xk, reference, rtol=1e-9, atol=1e-12)


@pytest.mark.full
@pytest.mark.parametrize("method", ["cg", "bicgstab"])
@pytest.mark.parametrize("variant", ["standard", "fused"])
def test_callback_under_vmap_grad_and_variants(method, variant):
    """Under vmap, each member's iterates (in order within a member); under grad, only the
    solve's (not the transposed solve's); the fused loops report as the standard ones."""
    A, b = _matrix(10, symmetric=method == "cg"), _b(10)
    expected = _scipy_iterates(method, A, b, rtol=1e-10)
    seen = []
    solve = SOLVERS[method]
    _, info = solve(A, b, rtol=1e-10, callback=seen.append, variant=variant)
    assert len(seen) == int(info.iterations)
    np.testing.assert_allclose(seen[-1], expected[-1], rtol=1e-8)
    seen.clear()
    jax.vmap(lambda b: solve(A, b, rtol=1e-10, callback=seen.append, variant=variant))(
        np.stack([b, b])
    )
    assert len(seen) == 2 * int(info.iterations)
    np.testing.assert_allclose(seen[-1], expected[-1], rtol=1e-8)
    seen.clear()
    jax.grad(lambda b: solve(A, b, rtol=1e-10, callback=seen.append, variant=variant)[0].sum())(b)
    assert len(seen) == int(info.iterations)


def test_gmres_callback_types_match_scipy():
    """Without M (where SciPy's left and jaxdia's right preconditioning are the same
    method): 'x' gets x after each cycle, 'pr_norm' the residual estimate over |b| after
    each step (a NumPy float), as SciPy's; 'legacy' counts maxiter in steps, and is what
    a callback without callback_type gets, with SciPy's DeprecationWarning."""
    A, b = _matrix(16, symmetric=False) + 0.3 * np.eye(16, k=3), _b(16)
    options = dict(rtol=1e-10, restart=4, maxiter=50)
    for kind in ("x", "pr_norm"):
        expected = _scipy_iterates("gmres", A, b, callback_type=kind, **options)
        seen = []
        jaxdia.gmres(A, b, callback=seen.append, callback_type=kind, **options)
        assert len(seen) == len(expected), kind
        if kind == "pr_norm":
            assert all(isinstance(r, float) for r in seen)
            np.testing.assert_allclose(seen[: len(expected) // 2], expected[: len(expected) // 2])
        else:
            np.testing.assert_allclose(seen, expected, rtol=1e-8)
    seen = []
    with pytest.warns(DeprecationWarning, match="without specifying `callback_type`"):
        x, info = jaxdia.gmres(A, b, callback=seen.append, rtol=1e-10, restart=4, maxiter=6)
    assert len(seen) == 6 == int(info.iterations) and not bool(info.converged)
    with pytest.raises(ValueError, match="callback_type"):
        jaxdia.gmres(A, b, callback_type="residual")


@pytest.mark.parametrize("method", list(SOLVERS))
def test_x0_Mb(method):
    """x0="Mb" starts from M @ b: the same solve as x0=M @ b given; another string is a
    ValueError."""
    A, b = _matrix(symmetric=method == "cg"), _b()
    D = 1 / np.diag(A)
    seen, given = [], []
    options = {"callback_type": "x"} if method == "gmres" else {}
    SOLVERS[method](A, b, "Mb", M=lambda v: v * D, callback=seen.append, rtol=1e-10, **options)
    SOLVERS[method](A, b, D * b, M=lambda v: v * D, callback=given.append, rtol=1e-10, **options)
    np.testing.assert_allclose(seen, given, rtol=1e-12)
    x, info = SOLVERS[method](A, b, x0="Mb")  # no M: b itself
    assert bool(info.converged)
    with pytest.raises(ValueError, match="'Mb'"):
        SOLVERS[method](A, b, x0="M b")


@pytest.mark.parametrize("method", list(SOLVERS))
def test_scipys_bad_arguments(method):
    """SciPy's ValueError for atol=None, "legacy" or negative; a tolerance given
    positionally is a TypeError, as SciPy's keyword-only tolerances make it."""
    A, b = _matrix(), _b()
    for atol in ("legacy", None, -1):
        with pytest.raises(ValueError, match="atol"):
            SOLVERS[method](A, b, b, atol=atol)
    with pytest.raises(TypeError):
        SOLVERS[method](A, b, b, 1e-5)


@pytest.mark.parametrize("method", list(SOLVERS))
def test_zero_right_hand_side(method):
    """b = 0 returns x = 0, converged, whatever x0 (SciPy's rule): per system of a
    batch."""
    A = _matrix(symmetric=method == "cg")
    b = np.stack([np.zeros(8), _b()])
    x, info = SOLVERS[method](A, b, x0=np.ones(8), rtol=1e-8)
    assert np.all(info.converged) and int(info.iterations[0]) == 0
    np.testing.assert_array_equal(np.asarray(x[0]), 0)
    np.testing.assert_allclose(np.asarray(x[1]), np.linalg.solve(A, b[1]), rtol=1e-6)


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize(
    "dtype",
    [np.float64]
    + [pytest.param(dtype, marks=pytest.mark.full) for dtype in (np.complex128, np.float32)],
)
def test_gmres_keeps_the_step_of_a_singular_preconditioner(side, dtype):
    """A = diag(2, 3, 4), M = diag(1, 1, 0), b = (0, 1, 1), x0 = (1, 0, 0): A M is
    singular on the Krylov space, and the cycle's least-squares problem numerically so.
    SciPy reaches x = (0, 1/3, 0), residual 1 (the best M's range allows); jaxdia used to
    return x0 (residual 2.45), having thrown the cycle away. Also complex and in single
    precision, and larger, where the last pivots are rounding amplified by the basis
    (8e-12 of their column in double precision, 1e-2 in single): the cycle keeps the
    longest prefix of its steps that reduces the residual."""
    for n, zeros in ((3, 1), (20, 5)):
        A = np.diag(np.arange(2.0, 2 + n)).astype(dtype)
        M = np.diag(np.r_[np.ones(n - zeros), np.zeros(zeros)]).astype(dtype)
        b = np.r_[0.0, np.ones(n - 1)].astype(dtype) * (1 + 1j if dtype == np.complex128 else 1)
        x0 = np.r_[1.0, np.zeros(n - 1)].astype(dtype)
        x, info = jaxdia.gmres(A, b, x0, M=M, rtol=1e-15, atol=0, side=side)
        expected = np.where(np.diag(M) != 0, b / np.diag(A), 0)
        # The Krylov basis of n distinct eigenvalues loses digits as n grows.
        tolerance = 1e-4 if dtype == np.float32 else 1e-9
        np.testing.assert_allclose(np.asarray(x), expected, rtol=tolerance, atol=tolerance)
        best = np.sqrt(zeros) * abs(b[-1])
        np.testing.assert_allclose(float(info.residual_norm), best, rtol=tolerance)
        assert not bool(info.converged)


def test_integer_and_long_double_operators():
    """Integer matrices (dense, sparse, a LinearOperator's) compute in the default float,
    float64 with x64 on (as SciPy; tests/x64_off: float32); long double is refused with
    what to do."""
    A, b = _matrix().astype(np.int64), np.arange(8)
    for operator in (A, sp.csr_array(A), spla.aslinearoperator(A), Counting(A)):
        x, info = jaxdia.cg(operator, b, rtol=1e-12)
        assert x.dtype == np.float64 and bool(info.converged)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(A, b), rtol=1e-10)
    if np.dtype(np.longdouble).itemsize > 8:  # x86's 80-bit long double
        wide = _matrix().astype(np.longdouble)
        for A, b, M in ((wide, _b(), None), (_matrix(), _b().astype(np.longdouble), None)):
            with pytest.raises(TypeError, match=r"no long double.*astype\(np.float64\)"):
                jaxdia.gmres(A, b, M=M)
        with pytest.raises(TypeError, match="M has dtype float128"):
            jaxdia.cg(_matrix(), _b(), M=wide)


def test_what_is_not_an_operator():
    A, b = _matrix(), _b()
    with pytest.raises(TypeError, match="LinearOperator"):
        jaxdia.cg("A", b)
    with pytest.raises(ValueError, match="2-D matrix"):
        jaxdia.cg(A, b, M=np.ones(8))
    with pytest.raises(ValueError, match="square"):
        jaxdia.gmres(np.ones((8, 7)), b)
    with pytest.raises(ValueError, match="M must be 8 x 8"):
        jaxdia.bicgstab(A, b, M=np.eye(7))
    with pytest.raises(TypeError, match="callback must be a function"):
        jaxdia.cg(A, b, callback=3)
    with pytest.raises(TypeError, match="M must be"):
        operators.as_operator(None, "f", "M")
    assert operands.callback_of(None, "cg") is None
