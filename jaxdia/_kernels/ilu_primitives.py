"""The JAX primitives of the incomplete factorizations: ``jaxdia_ilu_factor`` and
``jaxdia_ilu_solve``, on the row layout of :mod:`jaxdia._kernels.ilu`.

* ``jaxdia_ilu_factor(rows)``: ``rows`` ``(..., K, n)`` of ``A`` to those of its ILU(0)
  (``kind="ilu"``) or IC(0) (``kind="ic"``, the lower triangle in and out) factor.
  ``method``: ``"exact"`` (the row-by-row loop), ``"sweeps"`` (``sweeps`` Chow–Patel
  sweeps) or ``"auto"``: exact on CPU, sweeps elsewhere (the exact loop takes ``n``
  sequential steps, which a GPU or TPU runs one small kernel at a time). ``grid``: None
  (the pattern of the whole diagonals) or a grid whose slots coupling no neighbours the
  factorization keeps at zero as it runs (see :func:`jaxdia._kernels.ilu.wrapped_fill`
  for where that changes the factor).
* ``jaxdia_ilu_solve(coefficients, [inverse_diagonal], b)``: ``op(T) x = b`` for a
  triangular ``T`` (see :func:`jaxdia._kernels.ilu.scan_solve`) and ``b`` ``(..., n)``.
  ``method``: ``"scan"`` (row by row), ``"wavefront"`` (by hyperplanes of ``grid``) or
  ``"auto"``: the scan on CPU (a step there costs less than a hyperplane's gathers per
  point) and without a grid, the wavefront elsewhere.

A factor's leading (batch) dims are absent (one factor for every right-hand side) or equal
to ``b``'s. The batching rules move ``vmap``'s axis to the front; on CPU a batch runs one
system after another (``lax.map``: a loop of in-place row updates is fastest alone, and
``vmap`` of it turns them into scatters), elsewhere side by side.

The factorization has no differentiation rule: callers stop its gradient (the
preconditioner is not differentiated). The solve is linear in ``b``: its JVP is the solve
of the tangent, its transpose the solve with ``T^T`` (the factor is taken as a constant,
which callers ensure by stopping its gradient).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import jax
import jax.numpy as jnp
from jax import Array, lax
from jax._src import dispatch
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from . import ilu as kernels
from .shared import to_front

factor_p = Primitive("jaxdia_ilu_factor")
solve_p = Primitive("jaxdia_ilu_solve")

FACTOR_METHODS = ("auto", "exact", "sweeps")
SOLVE_METHODS = ("auto", "scan", "wavefront")


def factor(
    rows,
    *,
    offsets: tuple[int, ...],
    kind: str,
    method: str,
    sweeps: int,
    grid: tuple[int, ...] | None = None,
):
    """The factor's rows (see the module docstring)."""
    return factor_p.bind(rows, offsets=offsets, kind=kind, method=method, sweeps=sweeps, grid=grid)


def solve(
    coefficients,
    inverse_diagonal,
    b,
    *,
    offsets: tuple[int, ...],
    transpose: bool = False,
    conjugate: bool = False,
    grid: tuple[int, ...] | None = None,
    weights: tuple[int, ...] | None = None,
    method: str = "auto",
):
    """``x`` with ``op(T) x = b`` (``inverse_diagonal`` None: ``T`` has a unit diagonal)."""
    operands = (
        (coefficients, b) if inverse_diagonal is None else (coefficients, inverse_diagonal, b)
    )
    return solve_p.bind(
        *operands,
        offsets=offsets,
        transpose=transpose,
        conjugate=conjugate,
        grid=grid,
        weights=weights,
        method=method,
    )


# -- abstract evaluation ------------------------------------------------------------------


factor_p.def_abstract_eval(lambda rows, **_: ShapedArray(rows.shape, rows.dtype))
solve_p.def_abstract_eval(lambda *avals, **_: ShapedArray(avals[-1].shape, avals[-1].dtype))


# -- batching -----------------------------------------------------------------------------


def _factor_batch(args, dims, **params):
    (rows,), (dim,) = args, dims
    return factor_p.bind(jnp.moveaxis(rows, dim, 0), **params), 0


def _solve_batch(args, dims, **params):
    *factors, b = args
    *factor_dims, b_dim = dims
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    b = to_front(b, b_dim, size)
    if all(d is None for d in factor_dims) and factors[0].ndim == 2:
        return solve_p.bind(*factors, b, **params), 0  # one factor for all
    factors = [to_front(f, d, size) for f, d in zip(factors, factor_dims)]
    # The factor's batch is now (size,) or (size, *b's own batch): b's batch (size, ...).
    batch = b.shape[:-1]
    core = factors[0].ndim - 2  # batch dims of the factor
    if core < len(batch):
        factors = [
            jnp.broadcast_to(
                f.reshape(f.shape[:1] + (1,) * (len(batch) - core) + f.shape[core:]),
                batch + f.shape[core:],
            )
            for f in factors
        ]
    return solve_p.bind(*factors, b, **params), 0


