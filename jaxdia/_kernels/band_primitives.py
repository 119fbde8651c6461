"""The JAX primitives of the banded factorizations: ``jaxdia_band_factor`` and
``jaxdia_band_solve``.

Four kinds of factor, each LAPACK's layout (see :mod:`jaxdia._kernels.lapack`):

===========  ===============================  ==========================================
``kind``     factor operands                  factor results
===========  ===============================  ==========================================
``"gb"``     DIA ``data`` ``(..., nd, n)``    ``lu`` ``(..., n, 2kl+ku+1)``, ``pivots``,
                                              ``info``
``"pb"``     DIA ``data`` ``(..., nd, n)``    ``c`` ``(..., n, kd+1)``, ``info``
``"gt"``     rows ``(..., 4, n)``             ``lu`` (rows ``dl, d, du, du2``),
                                              ``pivots``, ``info``
``"pt"``     ``d`` (real), ``e`` ``(..., n)``  ``d``, ``e``, ``info``
===========  ===============================  ==========================================

For ``"gb"`` and ``"pb"`` the static ``placement`` says where each diagonal of ``data``
goes: ``(offset, column)`` pairs, the column of LAPACK's band array, or -1 for a diagonal
the factorization does not read (the other triangle, for a Cholesky factor). Only the
slots of ``data`` inside the matrix are read.

``jaxdia_band_solve`` takes a factor's arrays (without ``info``) and right-hand sides
``b`` ``(..., k, n)`` (the columns one after the other) and returns ``x`` of ``b``'s shape.
The factor's leading (batch) dims equal ``b``'s, or are absent: one factor for all.

Lowering is chosen per platform from the full (batched) shapes: on CPU, LAPACK through
:mod:`jaxdia._kernels.lapack` unless the systems are small enough that a scan is cheaper than the
host call (see :func:`host_is_faster`); everywhere else the ``lax.scan`` kernels of
:mod:`jaxdia._kernels.band_scan`, a batch as one scan with the systems side by side.

There are no differentiation rules: the factorization is never differentiated (callers
stop its gradient and differentiate the solve implicitly with
``lax.custom_linear_solve``, which only ever calls the solve primitive again). The
batching rules move ``vmap``'s axis to the front; a batch of right-hand sides for a factor
that the ``vmap`` does not batch is folded into the columns, so the factor is not copied.
"""

from __future__ import annotations

import math
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import dispatch
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from .._geometry import in_bounds
from . import band_scan, lapack

factor_p = Primitive("jaxdia_band_factor")
factor_p.multiple_results = True
solve_p = Primitive("jaxdia_band_solve")

#: Dims per system of each factor operand, and of each factor result, by kind.
_FACTOR_IN_CORE = {"gb": (2,), "pb": (2,), "gt": (2,), "pt": (1, 1)}
_FACTOR_OUT_CORE = {"gb": (2, 1, 0), "pb": (2, 0), "gt": (2, 1, 0), "pt": (1, 1, 0)}
#: Dims per system of the factor arrays a solve takes (the results less ``info``).
SOLVE_CORE = {kind: core[:-1] for kind, core in _FACTOR_OUT_CORE.items()}


def factor(
    *operands,
    kind: str,
    widths: tuple[int, ...],
    placement: tuple[tuple[int, int], ...] = (),
    method: str = "auto",
):
    """The factor arrays and ``info`` of one of the four kinds (see the module docstring).

    ``widths``: ``(kl, ku)`` for ``"gb"``, ``(kd, lower)`` for ``"pb"``, ``()`` else.
    ``method``: "auto" (by platform and size), or "host"/"scan" (CPU; for tests).
    """
    return factor_p.bind(*operands, kind=kind, widths=widths, placement=placement, method=method)


def band_columns(kind: str, widths: tuple[int, ...]) -> int:
    """``ldab``: the columns of LAPACK's band array for a ``"gb"`` or ``"pb"`` factor."""
    return 2 * widths[0] + widths[1] + 1 if kind == "gb" else widths[0] + 1


def solve(*operands, kind: str, widths: tuple[int, ...], trans: int = 0, method: str = "auto"):
    """``x`` ``(..., k, n)`` for the factor arrays and right-hand sides ``operands[-1]``.

    ``trans``: 0 solves ``A x = b``, 1 ``A^T x = b``, 2 ``A^H x = b`` (``"gb"``/``"gt"``;
    the Cholesky kinds take 0 only, their ``A`` being Hermitian).
    """
    return solve_p.bind(*operands, kind=kind, widths=widths, trans=trans, method=method)


# -- abstract evaluation -------------------------------------------------------------------


def _batch(aval, core: int) -> tuple[int, ...]:
    return tuple(aval.shape[: aval.ndim - core])


