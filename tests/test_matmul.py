"""A @ X through the bilinear primitives: values against SciPy, every JAX transformation."""

import functools

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsla
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, strategies as st
from jax import lax
from jax.test_util import check_grads

import jaxdia
from jaxdia.testing import dia_matrices, dtypes, random_values

from .helpers import assert_close, dense_f64, in_bounds_mask, to_scipy_f64


def rhs(seed, shape, dtype):
    return random_values(np.random.default_rng(seed), shape, dtype)


def with_data(A, data):
    return jaxdia.DiaMatrix(data, A.offsets, A.shape)


# -- values -----------------------------------------------------------------------------------


@given(dia_matrices(), st.integers(0, 5), st.integers(0, 2**32 - 1))
def test_matmul_matches_scipy(A, columns, seed):
    """A @ x, A @ X, x @ A and X @ A for every dtype, NaN in every padding slot."""
    m, n = A.shape
    S = to_scipy_f64(A)
    scale = max(1, A.n_diags)
    x = rhs(seed, (n,), A.dtype)
    X = rhs(seed + 1, (n, columns), A.dtype)
    assert_close(A @ x, S @ x.astype(S.dtype), A.dtype, scale)
    assert_close(A @ X, S @ X.astype(S.dtype), A.dtype, scale)
    y = rhs(seed + 2, (m,), A.dtype)
    Y = rhs(seed + 3, (columns, m), A.dtype)
    assert_close(y @ A, y.astype(S.dtype) @ S, A.dtype, scale)
    assert_close(Y @ A, Y.astype(S.dtype) @ S, A.dtype, scale)
    assert (A @ X).dtype == A.dtype


@given(dia_matrices(batch_shape=None, dtype=np.float64), st.data())
def test_batched_matrices_and_rhs_broadcast_like_matmul(A, data):
    """Data batch dims and X batch dims broadcast exactly as jnp.matmul's do."""
    dense = dense_f64(A)
    x_batch = data.draw(st.sampled_from([(), (1,), A.batch_shape, (2, *A.batch_shape)]))
    X = rhs(0, (*x_batch, A.shape[1], 2), np.float64)
    np.testing.assert_allclose(A @ X, np.matmul(dense, X), rtol=1e-12, atol=1e-12)
    x = rhs(1, (A.shape[1],), np.float64)
    np.testing.assert_allclose(A @ x, np.matmul(dense, x), rtol=1e-12, atol=1e-12)
    Y = rhs(2, (*x_batch, 3, A.shape[0]), np.float64)
    np.testing.assert_allclose(Y @ A, np.matmul(Y, dense), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "data_dtype, x_dtype",
    [
        (np.float32, np.float64),
        (np.float64, np.float32),
        (np.float32, np.int32),
        (np.float32, np.complex64),
        (jnp.bfloat16, np.float32),
        (jnp.bfloat16, jnp.bfloat16),
        (np.float16, np.float16),
        (np.complex64, np.float64),
    ],
)
def test_dtype_promotion_follows_jax(data_dtype, x_dtype):
    A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(6, 6), dtype=data_dtype)
    X = (np.arange(12).reshape(6, 2) % 5).astype(x_dtype)
    out = A @ X
    assert out.dtype == jnp.result_type(data_dtype, x_dtype)
    expected = np.asarray(A.todense(), np.complex128) @ X.astype(np.complex128)
    np.testing.assert_allclose(np.asarray(out, np.complex128), expected, rtol=1e-2)


def test_low_precision_accumulates_in_float32():
    """A bfloat16 sum of many diagonals is accurate to bfloat16's rounding of the result."""
    n, count = 64, 40
    A = jaxdia.DiaMatrix(jnp.full((count, n), 1.0 + 2**-7, jnp.bfloat16), range(count), (n, n))
    out = A @ jnp.ones(n, jnp.bfloat16)
    exact = np.asarray(A.todense(), np.float64).sum(axis=1)
    np.testing.assert_allclose(np.asarray(out, np.float64), exact, rtol=2**-8)


def test_many_diagonals():
    n = 300
    offsets = range(-100, 100)
    A = jaxdia.DiaMatrix(rhs(0, (200, n), np.float64), offsets, (n, n))
    x = rhs(1, (n,), np.float64)
    np.testing.assert_allclose(A @ x, A.to_scipy() @ x, rtol=1e-12)