batching.primitive_batchers[factor_p] = _factor_batch
batching.primitive_batchers[solve_p] = _solve_batch


# -- differentiation of the solve -----------------------------------------------------------


def _solve_jvp(primals, tangents, **params):
    x = solve_p.bind(*primals, **params)
    db = tangents[-1]
    if type(db) is ad.Zero:  # x has b's shape and dtype: so has its zero tangent
        return x, db
    return x, solve_p.bind(*primals[:-1], ad.instantiate_zeros(db), **params)


def _solve_transpose(cotangent, *operands, transpose, **params):
    *factors, b = operands
    if not ad.is_undefined_primal(b) or any(ad.is_undefined_primal(f) for f in factors):
        raise NotImplementedError("jaxdia_ilu_solve is linear in b only")
    if type(cotangent) is ad.Zero:
        return [None] * len(factors) + [None]
    # (op T)^T: T <-> T^T and T^H <-> conj(T), i.e. the same conjugation, transposed.
    x = solve_p.bind(*factors, cotangent, transpose=not transpose, **params)
    return [None] * len(factors) + [x]


ad.primitive_jvps[solve_p] = _solve_jvp
ad.primitive_transposes[solve_p] = _solve_transpose


# -- implementations ---------------------------------------------------------------------------


def _systems(
    kernel: Callable[..., Array], factors: list[Array], b: Array, side_by_side: bool
) -> Array:
    """``kernel(*factors, b)`` for every system of ``b`` ``(..., n)``: with the factor's
    batch (equal to ``b``'s) or one factor for all, one after another or side by side."""
    n = b.shape[-1]
    if b.ndim == 1:
        return kernel(*factors, b)
    flat_b = b.reshape(-1, n)
    if factors[0].ndim == 2:  # one factor

        def one(v):
            return kernel(*factors, v)

        x = jax.vmap(one)(flat_b) if side_by_side else lax.map(one, flat_b)
    else:
        count = math.prod(b.shape[:-1])
        flat = [f.reshape(count, *f.shape[b.ndim - 1 :]) for f in factors]
        x = (jax.vmap(kernel) if side_by_side else partial(_map, kernel))(*flat, flat_b)
    return x.reshape(b.shape)


def _map(kernel, *operands):
    return lax.map(lambda args: kernel(*args), operands)


def _factor_kernel(kind: str, method: str, offsets, sweeps: int, grid):
    if method == "exact":
        rows = kernels.ilu_rows if kind == "ilu" else kernels.ic_rows
        return partial(rows, offsets=offsets, grid=grid)
    sweep = kernels.ilu_sweeps if kind == "ilu" else kernels.ic_sweeps
    return partial(sweep, offsets=offsets, sweeps=sweeps, grid=grid)


def _factor_impl(rows, *, offsets, kind, method, sweeps, grid, default: str):
    method = default if method == "auto" else method
    kernel = _factor_kernel(kind, method, offsets, sweeps, grid)
    if rows.ndim == 2:
        return kernel(rows)
    flat = rows.reshape(-1, *rows.shape[-2:])
    # The exact loop one matrix after another (see the module docstring); sweeps at once.
    out = jax.vmap(kernel)(flat) if method == "sweeps" else lax.map(kernel, flat)
    return out.reshape(rows.shape)


def _solve_impl(*operands, offsets, transpose, conjugate, grid, weights, method, cpu: bool):
    *factors, b = operands
    if method == "auto":
        method = "scan" if cpu or grid is None else "wavefront"
    unit = len(factors) == 1

    def kernel(coefficients, *rest):
        inverse_diagonal = None if unit else rest[0]
        v = rest[-1]
        if method == "wavefront":
            assert grid is not None and weights is not None
            return kernels.wavefront_solve(
                coefficients, offsets, inverse_diagonal, v, grid, weights, transpose, conjugate
            )
        return kernels.scan_solve(coefficients, offsets, inverse_diagonal, v, transpose, conjugate)

    return _systems(kernel, factors, b, side_by_side=not cpu)


factor_p.def_impl(partial(dispatch.apply_primitive, factor_p))
solve_p.def_impl(partial(dispatch.apply_primitive, solve_p))
mlir.register_lowering(factor_p, mlir.lower_fun(partial(_factor_impl, default="sweeps"), False))
mlir.register_lowering(
    factor_p, mlir.lower_fun(partial(_factor_impl, default="exact"), False), platform="cpu"
)
mlir.register_lowering(solve_p, mlir.lower_fun(partial(_solve_impl, cpu=False), False))
mlir.register_lowering(
    solve_p, mlir.lower_fun(partial(_solve_impl, cpu=True), False), platform="cpu"
)