def _factor_abstract(*avals, kind, widths, placement, method):
    del placement, method
    batch = _batch(avals[0], _FACTOR_IN_CORE[kind][0])
    if kind == "pt":
        d, e = avals
        return [
            ShapedArray(d.shape, d.dtype),
            ShapedArray(e.shape, e.dtype),
            ShapedArray(batch, np.int32),
        ]
    (operand,) = avals
    n = operand.shape[-1]
    if kind == "gt":
        results = [ShapedArray(operand.shape, operand.dtype)]
    else:
        shape = (*batch, n, band_columns(kind, widths))
        results = [ShapedArray(shape, operand.dtype)]
    if kind in ("gb", "gt"):
        results.append(ShapedArray((*batch, n), np.int32))
    return [*results, ShapedArray(batch, np.int32)]


def _solve_abstract(*avals, kind, widths, trans, method):
    del kind, widths, trans, method
    b = avals[-1]
    return ShapedArray(b.shape, b.dtype)


factor_p.def_abstract_eval(_factor_abstract)
solve_p.def_abstract_eval(_solve_abstract)


# -- batching ------------------------------------------------------------------------------


def _to_front(value, dim, size):
    if dim is None:
        return jnp.broadcast_to(value, (size, *value.shape))
    return jnp.moveaxis(value, dim, 0)


def _factor_batch(args, dims, **params):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [_to_front(a, d, size) for a, d in zip(args, dims)]
    results = factor_p.bind(*moved, **params)
    return results, [0] * len(results)


def _solve_batch(args, dims, *, kind, widths, trans, method):
    *factors, b = args
    *factor_dims, b_dim = dims
    params = dict(kind=kind, widths=widths, trans=trans, method=method)
    if all(d is None for d in factor_dims):
        # A batch of right-hand sides for one factor: fold it into the columns.
        b = jnp.moveaxis(b, b_dim, -3)  # (..., V, k, n)
        *lead, size, k, n = b.shape
        x = solve_p.bind(*factors, b.reshape(*lead, size * k, n), **params)
        return jnp.moveaxis(x.reshape(*lead, size, k, n), -3, 0), 0
    size = next(a.shape[d] for a, d in zip(factors, factor_dims) if d is not None)
    factors = [_to_front(a, d, size) for a, d in zip(factors, factor_dims)]
    b = _to_front(b, b_dim, size)
    factor_batch = factors[0].ndim - SOLVE_CORE[kind][0]
    if b.ndim - 2 != factor_batch:  # the factor had no batch dims before: b's must go too
        b = jnp.broadcast_to(b, (*factors[0].shape[:factor_batch], *b.shape[-2:]))
    return solve_p.bind(*factors, b, **params), 0


batching.primitive_batchers[factor_p] = _factor_batch
batching.primitive_batchers[solve_p] = _solve_batch


# -- implementations -----------------------------------------------------------------------

#: A host call has a fixed cost per call and per system, on top of LAPACK's time; a scan
#: step costs XLA's loop overhead once for all the systems side by side in it, plus their
#: arithmetic. Up to ``_SCAN_ROWS`` rows, and for batches of at least ``_SCAN_BATCH``
#: systems of up to ``_SCAN_BATCH_ROWS`` rows, the scan was faster (benchmarks/README.md).
_SCAN_ROWS = 16
_SCAN_BATCH = 64
_SCAN_BATCH_ROWS = 128
#: LAPACK indexes with 32-bit ints: larger systems go to the scan.
_INT32 = 2**31 - 1


def host_is_faster(n: int, systems: int, size: int) -> bool:
    """Whether CPU solves of ``systems`` systems of ``n`` rows (``size`` elements in the
    largest array of one system) go to LAPACK rather than the scan."""
    if size > _INT32:
        return False
    if n <= _SCAN_ROWS:
        return False
    return not (systems >= _SCAN_BATCH and n <= _SCAN_BATCH_ROWS)


def _flatten(value, core: int):
    batch = value.shape[: value.ndim - core]
    return value.reshape(math.prod(batch), *value.shape[value.ndim - core :]), batch


def _bands(data, placement, ldab: int):
    """LAPACK's band arrays ``(..., n, ldab)`` of DIA ``data`` (see the module docstring)."""
    n = data.shape[-1]
    zeros = jnp.zeros(data.shape[:-2] + (n,), data.dtype)
    columns = [zeros] * ldab
    inside = in_bounds(tuple(offset for offset, _ in placement), (n, n), host=True)
    for index, (_, column) in enumerate(placement):
        if column >= 0:  # padding slots hold anything
            columns[column] = jnp.where(inside[index], data[..., index, :], 0)
    return jnp.stack(columns, axis=-1)


