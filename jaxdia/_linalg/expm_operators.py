""":func:`jaxdia.expm_multiply` of an operator that is not a DiaMatrix: a dense or
``scipy.sparse`` matrix, a SciPy ``LinearOperator`` (or anything ``aslinearoperator``
takes), a lineax operator or a function ``v -> A v`` written in JAX, as
:func:`jaxdia._linalg.operators.as_operator` sorts them.

The algorithm is the DiaMatrix's (``expm_taylor.evolve``) on the operator's products, with
what SciPy does for an operator where a DiaMatrix has exact values:

* the trace, which only shifts ``A`` (``mu = trace / n``): ``traceA`` when given; else
  exact for a dense or ``scipy.sparse`` matrix (SciPy's ``A.trace()``), and estimated for
  any other operator as SciPy's ``traceest`` does (Hutch++, ``3 m3`` products, ``m3 = 1``
  for one time and 5 for a grid; with fixed signs, so the result is deterministic). The
  caller warns, as SciPy does, that it is estimated;
* ``||A - mu I||_1``: exact for a dense or ``scipy.sparse`` matrix (column sums of the
  stored entries; duplicates of a ``scipy.sparse`` entry count apart, an upper bound), else
  estimated by the block 1-norm estimator (SciPy's ``onenormest``), and
  ``||(A - mu I)^p||_1`` estimated by it for every operator, as SciPy does. The estimator
  takes products with ``A^H``: the transpose of a product written in JAX (``jax.vjp``), a
  ``LinearOperator``'s ``rmatmat``/``rmatvec``; a ``LinearOperator`` without them is
  refused by the caller, as SciPy's ``onenormest`` fails on it (except for ``n <= 2``,
  where both read the columns of the identity instead);
* the early stop of the Taylor series computes each term's norm, as SciPy (a DiaMatrix
  bounds some of them by ``||A||_inf``).

A function's product is applied to the columns of ``B`` by ``vmap`` (it takes one vector);
the kinds :func:`as_operator` makes into functions of stacked vectors get ``B``'s columns
as one stack (a ``LinearOperator`` on the host: one ``matmat`` per product).

Reverse mode (:func:`action`, a ``jax.custom_vjp``): w.r.t. ``B``, ``exp(t A)^T G`` by the
same algorithm on the transposed products (the norms of ``A^T`` chosen as ``A``'s), and
w.r.t. ``start``/``stop``, ``A X_k``. The operator's own arrays (a dense matrix's
entries, a closure's arrays) get no cotangent: differentiating w.r.t. them is a
``TypeError``, as is differentiating through a ``LinearOperator`` on the host.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.custom_derivatives import SymbolicZero

from .expm_norms import (
    LazyOperatorNormInfo,
    Product,
    estimated_operator_norms,
    fragment_3_1,
    hash_signs,
    lazily,
    onenormest_matrix_power,
)
from .expm_taylor import evolve, expm_multiply_simple_core, unit_roundoff
from .operators import host_adjoint, matrix_of, on_host

#: What differentiating through a host operator raises.
HOST_GRADIENT = (
    "expm_multiply: A is a SciPy LinearOperator whose product runs on the host (NumPy, "
    "through jax.pure_callback), and JAX cannot differentiate through it. To "
    "differentiate, pass A as a DiaMatrix, a dense array, a lineax operator or a function "
    "written in jax.numpy."
)
#: What differentiating w.r.t. an operator's own arrays raises.
OPERATOR_GRADIENT = (
    "expm_multiply: gradients w.r.t. the arrays of an operator A that is not a DiaMatrix "
    "(a dense matrix's entries, a lineax operator's or a function's arrays) are not "
    "supported; those w.r.t. B, start and stop are. For gradients w.r.t. the matrix, pass "
    "it as a DiaMatrix (w.r.t. its data)."
)


class Config(NamedTuple):
    """The static part of one evolution of an operator."""

    n: int
    grid: bool  # a grid of times (else the single time 1)
    num: int  # number of time points (1 without a grid)
    stacked: bool  # the product takes stacks (*batch, n), else one vector (a function)
    samples: int  # Hutch++'s m3 for the trace (0: the trace is given or exact)
    treedef: Any  # the operator's pytree structure (its leaves are arguments)


def block_product(operator: Any, stacked: bool) -> Product:
    """``x -> A x`` for ``x`` of shape ``(n,)`` or ``(n, c)``, in ``x``'s dtype."""

    def product(x: Array) -> Array:
        if x.ndim == 1:
            y = operator(x)
        elif stacked:
            y = operator(x.T).T
        else:
            y = jax.vmap(operator, in_axes=1, out_axes=1)(x)
        return jnp.asarray(y).astype(x.dtype)

    return product