def test_eager_products_are_one_jitted_call():
    """Eager ``A @ x`` and ``x @ A`` run promotion, reshapes and the primitive as one
    jitted program, compiled once per structure and operand shapes (no retracing)."""
    from jaxdia import _products

    A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(6, 6))
    S = to_scipy_f64(A)
    before = _products._product._cache_size()
    for x in (np.arange(6.0), np.ones(6), np.zeros(6)):
        assert_close(A @ x, S @ np.asarray(x, np.float64), A.dtype)
        assert_close(x @ A, np.asarray(x, np.float64) @ S, A.dtype)
    assert _products._product._cache_size() == before + 2  # one for A @ x, one for x @ A


@pytest.mark.parametrize(
    "n, x_shape, batch",
    [(30_000, (30_000,), ()), (300, (300, 8), ()), (300, (300,), (4,))],
    ids=["vector", "columns", "batched"],
)
def test_documented_donation_writes_into_the_donated_buffer(n, x_shape, batch):
    """The recipe in benchmarks/README.md, ``jax.jit(lambda A, x, y: A @ x,
    donate_argnums=2, keep_unused=True)``, makes XLA write the product into ``y``'s buffer
    for each shape of the compiled product (1-D vector with in-place edges, a
    concatenation for several columns, a batch); without ``keep_unused`` JAX drops ``y``
    and donates nothing."""
    rng = np.random.default_rng(0)
    offsets = [-7, 0, 5]
    data = rng.standard_normal((*batch, 3, n)).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    product = jax.jit(lambda A, x, y: A @ x, donate_argnums=2, keep_unused=True)
    y = jnp.zeros((*batch, *x_shape), np.float32)
    pointer = y.unsafe_buffer_pointer()
    y = product(jaxdia.DiaMatrix(data, offsets, (n, n)), jnp.asarray(x), y)
    assert y.unsafe_buffer_pointer() == pointer
    expected = [
        sp.dia_array((d.astype(np.float64), offsets), shape=(n, n)) @ x.astype(np.float64)
        for d in data.reshape(-1, 3, n)
    ]
    assert_close(y, np.reshape(expected, y.shape), np.float32)


# -- errors -----------------------------------------------------------------------------------


def test_shape_mismatch_names_both_shapes():
    A = jaxdia.eye(3, 4)
    with pytest.raises(ValueError, match=r"A of shape \(3, 4\) and X of shape \(3,\)"):
        A @ jnp.ones(3)
    with pytest.raises(ValueError, match=r"A of shape \(3, 4\) and X of shape \(3, 2\)"):
        A @ jnp.ones((3, 2))
    with pytest.raises(ValueError, match=r"X @ A: A of shape \(3, 4\) and X of shape \(4,\)"):
        jnp.ones(4) @ A
    with pytest.raises(ValueError, match="scalar"):
        A @ 2.0
    batched = jaxdia.DiaMatrix(np.ones((2, 1, 4)), 0, (3, 4))
    with pytest.raises(ValueError, match=r"batch shape \(2,\).*do not broadcast"):
        batched @ jnp.ones((3, 4, 1))


def test_bad_operands_and_implementation():
    A = jaxdia.eye(3)
    with pytest.raises(TypeError, match="numeric"):
        A @ np.array(["a", "b", "c"])
    with pytest.raises(TypeError, match="DiaMatrix"):
        jaxdia.matmul(np.eye(3), np.ones(3))
    for S in (sp.eye_array(3, format="csr"), sp.dia_matrix(np.eye(3))):
        with pytest.raises(TypeError, match=r"X is a scipy.sparse .*DiaMatrix.from_scipy"):
            A @ S
        with pytest.raises(TypeError, match=r"DiaMatrix.from_scipy\(S\)"):
            S @ A
    with pytest.raises(TypeError, match="write A @ X for a product"):
        np.dot(A, np.ones(3))
    with pytest.raises(ValueError, match="implementation must be one of"):
        jaxdia.matmul(A, np.ones(3), implementation="cuda")
    with pytest.raises(ValueError, match="no Pallas spmm kernel .* platform 'cpu'"):
        jaxdia.matmul(A, np.ones(3), implementation="pallas")
    np.testing.assert_array_equal(jaxdia.matmul(A, np.ones(3), implementation="xla"), np.ones(3))


