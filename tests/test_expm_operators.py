"""jaxdia.expm_multiply of operators that are not a DiaMatrix (dense and sparse matrices,
SciPy LinearOperators on the host, lineax operators, functions written in JAX) against
dense expm and SciPy's expm_multiply, under jit and vmap, with SciPy's trace estimate and
its warning, gradients w.r.t. B and the times, and the errors."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia._linalg import expm_operators
from jaxdia._linalg.operators import has_adjoint

ESTIMATED = "Trace of LinearOperator not available, it will be estimated"


def matrix(n, complex_=False, seed=0, scale=1.0):
    """A random dense, non-normal matrix of 1-norm about ``3 * scale``."""
    rng = np.random.default_rng(seed)
    M = rng.standard_normal((n, n))
    if complex_:
        M = M + 1j * rng.standard_normal((n, n))
    return M * (3 * scale / np.abs(M).sum(axis=0).max())


def vectors(n, shape=(), complex_=False, seed=1):
    rng = np.random.default_rng(seed)
    B = rng.standard_normal((n, *shape))
    return B + 1j * rng.standard_normal((n, *shape)) if complex_ else B


def relative_error(actual, expected):
    actual, expected = np.asarray(actual), np.asarray(expected)
    return np.abs(actual - expected).max() / np.abs(expected).max()


def host_operator(M, *, adjoint=True, blocks=False):
    """A LinearOperator whose products run in NumPy (with ``rmatvec`` unless not
    ``adjoint``; ``matmat``/``rmatmat`` only with ``blocks``)."""
    kwargs = {"dtype": M.dtype}
    if blocks:
        kwargs.update(matvec=lambda v: M @ v, matmat=lambda X: M @ X)
        if adjoint:
            kwargs["rmatmat"] = lambda X: M.conj().T @ X
    else:
        kwargs["matvec"] = lambda v: M @ v
        if adjoint:
            kwargs["rmatvec"] = lambda v: M.conj().T @ v
    return spla.LinearOperator(M.shape, **kwargs)


def lineax_operator(M):
    lineax = pytest.importorskip("lineax")
    return lineax.MatrixLinearOperator(jnp.asarray(M))


#: Each kind of operator, made from a dense matrix, and whether its trace is estimated
#: (with SciPy's warning) when traceA is not given.
KINDS = {
    "dense": (lambda M: M, False),
    "jax-dense": (jnp.asarray, False),
    "sparse": (sp.csr_array, False),
    "aslinearoperator": (spla.aslinearoperator, True),
    "aslinearoperator-sparse": (lambda M: spla.aslinearoperator(sp.csr_array(M)), True),
    "host": (host_operator, True),
    "host-blocks": (lambda M: host_operator(M, blocks=True), True),
    "lineax": (lineax_operator, True),
    "function": (lambda M: lambda v: jnp.asarray(M) @ v, True),
}


def call(A, B, estimated, **kwargs):
    """expm_multiply, checking that it warns exactly when the trace is estimated."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        X = jaxdia.expm_multiply(A, B, **kwargs)
    warned = [w for w in caught if "will be estimated" in str(w.message)]
    assert len(warned) == (1 if estimated and kwargs.get("traceA") is None else 0)
    return X


# -- against SciPy and dense expm ------------------------------------------------------------


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("trace", [False, pytest.param(True, marks=pytest.mark.full)])
def test_each_kind_matches_expm(kind, trace):
    make, estimated = KINDS[kind]
    M, B = matrix(30), vectors(30, (3,))
    traceA = np.trace(M) if trace else None
    X = call(make(M), B, estimated, traceA=traceA)
    assert X.shape == B.shape and X.dtype == np.float64
    assert relative_error(X, sla.expm(M) @ B) < 1e-12
    assert relative_error(X, spla.expm_multiply(M, B)) < 1e-12


@pytest.mark.parametrize("kind", ["dense", "aslinearoperator", "host", "function"])
@pytest.mark.parametrize(
    "grid",
    [
        {"start": 0.1, "stop": 3.2, "num": 14},  # SciPy's test interval
        pytest.param({"start": 0.0, "stop": 2.0, "num": 41}, marks=pytest.mark.full),  # blocks
        pytest.param(
            {"start": -1.0, "stop": 0.5, "num": 4, "endpoint": False}, marks=pytest.mark.full
        ),
    ],
)
def test_time_grids_match_expm(kind, grid):
    make, estimated = KINDS[kind]
    M, B = matrix(20, seed=3, scale=1.5), vectors(20, (2,))
    X = call(make(M), B, estimated, **grid)
    times = np.linspace(grid["start"], grid["stop"], grid["num"], grid.get("endpoint", True))
    assert X.shape == (grid["num"], *B.shape)
    expected = np.stack([sla.expm(t * M) @ B for t in times])
    assert relative_error(X, expected) < 1e-11
    assert relative_error(X, spla.expm_multiply(M, B, **grid)) < 1e-11