def _transposed(product: Product) -> Product:
    """``y -> A^T y`` of a product written in JAX (its pullback: JAX's cotangents are
    transposes)."""

    def transpose(y: Array) -> Array:
        _, pullback = jax.vjp(product, jnp.zeros_like(y))
        return pullback(y)[0]

    return transpose


def _conjugated(product: Product, dtype: np.dtype) -> Product:
    """``x -> conj(P conj(x))``: ``A^H`` from ``A^T`` and back."""
    if dtype.kind != "c":
        return product
    return lambda x: jnp.conj(product(jnp.conj(x)))


def _shift(product: Product, mu: Array) -> Product:
    return lambda x: product(x) - mu * x


def traceest(product: Product, n: int, dtype: np.dtype, m3: int) -> Array:
    """An estimate of ``trace(A)`` from ``3 m3`` products with ``A`` (as SciPy's
    ``traceest``: Hutch++, Meyer, Musco, Musco and Woodruff 2021), with fixed signs
    (:func:`hash_signs`) where SciPy draws them."""
    signs = hash_signs(2 * n * m3).astype(dtype)
    S, G = signs[: n * m3].reshape(n, m3), signs[n * m3 :].reshape(n, m3)
    Q, _ = jnp.linalg.qr(product(S))
    exact = jnp.sum(jnp.conj(Q) * product(Q))
    right = G - jnp.matmul(
        Q, jnp.matmul(jnp.conj(Q).T, G, precision=lax.Precision.HIGHEST), precision="highest"
    )
    return exact + jnp.sum(jnp.conj(right) * product(right)) / m3


def _exact_norm(matrix: Any, mu: Array, n: int, dtype: np.dtype, transpose: bool) -> Array:
    """``||M - mu I||_1`` (``||.||_inf`` with ``transpose``) of a dense matrix, or of a
    BCOO one from its stored entries (duplicates count apart: an upper bound)."""
    if hasattr(matrix, "indices"):  # a BCOO
        rows, cols = matrix.indices[:, 0], matrix.indices[:, 1]
        if transpose:
            rows, cols = cols, rows
        data = matrix.data.astype(dtype)
        diagonal = rows == cols
        off = jax.ops.segment_sum(jnp.where(diagonal, 0, jnp.abs(data)), cols, n)
        on = jax.ops.segment_sum(jnp.where(diagonal, data, 0), cols, n)
        return jnp.max(off + jnp.abs(on - mu), initial=0.0)
    M = jnp.asarray(matrix).astype(dtype) - mu * jnp.eye(n, dtype=dtype)
    return jnp.max(jnp.sum(jnp.abs(M), axis=1 if transpose else 0), initial=0.0)


def _norm_info(
    forward: Product, adjoint: Product, exact: Array | None, n: int, dtype: np.dtype, columns: int
) -> LazyOperatorNormInfo:
    """The norms of the operator with products ``forward`` and ``adjoint`` (``A^H``):
    ``||A||_1`` exact when given (``exact``), else estimated; the ``d_p`` estimated."""
    if exact is None:
        exact = onenormest_matrix_power(forward, adjoint, n, dtype, jnp.int32(1))
    norm = exact

    def powers(scale):
        return lazily(
            norm,
            scale,
            columns,
            lambda: estimated_operator_norms(forward, adjoint, n, dtype, norm),
        )

    return LazyOperatorNormInfo(norm, powers)