@pytest.mark.parametrize(
    "product, x_shape, dense",
    [
        (lambda A, X: A @ X, ("n", "c"), lambda M, X: M @ X),
        (lambda A, X: X @ A, ("c", "n"), lambda M, X: X @ M),
        (lambda A, X: A @ X, ("b", "n", "c"), lambda M, X: M @ X),
        (lambda A, X: jax.vmap(lambda x: A @ x)(X), ("b", "n"), lambda M, X: X @ M.T),
        (lambda A, X: A.T @ jnp.sin(A @ X), ("n", "c"), lambda M, X: M.T @ np.sin(M @ X)),
    ],
    ids=["A @ X", "X @ A", "batched X", "vmap", "A.T @ sin(A @ X)"],
)
def test_export_with_symbolic_columns_and_batch(product, x_shape, dense):
    """jax.export with symbolic columns or batch dims, as jnp.matmul allows (the matrix
    shape is static), serialized and called at several sizes; the gradient too."""
    A = jaxdia.diags([1.0, -2.0, 3.0], offsets=[-1, 0, 2], shape=(8, 8), dtype=np.float32)
    M = np.asarray(A.todense())
    A_spec = jax.eval_shape(lambda d: jaxdia.DiaMatrix(d, A.offsets, A.shape), A.data)
    symbols = dict(zip("bc", jax.export.symbolic_shape("b, c")), n=8)
    x_spec = jax.ShapeDtypeStruct(tuple(symbols[d] for d in x_shape), np.float32)
    loss = lambda A, X: jnp.sum(product(A, X) ** 2)
    exported = [
        jax.export.deserialize(jax.export.export(jax.jit(f))(A_spec, x_spec).serialize())
        for f in (product, jax.grad(loss, argnums=(0, 1)))
    ]
    rng = np.random.default_rng(0)
    for size in (1, 3):
        X = rng.standard_normal([size if d in "bc" else 8 for d in x_shape]).astype(np.float32)
        np.testing.assert_allclose(exported[0].call(A, X), dense(M, X), rtol=1e-5, atol=1e-5)
        grads = exported[1].call(A, X)
        want = jax.grad(loss, argnums=(0, 1))(A, X)
        np.testing.assert_allclose(grads[0].data, want[0].data, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(grads[1], want[1], rtol=1e-5, atol=1e-5)


def test_numpy_and_jax_arrays_on_the_left_defer_to_diamatrix():
    A = jaxdia.diags([1.0, 2.0], offsets=[0, 1], shape=(2, 2))
    expected = np.array([1.0, 1.0]) @ np.asarray(A.todense())
    np.testing.assert_allclose(np.ones(2) @ A, expected)
    np.testing.assert_allclose(jnp.ones(2) @ A, expected)


# -- transformations --------------------------------------------------------------------------

N = 7
OFFSETS = (-3, -1, 0, 2)


def matrix(seed=0, dtype=np.float64, batch=()):
    return jaxdia.DiaMatrix(rhs(seed, (*batch, len(OFFSETS), N), dtype), OFFSETS, (N, N))


def test_jit_and_padding_never_read():
    A = matrix()
    nan_padded = with_data(A, jnp.asarray(np.where(~in_bounds_mask(A), np.nan, A.data)))
    X = rhs(1, (N, 3), np.float64)
    out = jax.jit(lambda A, X: A @ X)(nan_padded, X)
    np.testing.assert_allclose(out, to_scipy_f64(A) @ X, rtol=1e-12)
    grad = jax.grad(lambda d: jnp.sum(with_data(A, d) @ X))(nan_padded.data)
    assert np.all(np.asarray(grad)[~in_bounds_mask(A)] == 0)


def test_vmap_over_x_data_both_nested_and_other_axes():
    A = matrix()
    dense = np.asarray(A.todense())
    X = rhs(1, (5, N), np.float64)
    np.testing.assert_allclose(jax.vmap(lambda x: A @ x)(X), X @ dense.T, rtol=1e-12)
    np.testing.assert_allclose(jax.vmap(lambda x: A @ x, in_axes=1)(X.T), X @ dense.T, rtol=1e-12)
    batch = matrix(batch=(4,))
    bd = np.asarray(batch.todense())
    x = X[0]
    np.testing.assert_allclose(jax.vmap(lambda B: B @ x)(batch), bd @ x, rtol=1e-12)
    np.testing.assert_allclose(
        jax.vmap(lambda B, x: B @ x)(batch, X[:4]), np.einsum("bij,bj->bi", bd, X[:4]), rtol=1e-12
    )
    data_last = jnp.moveaxis(batch.data, 0, -1)
    out = jax.vmap(lambda d: with_data(A, d) @ x, in_axes=2, out_axes=1)(data_last)
    np.testing.assert_allclose(out, (bd @ x).T, rtol=1e-12)
    nested = jax.vmap(jax.vmap(lambda B, x: B @ x, in_axes=(None, 0)), in_axes=(0, None))(batch, X)
    np.testing.assert_allclose(nested, np.einsum("bij,cj->bci", bd, X), rtol=1e-12)
    rmat = jax.vmap(lambda B, y: y @ B)(batch, X[:4])
    np.testing.assert_allclose(rmat, np.einsum("bj,bji->bi", X[:4], bd), rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_grad_vjp_jvp_jacfwd_against_dense(dtype):
    A = matrix(dtype=dtype)
    X = rhs(1, (N, 2), dtype)
    mask = 1.0 - ~in_bounds_mask(A)

    def sparse_loss(data, X):
        return jnp.sum(jnp.abs(jnp.sin(with_data(A, data) @ X)) ** 2)

    def dense_loss(data, X):
        return jnp.sum(jnp.abs(jnp.sin(with_data(A, data).todense() @ X)) ** 2)

    for argnum in (0, 1):
        got = jax.grad(sparse_loss, argnum)(A.data, X)
        want = jax.grad(dense_loss, argnum)(A.data, X)
        np.testing.assert_allclose(got, want * (mask if argnum == 0 else 1), rtol=1e-10, atol=1e-12)
    tangents = (rhs(2, A.data.shape, dtype), rhs(3, X.shape, dtype))
    f_sparse = lambda d, X: with_data(A, d) @ X
    f_dense = lambda d, X: with_data(A, d).todense() @ X
    _, got = jax.jvp(f_sparse, (A.data, X), tangents)
    _, want = jax.jvp(f_dense, (A.data, X), tangents)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        jax.jacfwd(f_sparse, holomorphic=dtype == np.complex128)(A.data, X),
        jax.jacfwd(f_dense, holomorphic=dtype == np.complex128)(A.data, X),
        atol=1e-12,
    )
    ct = rhs(4, (N, 2), dtype)
    got_vjp = jax.vjp(f_sparse, A.data, X)[1](ct)
    want_vjp = jax.vjp(f_dense, A.data, X)[1](ct)
    np.testing.assert_allclose(got_vjp[0], want_vjp[0] * mask, atol=1e-12)
    np.testing.assert_allclose(got_vjp[1], want_vjp[1], atol=1e-12)


def test_second_order():
    A = matrix()
    X = rhs(1, (N, 2), np.float64)
    check_grads(lambda d, X: with_data(A, d) @ X, (A.data, X), order=2, modes=("fwd", "rev"))
    check_grads(lambda d, y: y @ with_data(A, d), (A.data, X.T), order=2, modes=("fwd", "rev"))

    def loss(d, x):
        return jnp.sum((with_data(A, d) @ x) ** 3)

    def dense_loss(d, x):
        return jnp.sum((with_data(A, d).todense() @ x) ** 3)

    x = X[:, 0]
    np.testing.assert_allclose(
        jax.hessian(loss, 1)(A.data, x), jax.hessian(dense_loss, 1)(A.data, x), rtol=1e-10
    )
    h_sparse = jax.hessian(loss, 0)(A.data, x)
    h_dense = jax.hessian(dense_loss, 0)(A.data, x)
    mask = 1.0 - ~in_bounds_mask(A)
    np.testing.assert_allclose(h_sparse, h_dense * mask[:, :, None, None] * mask, atol=1e-10)


def test_linear_transpose():
    A = matrix(dtype=np.complex128)
    X = rhs(1, (N, 3), np.complex128)
    (transposed,) = jax.linear_transpose(lambda x: A @ x, X)(X)
    np.testing.assert_allclose(transposed, to_scipy_f64(A).T @ X, rtol=1e-12)
    (data_t,) = jax.linear_transpose(lambda d: with_data(A, d) @ X, A.data)(X)
    expected = jax.vjp(lambda d: with_data(A, d).todense() @ X, A.data)[1](X)[0]
    np.testing.assert_allclose(data_t, expected * (1 - ~in_bounds_mask(A)), atol=1e-12)


def test_cond_scan_while_loop():
    A, B = matrix(0), matrix(1)
    x = rhs(2, (N,), np.float64)
    out = jax.jit(lambda p, A, B, x: lax.cond(p, lambda: A @ x, lambda: B @ x))(False, A, B, x)
    np.testing.assert_allclose(out, to_scipy_f64(B) @ x, rtol=1e-12)

    def power(carry, _):
        y = A @ carry
        return y / jnp.linalg.norm(y), None

    final, _ = lax.scan(power, x, length=4)
    expected = x.copy()
    for _ in range(4):
        expected = to_scipy_f64(A) @ expected
        expected /= np.linalg.norm(expected)
    np.testing.assert_allclose(final, expected, rtol=1e-10)
    counted = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, A @ c[1]), (0, x))[1]
    np.testing.assert_allclose(
        counted, to_scipy_f64(A) @ (to_scipy_f64(A) @ (to_scipy_f64(A) @ x)), rtol=1e-10
    )