@pytest.mark.parametrize(
    "kind",
    ["host", "function", *(pytest.param(k, marks=pytest.mark.full) for k in ("sparse", "lineax"))],
)
def test_complex_and_a_real_operator_on_complex_vectors(kind):
    make, estimated = KINDS[kind]
    M, B = matrix(25, complex_=True, seed=4), vectors(25, (), complex_=True)
    X = call(make(M), B, estimated)
    assert X.dtype == np.complex128 and relative_error(X, sla.expm(M) @ B) < 1e-12
    real = matrix(25, seed=5)
    X = call(make(real), B, estimated, traceA=np.trace(real))
    assert X.dtype == np.complex128 and relative_error(X, sla.expm(real) @ B) < 1e-12


@pytest.mark.parametrize(
    "kind",
    [
        "dense",
        "host",
        *(pytest.param(k, marks=pytest.mark.full) for k in ("aslinearoperator", "function")),
    ],
)
def test_float32(kind):
    make, estimated = KINDS[kind]
    M, B = matrix(20, seed=6).astype(np.float32), vectors(20, (2,)).astype(np.float32)
    X = call(make(M), B, estimated)
    assert X.dtype == np.float32
    assert relative_error(X, sla.expm(M.astype(np.float64)) @ B) < 2e-6


@pytest.mark.full
def test_integer_matrices_compute_in_the_default_float():
    M = np.diag(np.arange(5))
    B = np.ones(5, dtype=int)
    for A in (M, sp.csr_array(M), spla.aslinearoperator(M)):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            X = jaxdia.expm_multiply(A, B)
        assert X.dtype == np.float64
        np.testing.assert_allclose(X, np.exp(np.arange(5)), rtol=1e-14)


@pytest.mark.full
def test_a_batch_of_B_under_jit_and_vmap():
    M = matrix(16, seed=7)
    B = vectors(16, (4, 3)).transpose(1, 0, 2)  # (4, 16, 3): a batch of four blocks
    expected = np.einsum("ij,bjc->bic", sla.expm(M), B)
    for kind in ("dense", "host", "function", "lineax"):
        A = KINDS[kind][0](M)
        batched = jaxdia.expm_multiply(A, B, traceA=np.trace(M))
        assert batched.shape == B.shape and relative_error(batched, expected) < 1e-12
        mapped = jax.vmap(lambda b: jaxdia.expm_multiply(A, b, traceA=np.trace(M)))(B)
        assert relative_error(mapped, expected) < 1e-12
        jitted = jax.jit(
            lambda b: jaxdia.expm_multiply(A, b, start=0, stop=1, num=3, traceA=np.trace(M))
        )(B[0])
        assert relative_error(jitted[-1], expected[0]) < 1e-12
    traces = np.array([0.0, 1.0, -2.0, np.trace(M)])  # one per member: only the shift
    X = jaxdia.expm_multiply(M, B, traceA=traces)
    assert relative_error(X, expected) < 1e-12


def test_a_batch_of_dense_matrices_under_vmap():
    Ms = np.stack([matrix(12, seed=s) for s in range(3)])
    B = vectors(12)
    X = jax.vmap(lambda M: jaxdia.expm_multiply(M, B))(jnp.asarray(Ms))
    expected = np.stack([sla.expm(M) @ B for M in Ms])
    assert relative_error(X, expected) < 1e-12


def test_the_trace_estimate_is_deterministic_and_exact_for_small_n():
    M = matrix(40, seed=8)
    A = host_operator(M)
    with pytest.warns(UserWarning, match=ESTIMATED):
        first = np.asarray(jaxdia.expm_multiply(A, vectors(40)))
    with pytest.warns(UserWarning, match=ESTIMATED):
        second = np.asarray(jaxdia.expm_multiply(A, vectors(40)))
    assert np.array_equal(first, second)
    small = jnp.asarray(M[:4, :4])
    estimate = expm_operators.traceest(lambda X: small @ X, 4, np.dtype(float), 5)
    assert abs(float(estimate) - np.trace(M[:4, :4])) < 1e-12  # n <= m3: Q spans all
    low_rank = np.outer(np.arange(50.0), np.ones(50)) / 50  # rank 1: Q finds it
    estimate = expm_operators.traceest(lambda X: jnp.asarray(low_rank) @ X, 50, np.dtype(float), 1)
    assert abs(float(estimate) - np.trace(low_rank)) < 1e-12