class _Products(NamedTuple):
    """An operator's products (``forward``: ``A``, ``adjoint``: ``A^H``) and its matrix
    (None unless dense or sparse)."""

    forward: Product
    adjoint: Product
    matrix: Any


def _products(config: Config, leaves: list[Any], dtype: np.dtype) -> _Products:
    operator = jax.tree_util.tree_unflatten(config.treedef, leaves)
    forward = block_product(operator, config.stacked)
    host = host_adjoint(operator)
    if host is not None:
        adjoint = block_product(host, True)
    else:  # with no adjoint on the host, only n <= 2 gets here, where it is not called
        adjoint = _conjugated(_transposed(forward), dtype)
    return _Products(forward, adjoint, matrix_of(operator))


def _forward(config: Config, leaves, B, trace, start, stop, divisions) -> tuple[Array, Array]:
    """``exp(t A) B`` at the time(s) of ``config`` (NaN where ``A``'s norm is not
    finite), and the shift ``mu`` it used."""
    dtype = np.dtype(B.dtype)
    n = config.n
    products = _products(config, leaves, dtype)
    if config.samples:
        trace = traceest(products.forward, n, dtype, config.samples)
    mu = (trace / n).astype(dtype)
    columns = B.shape[-1] if B.ndim == 2 else 1
    matvec = _shift(products.forward, mu)
    adjoint = _shift(products.adjoint, jnp.conj(mu))
    exact = None if products.matrix is None else _exact_norm(products.matrix, mu, n, dtype, False)
    info = _norm_info(matvec, adjoint, exact, n, dtype, columns)
    X = evolve(
        matvec,
        info,
        mu,
        None,
        B,
        start,
        stop,
        divisions,
        grid=config.grid,
        num=config.num,
        tol=unit_roundoff(dtype),
    )
    return X, mu


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def action(config: Config, leaves, B, trace, start, stop, divisions):
    """``exp(t A) B`` of the operator with pytree leaves ``leaves`` at the time(s) of
    ``config``: ``(n, c)`` or ``(num, n, c)``."""
    return _forward(config, leaves, B, trace, start, stop, divisions)[0]


def _action_fwd(config, leaves, B, trace, start, stop, divisions):
    # symbolic_zeros: each leaf of the arguments says whether it is differentiated.
    operator = jax.tree_util.tree_unflatten(config.treedef, [leaf.value for leaf in leaves])
    if on_host(operator):
        raise TypeError(HOST_GRADIENT)
    if any(leaf.perturbed for leaf in leaves):
        raise TypeError(OPERATOR_GRADIENT)
    values = [leaf.value for leaf in leaves]
    B, trace, start, stop, divisions = (x.value for x in (B, trace, start, stop, divisions))
    X, mu = _forward(config, values, B, trace, start, stop, divisions)
    return X, (values, B, mu, trace, start, stop, divisions, X)


