"""The products' rows layout: ``x`` and the result as rows ``(*B, c, n)``, a vector's
entries minor (``dia_spmm``'s ``rows``, ``xla.spmv_xla``, TPU's kernel with ``rows``),
against SciPy, under ``jit``, ``vmap`` and ``grad``, on every formulation branch of the
XLA product (zeros, bounded, looped, interior and edges, on vectors and on columns);
and the lowered programs that take it: no ``(n, 1)`` column on the way.

Every case puts NaN in the padding slots of ``data``, so reading padding fails.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdia._kernels import pallas_tpu, xla
from jaxdia._kernels.primitives import spmm

from .helpers import spmm_oracle, tolerance, wide
from .test_lowering import lowered
from .test_xla import vector_path  # noqa: F401  (the fixture: products on vectors and on columns)

#: (offsets, shape): each reaches one branch of the XLA product.
CASES = {
    "tridiagonal": ((-1, 0, 1), (40, 40)),  # interior and both edges
    "rectangular": ((-3, 0, 2), (30, 45)),
    "wide": ((-25, 0, 25), (30, 30)),  # small interior: bounded
    "many": (tuple(range(-40, 40)), (50, 50)),  # more than 64 terms: the loop
    "none": ((), (6, 6)),  # no diagonal: zeros
    "outside": ((9,), (3, 3)),  # a band wider than the matrix: nothing in range
    "one": ((0,), (1, 1)),
}


def _random(rng, shape, dtype):
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def _case(name, count, dtype, batch_d=(), batch_x=(), transpose=False, seed=0):
    """``data`` (NaN padding) and rows ``x`` ``(*batch_x, count, rows)``."""
    offsets, (m, n) = CASES[name]
    rng = np.random.default_rng(seed)
    data = _random(rng, (*batch_d, len(offsets), n), dtype)
    j = np.arange(n)
    for k, offset in enumerate(offsets):
        data[..., k, (j - offset < 0) | (j - offset >= m)] = np.nan
    x = _random(rng, (*batch_x, count, m if transpose else n), dtype)
    return data, x


def _check(got, data, x, name, transpose):
    """``got`` (rows) against SciPy's product of the columns ``x^T``."""
    offsets, shape = CASES[name]
    expected, scale = spmm_oracle(data, np.swapaxes(x, -1, -2), offsets, shape, transpose)
    expected, scale = np.swapaxes(expected, -1, -2), np.swapaxes(scale, -1, -2)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    assert got.dtype == jnp.result_type(data, x)
    error = np.abs(wide(got) - expected)
    assert np.all(np.isfinite(error)), "padding (NaN) was read"
    assert np.all(error <= tolerance(got.dtype) * (len(offsets) + 1) * (scale + 1.0))


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("dtype", [np.float32, np.complex128], ids=["float32", "complex128"])
@pytest.mark.usefixtures("vector_path")
def test_rows_on_every_branch(name, transpose, count, dtype):
    offsets, shape = CASES[name]
    data, x = _case(name, count, dtype, transpose=transpose)
    product = jax.jit(
        lambda d, v: spmm(d, v, offsets=offsets, shape=shape, transpose=transpose, rows=True)
    )
    _check(product(data, x), data, x, name, transpose)
    if count == 1:  # spmv_xla: vectors (*B, rows), whatever the size
        vectors = jax.jit(
            lambda d, v: xla.spmv_xla(d, v, offsets=offsets, shape=shape, transpose=transpose)
        )
        _check(vectors(data, x[0])[None], data, x, name, transpose)


@pytest.mark.parametrize(
    "batch_d, batch_x", [((3,), (3,)), ((3,), (1,)), ((1,), (4,)), ((2, 1), (1, 3))]
)
@pytest.mark.parametrize("name", ["tridiagonal", "wide", "many"])
@pytest.mark.usefixtures("vector_path")
def test_rows_batched(batch_d, batch_x, name):
    offsets, shape = CASES[name]
    data, x = _case(name, 1, np.float32, batch_d, batch_x, seed=1)
    got = jax.jit(lambda d, v: spmm(d, v, offsets=offsets, shape=shape, rows=True))(data, x)
    _check(got, data, x, name, False)


@pytest.mark.parametrize("transpose", [False, True])
def test_rows_under_vmap_and_grad(transpose):
    """vmap over the rows alone (more rows), over the data too; gradients equal the
    columns' (the data's cotangent goes through columns)."""
    name = "rectangular"
    offsets, shape = CASES[name]
    data, x = _case(name, 2, np.float64, batch_x=(5,), transpose=transpose, seed=2)
    clean = np.nan_to_num(data)

    def rows(d, v):
        return spmm(d, v, offsets=offsets, shape=shape, transpose=transpose, rows=True)

    def columns(d, v):
        c = jnp.swapaxes(v, -1, -2)
        return jnp.swapaxes(spmm(d, c, offsets=offsets, shape=shape, transpose=transpose), -1, -2)

    got = jax.jit(jax.vmap(rows, in_axes=(None, 0)))(data, x)
    _check(got, data, x, name, transpose)
    stacked = np.stack([data, 2 * data])
    got = jax.jit(jax.vmap(rows, in_axes=(0, None)))(stacked, x[0])
    _check(got[1], 2 * data, x[0], name, transpose)

    def loss(f):
        return jax.jit(jax.grad(lambda d, v: jnp.sum(jnp.sin(f(d, v))), argnums=(0, 1)))

    for got, want in zip(loss(rows)(clean, x[0]), loss(columns)(clean, x[0])):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["tridiagonal", "rectangular", "wide"])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("batch_d, batch_x", [((), ()), ((2,), (1,))])
def test_tpu_kernel_takes_rows(name, transpose, batch_d, batch_x):
    offsets, shape = CASES[name]
    data, x = _case(name, 2, np.float32, batch_d, batch_x, transpose=transpose, seed=3)
    got = pallas_tpu.spmm(
        jnp.asarray(data),
        jnp.asarray(x),
        offsets=offsets,
        shape=shape,
        transpose=transpose,
        rows=True,
        interpret=True,
    )
    _check(got, data, x, name, transpose)


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
def test_a_vector_enters_the_product_as_a_row(platform, traced_as):
    """``A @ x`` of a vector lowered: on TPU no ``(n, 1)`` column and no transpose (its
    kernel takes rows); the GPU kernels take columns, so the row becomes one there."""
    import jaxdia

    traced_as(platform)
    n = 1 << 12
    A = jax.eval_shape(
        lambda d: jaxdia.DiaMatrix(d, (-1, 0, 1), (n, n)),
        jax.ShapeDtypeStruct((3, n), np.float32),
    )
    x = jax.ShapeDtypeStruct((n,), np.float32)
    text = lowered(lambda A, x: A @ x, A, x, platform=platform).as_text()
    column = f"tensor<{n}x1xf32>" in text
    assert column == (platform == "cuda")
    assert ("stablehlo.transpose" in text) == (platform == "cuda")