def test_tiny_and_empty_operators():
    for n in (1, 2):  # n <= 2: the norms read the identity's columns, no A^H needed
        M = matrix(n, seed=n)
        A = host_operator(M, adjoint=False)
        with pytest.warns(UserWarning, match=ESTIMATED):
            X = jaxdia.expm_multiply(A, np.ones(n))
        np.testing.assert_allclose(X, sla.expm(M) @ np.ones(n), rtol=1e-13)
    empty = jaxdia.expm_multiply(np.zeros((0, 0)), np.zeros((0, 2)), start=0, stop=1, num=3)
    assert empty.shape == (3, 0, 2)
    assert jaxdia.expm_multiply(lambda v: v, np.zeros(0), traceA=0.0).shape == (0,)


def test_nan_in_the_operator_answers_nan():
    M = matrix(10)
    M[3, 4] = np.nan
    for A in (M, lambda v: jnp.asarray(M) @ v):
        X = jaxdia.expm_multiply(A, np.ones(10), traceA=0.0)
        assert np.all(np.isnan(X))


# -- gradients -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kind",
    [
        "function",
        *(pytest.param(k, marks=pytest.mark.full) for k in ("jax-dense", "sparse", "lineax")),
    ],
)
def test_gradients_wrt_B_and_the_times_match_dense_expm(kind):
    make, _ = KINDS[kind]
    M = matrix(12, complex_=False, seed=9, scale=2.0)
    A = make(M)
    B, G = vectors(12, (2,)), vectors(12, (3, 2), seed=2).transpose(1, 0, 2)
    dense = jnp.asarray(M)

    def loss(B, start, stop, oracle):
        if oracle:
            times = jnp.linspace(start, stop, 3)
            X = jnp.stack([jax.scipy.linalg.expm(t * dense) @ B for t in times])
        else:
            X = jaxdia.expm_multiply(A, B, start=start, stop=stop, num=3, traceA=0.5)
        return jnp.sum(X * G)

    got = jax.grad(loss, argnums=(0, 1, 2))(B, 0.3, 1.2, False)
    expected = jax.grad(loss, argnums=(0, 1, 2))(B, 0.3, 1.2, True)
    for value, oracle in zip(got, expected):
        assert relative_error(value, oracle) < 1e-11
    single = jax.grad(lambda B: jnp.sum(jaxdia.expm_multiply(A, B, traceA=0.0) * G[0]))(B)
    assert relative_error(single, sla.expm(M).T @ G[0]) < 1e-12


def test_complex_gradient_wrt_B_is_the_transpose():
    M = matrix(10, complex_=True, seed=10)
    B = vectors(10, complex_=True)
    function = lambda v: jnp.asarray(M) @ v  # noqa: E731
    _, vjp = jax.vjp(lambda B: jaxdia.expm_multiply(function, B, traceA=0.0), B)
    G = vectors(10, complex_=True, seed=3)
    assert relative_error(vjp(G)[0], sla.expm(M).T @ G) < 1e-12  # JAX's cotangent: no conj


def test_differentiating_what_cannot_be_raises():
    M = matrix(8)
    B = jnp.asarray(vectors(8))
    with pytest.raises(TypeError, match="runs on the host"):
        jax.grad(lambda B: jnp.sum(jaxdia.expm_multiply(host_operator(M), B, traceA=0.0)))(B)
    with pytest.raises(TypeError, match="gradients w.r.t. the arrays of an operator"):
        jax.grad(lambda M: jnp.sum(jaxdia.expm_multiply(M, B)))(jnp.asarray(M))

    def closure(c):  # a function's closed-over array, differentiated
        return jnp.sum(jaxdia.expm_multiply(lambda v: c * (jnp.asarray(M) @ v), B, traceA=0.0))

    with pytest.raises(TypeError, match="gradients w.r.t. the arrays of an operator"):
        jax.grad(closure)(1.0)


# -- adjoints on the host --------------------------------------------------------------------