def _action_bwd(config, residuals, G):
    leaves, B, mu, trace, start, stop, divisions, X = residuals
    if isinstance(G, SymbolicZero):
        G = jnp.zeros_like(X)
    dtype = np.dtype(B.dtype)
    n = config.n
    products = _products(config, leaves, dtype)
    columns = B.shape[-1] if B.ndim == 2 else 1
    # The operator A^T: products A^T x and (A^T)^H x = conj(A conj(x)).
    transpose = _shift(_transposed(products.forward), mu)
    its_adjoint = _shift(_conjugated(products.forward, dtype), jnp.conj(mu))
    exact = None if products.matrix is None else _exact_norm(products.matrix, mu, n, dtype, True)
    info = _norm_info(transpose, its_adjoint, exact, n, dtype, columns)
    tol = unit_roundoff(dtype)
    real = start.dtype
    if config.grid:
        h = (stop - start) / divisions
        largest = jnp.maximum(jnp.abs(start), jnp.abs(h))
    else:
        h, largest = jnp.ones((), real), jnp.ones((), real)
    norms = info.powers(largest)

    def step(tau, Y):
        """``exp(tau A)^T Y``."""
        m, s = fragment_3_1(norms, jnp.abs(tau), columns)
        return expm_multiply_simple_core(transpose, Y, tau, mu, m, s, tol, None)

    finite = jnp.isfinite(info.onenorm)
    zero = jnp.zeros((), real)
    if not config.grid:
        Bbar = jnp.where(finite, step(jnp.ones((), real), G), jnp.nan)
        return None, Bbar, jnp.zeros_like(trace), zero, zero, jnp.zeros_like(divisions)
    q = config.num - 1
    adjoint = lax.fori_loop(0, q, lambda i, adjoint: G[q - 1 - i] + step(h, adjoint), G[q])
    Bbar = jnp.where(finite, step(start, adjoint), jnp.nan)
    # d X_k / d t_k = A X_k, with t_k = start + k (stop - start) / divisions.
    AX = jax.vmap(products.forward)(X)
    rates = jnp.real(jnp.sum(G * AX, axis=tuple(range(1, X.ndim))))
    fraction = jnp.arange(config.num, dtype=real) / divisions
    return (
        None,
        Bbar,
        jnp.zeros_like(trace),
        jnp.sum((1 - fraction) * rates).astype(real),
        jnp.sum(fraction * rates).astype(real),
        jnp.zeros_like(divisions),
    )


action.defvjp(_action_fwd, _action_bwd, symbolic_zeros=True)


def _closed(converted: Any, arrays: list[Any], v: Array) -> Array:
    """A function closure-converted by ``jax.closure_convert``, applied to ``v``."""
    return converted(v, *arrays)


@partial(jax.jit, static_argnames=("config", "batch"))
def run(operator, B, trace, start, stop, divisions, *, config: Config, batch):
    """:func:`jaxdia.expm_multiply` of an operator for checked operands, converted to the
    dtype of the work (``B``'s and the trace's; times real), as one compiled call
    (``config.treedef`` is filled in here); a batch of ``B`` is flattened and mapped
    with ``vmap``."""
    work = B.dtype
    vector = B.ndim == 1
    if vector:
        B = B[:, None]
    size = math.prod(batch)
    B = jnp.broadcast_to(B, (*batch, *B.shape[-2:])).reshape(size, *B.shape[-2:])
    trace = jnp.broadcast_to(trace, batch).reshape(size)
    one_column = B.shape[-1] == 1  # kept 1-D inside, as a DiaMatrix's
    if one_column:
        B = B[..., 0]
    if not config.stacked:  # a function's arrays become leaves, to say when they are differentiated
        converted, arrays = jax.closure_convert(operator, jax.ShapeDtypeStruct((config.n,), work))
        operator = jax.tree_util.Partial(partial(_closed, converted), arrays)
    leaves, treedef = jax.tree_util.tree_flatten(operator)
    config = config._replace(treedef=treedef)

    def evolve_one(b, tr):
        return action(config, leaves, b, tr, start, stop, divisions)

    if config.n == 0:
        X = jnp.zeros((size, *((config.num,) if config.grid else ()), *B.shape[1:]), work)
    elif batch:
        X = jax.vmap(evolve_one)(B, trace)
    else:
        X = jnp.asarray(evolve_one(B[0], trace[0]))[None]
    if one_column:
        X = X[..., None]
    X = X.reshape(*batch, *X.shape[1:])
    return X[..., 0] if vector else X


def host_without_adjoint(operator: Any, n: int) -> bool:
    """Whether ``operator`` (as ``as_operator`` returns it) runs on the host and has no
    ``A^H`` product, which the norm estimates need (for ``n > 2``)."""
    return on_host(operator) and host_adjoint(operator) is None and n > 2