# -- iterative solvers ------------------------------------------------------------------------


def shifted_laplacian(n, dtype, shift):
    main = np.full(n, 4.0 + shift, dtype)
    return jaxdia.diags(
        [
            np.full(n - 3, -1.0),
            np.full(n - 1, -1.0),
            main,
            np.full(n - 1, -1.5),
            np.full(n - 3, -0.5),
        ],
        offsets=[-3, -1, 0, 1, 3],
        shape=(n, n),
        dtype=dtype,
    )


SOLVERS = {
    "cg": jsla.cg,
    "gmres": functools.partial(jsla.gmres, solve_method="batched"),
    "bicgstab": jsla.bicgstab,
}


@pytest.mark.parametrize(
    "solver", [pytest.param(s, marks=pytest.mark.full) if s == "gmres" else s for s in SOLVERS]
)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_iterative_solvers_forward_and_gradients(solver, dtype):
    n = 12
    shift = 0.5j if dtype == np.complex128 else 0.0
    A = shifted_laplacian(n, dtype, shift)
    if solver == "cg":  # cg needs a Hermitian positive definite operator
        A = jaxdia.diags(
            [np.full(n - 1, -1.0), np.full(n, 4.0), np.full(n - 1, -1.0)], [-1, 0, 1], dtype=dtype
        )
    b = rhs(1, (n,), dtype)
    solve = SOLVERS[solver]

    def sparse_solve(data, b):
        return solve(lambda v: with_data(A, data) @ v, b, tol=1e-13, atol=0.0)[0]

    x = jax.jit(sparse_solve)(A.data, b)
    np.testing.assert_allclose(x, np.linalg.solve(to_scipy_f64(A).toarray(), b), rtol=1e-9)

    def loss(solution):
        return jnp.sum(jnp.abs(solution) ** 2)

    def dense_solve(data, b):
        return jnp.linalg.solve(with_data(A, data).todense(), b)

    mask = 1.0 - ~in_bounds_mask(A)
    for argnum in (0, 1):
        got = jax.grad(lambda *a: loss(sparse_solve(*a)), argnum)(A.data, b)
        want = jax.grad(lambda *a: loss(dense_solve(*a)), argnum)(A.data, b)
        np.testing.assert_allclose(got, want * (mask if argnum == 0 else 1), rtol=1e-6, atol=1e-9)
    tangent = rhs(2, (n,), dtype)
    got = jax.jvp(lambda b: sparse_solve(A.data, b), (b,), (tangent,))[1]
    want = jax.jvp(lambda b: dense_solve(A.data, b), (b,), (tangent,))[1]
    np.testing.assert_allclose(got, want, rtol=1e-8)
    data_tangent = rhs(3, A.data.shape, dtype) * mask
    got = jax.jvp(lambda d: sparse_solve(d, b), (A.data,), (data_tangent,))[1]
    want = jax.jvp(lambda d: dense_solve(d, b), (A.data,), (data_tangent,))[1]
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-10)


@given(dia_matrices(dtype=np.float32, max_side=6), dtypes(low_precision=False))
def test_xla_implementation_matches_default(A, x_dtype):
    X = rhs(0, (A.shape[1], 2), x_dtype)
    np.testing.assert_array_equal(jaxdia.matmul(A, X, implementation="xla"), jaxdia.matmul(A, X))