def _factor_scan(*operands, kind, widths, placement):
    if kind in ("gb", "pb"):
        operands = (_bands(operands[0], placement, band_columns(kind, widths)),)
    flat = [_flatten(o, c)[0] for o, c in zip(operands, _FACTOR_IN_CORE[kind])]
    batch = _flatten(operands[0], _FACTOR_IN_CORE[kind][0])[1]
    kernel = {
        "gb": lambda ab: band_scan.gbtrf(ab, kl=widths[0], ku=widths[1]),
        "pb": lambda ab: band_scan.pbtrf(ab, kd=widths[0], lower=bool(widths[1])),
        "gt": band_scan.gttrf,
        "pt": band_scan.pttrf,
    }[kind]
    results = jax.vmap(kernel)(*flat)
    return [r.reshape(*batch, *r.shape[1:]) for r in results]


def _solve_scan(*operands, kind, widths, trans):
    *factors, b = operands
    core = SOLVE_CORE[kind]
    kernel = {
        "gb": lambda lu, p, rhs: band_scan.gbtrs(
            lu, p, rhs, kl=widths[0], ku=widths[1], trans=trans
        ),
        "pb": lambda c, rhs: band_scan.pbtrs(c, rhs, kd=widths[0], lower=bool(widths[1])),
        "gt": lambda lu, p, rhs: band_scan.gttrs(lu, p, rhs, trans=trans),
        "pt": band_scan.pttrs,
    }[kind]
    if factors[0].ndim == core[0]:  # one factor: all right-hand sides as columns
        return kernel(*factors, b.reshape(-1, b.shape[-1])).reshape(b.shape)
    flat_factors = [_flatten(f, c)[0] for f, c in zip(factors, core)]
    flat_b, _ = _flatten(b, 2)
    return jax.vmap(kernel)(*flat_factors, flat_b).reshape(b.shape)


def _factor_host(*operands, kind, widths, placement):
    if kind == "gb":
        return lapack.gbtrf(*operands, placement=placement, kl=widths[0], ku=widths[1])
    if kind == "pb":
        return lapack.pbtrf(*operands, placement=placement, kd=widths[0], lower=bool(widths[1]))
    return (lapack.gttrf if kind == "gt" else lapack.pttrf)(*operands)


def _solve_host(*operands, kind, widths, trans):
    if kind == "gb":
        return lapack.gbtrs(*operands, kl=widths[0], ku=widths[1], trans=trans)
    if kind == "pb":
        return lapack.pbtrs(*operands, kd=widths[0], lower=bool(widths[1]))
    if kind == "gt":
        return lapack.gttrs(*operands, trans=trans)
    return lapack.pttrs(*operands)


def _use_host(method: str, n: int, systems: int, size: int) -> bool:
    """Whether the CPU lowering calls LAPACK for ``systems`` systems of ``n`` rows whose
    largest factor array holds ``size`` elements per system."""
    if method != "auto":
        return method == "host"
    return host_is_faster(n, systems, size)


def _factor_cpu(*operands, kind, widths, placement, method):
    first = operands[0]
    core = _FACTOR_IN_CORE[kind][0]
    n = first.shape[-1]
    size = n * (band_columns(kind, widths) if kind in ("gb", "pb") else 4)
    if _use_host(method, n, math.prod(first.shape[: first.ndim - core]), size):
        return _factor_host(*operands, kind=kind, widths=widths, placement=placement)
    return _factor_scan(*operands, kind=kind, widths=widths, placement=placement)


def _solve_cpu(*operands, kind, widths, trans, method):
    first = operands[0]
    core = SOLVE_CORE[kind][0]
    n = first.shape[-2] if kind in ("gb", "pb") else first.shape[-1]
    systems = math.prod(first.shape[: first.ndim - core])
    if _use_host(method, n, systems, math.prod(first.shape[first.ndim - core :])):
        return _solve_host(*operands, kind=kind, widths=widths, trans=trans)
    return _solve_scan(*operands, kind=kind, widths=widths, trans=trans)


def _factor_default(*operands, kind, widths, placement, method):
    del method
    return _factor_scan(*operands, kind=kind, widths=widths, placement=placement)


def _solve_default(*operands, kind, widths, trans, method):
    del method
    return _solve_scan(*operands, kind=kind, widths=widths, trans=trans)


factor_p.def_impl(partial(dispatch.apply_primitive, factor_p))
solve_p.def_impl(partial(dispatch.apply_primitive, solve_p))
mlir.register_lowering(factor_p, mlir.lower_fun(_factor_default, multiple_results=True))
mlir.register_lowering(solve_p, mlir.lower_fun(_solve_default, multiple_results=False))
mlir.register_lowering(factor_p, mlir.lower_fun(_factor_cpu, multiple_results=True), platform="cpu")
mlir.register_lowering(solve_p, mlir.lower_fun(_solve_cpu, multiple_results=False), platform="cpu")