def test_which_linear_operators_have_an_adjoint():
    M = np.eye(3)
    plain = spla.LinearOperator((3, 3), matvec=lambda v: v, dtype=float)
    assert not has_adjoint(plain)
    assert has_adjoint(host_operator(M)) and has_adjoint(host_operator(M, blocks=True))
    assert has_adjoint(spla.aslinearoperator(M)) and has_adjoint(spla.aslinearoperator(M) ** 3)
    assert not has_adjoint(2 * spla.aslinearoperator(M) + plain)
    assert not has_adjoint(plain.H.H)

    class Subclass(spla.LinearOperator):
        def __init__(self):
            super().__init__(float, (3, 3))

        def _matvec(self, x):
            return 2 * x

    class WithAdjoint(Subclass):
        def _adjoint(self):
            return self

    assert not has_adjoint(Subclass()) and has_adjoint(WithAdjoint())


def test_a_host_operator_with_only_rmatmat():
    M = matrix(12, complex_=True, seed=11)
    A = host_operator(M, blocks=True)
    with pytest.warns(UserWarning, match=ESTIMATED):
        X = jaxdia.expm_multiply(A, vectors(12, (2,), complex_=True))
    assert relative_error(X, sla.expm(M) @ vectors(12, (2,), complex_=True)) < 1e-12


def test_the_program_of_a_host_operator_calls_it_and_a_matrix_gets_no_trace_estimate():
    M = matrix(10)
    B = jnp.ones(10)
    host = jax.jit(lambda B: jaxdia.expm_multiply(host_operator(M), B, traceA=0.0))
    assert "callback" in host.lower(B).as_text()
    assert relative_error(host(B), sla.expm(M) @ B) < 1e-12
    # the exact trace of a matrix: no QR of Hutch++ in the program; estimated: one
    dense = jax.jit(lambda M, B: jaxdia.expm_multiply(M, B)).lower(jnp.asarray(M), B).as_text()
    with pytest.warns(UserWarning, match="will be estimated"):
        function = jax.jit(lambda B: jaxdia.expm_multiply(lambda v: jnp.asarray(M) @ v, B))
        estimated = function.lower(B).as_text()
    assert "geqrf" not in dense.lower() and "householder" not in dense.lower()
    assert "geqrf" in estimated.lower() or "householder" in estimated.lower()


# -- errors ----------------------------------------------------------------------------------


def test_errors():
    M = matrix(6)
    B = np.ones(6)
    with pytest.raises(TypeError, match="without rmatvec or rmatmat"):
        jaxdia.expm_multiply(host_operator(M, adjoint=False), B, traceA=0.0)
    with pytest.raises(ValueError, match="traceA must be a scalar"):
        jaxdia.expm_multiply(M, B, traceA=np.ones(3))
    with pytest.raises(TypeError, match="traceA must be a scalar"):
        jaxdia.expm_multiply(lambda v: v, B, traceA="x")
    with pytest.raises(ValueError, match=r"B must have shape \(6,\)"):
        jaxdia.expm_multiply(M, np.ones(5))
    with pytest.raises(ValueError, match=r"B must have shape \(6,\)"):
        jaxdia.expm_multiply(spla.aslinearoperator(M), np.ones((5, 2)))
    wide = spla.LinearOperator((3, 4), matvec=lambda v: v[:3], rmatvec=lambda v: v, dtype=float)
    for A in (np.ones((3, 4)), sp.csr_array(np.ones((3, 4))), wide):
        with pytest.raises(
            ValueError, match=r"expm_multiply: A must be square, got shape \(3, 4\)"
        ):
            jaxdia.expm_multiply(A, np.ones(4))
    with pytest.raises(ValueError, match="must map a vector of shape"):
        jaxdia.expm_multiply(lambda v: v[:3], B, traceA=0.0)
    with pytest.raises(TypeError, match="must map a vector of shape"):
        jaxdia.expm_multiply(lambda v: np.asarray(v) @ M, B, traceA=0.0)
    with pytest.raises(TypeError, match="long double"):
        jaxdia.expm_multiply(M.astype(np.longdouble), B)
    with pytest.raises(TypeError, match="A must be a"):
        jaxdia.expm_multiply(object(), B)
    sharded = jaxdia.shard(jaxdia.eye(6), jax.make_mesh((1,), ("x",)), "x")
    with pytest.raises(TypeError, match=r"got ShardedDiaMatrix \(pass A.to_dia\(\)\)"):
        jaxdia.expm_multiply(sharded, B)
    with pytest.raises(TypeError, match="stop must be real"):
        jaxdia.expm_multiply(M, B, start=0, stop=1j)
