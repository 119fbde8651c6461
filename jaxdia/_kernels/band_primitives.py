"""The JAX primitives of the banded factorizations: ``jaxdia_band_factor`` and
``jaxdia_band_solve``.

The factor's static ``layout`` (see :mod:`jaxdia._kernels.band_layouts`): four in LAPACK's
layout (see :mod:`jaxdia._kernels.lapack`), two computed by block cyclic reduction (see
:mod:`jaxdia._kernels.band_parallel`), and a one-shot solve:

==============  ===============================  ==========================================
``layout``      factor operands                  factor results
==============  ===============================  ==========================================
``GB``          DIA ``data`` ``(..., nd, n)``    ``lu`` ``(..., n, 2kl+ku+1)``, ``pivots``,
                                                 ``info``
``PB``          DIA ``data`` ``(..., nd, n)``    ``c`` ``(..., n, kd+1)``, ``info``
``GT``          rows ``(..., 4, n)``             ``lu`` (rows ``dl, d, du, du2``),
                                                 ``pivots``, ``info``
``PT``          ``d`` (real), ``e`` ``(..., n)``  ``d``, ``e``, ``info``
``CR``          DIA ``data`` ``(..., nd, n)``    the cyclic reduction's arrays, ``info``
``CH``          DIA ``data`` ``(..., nd, n)``    the same, of the Hermitian matrix one
                                                 triangle defines, ``info``
``ONESHOT``     (no factor)                      (none: the solve factors)
==============  ===============================  ==========================================

For the band-array layouts (``GB`` and ``PB``) the static ``placement`` says where each
diagonal of ``data`` goes: ``(offset, column)`` pairs, the column of LAPACK's band array,
or -1 for a diagonal the factorization does not read (the other triangle, for a Cholesky
factor). The parallel layouts and the one-shot solve take the static ``offsets`` of
``data`` instead. Only the slots of ``data`` inside the matrix are read. ``widths``:
``(kl, ku)`` for ``GB``, ``CR`` and ``ONESHOT``, ``(kd, lower)`` for ``PB`` and ``CH``,
``()`` else.

``jaxdia_band_solve`` takes a factor's arrays (without ``info``; for ``CR`` followed by
the matrix's ``data``, for ``ONESHOT`` only ``data``) and right-hand sides ``b`` ``(..., k,
n)`` (the columns one after the other) and returns ``x`` of ``b``'s shape. The factor's
leading (batch) dims equal ``b``'s, or are absent: one factor for all.

Lowering is chosen per platform from the full (batched) shapes:

* LAPACK's layouts: on CPU, LAPACK through :mod:`jaxdia._kernels.lapack` unless the
  systems are small enough that a scan is cheaper than the host call (see
  :func:`jaxdia._dispatch.host_is_faster`); everywhere else the ``lax.scan`` kernels of
  :mod:`jaxdia._kernels.band_scan`, a batch as one scan with the systems side by side
  (``n`` sequential steps).
* The parallel layouts: cyclic reduction everywhere (``log2(n / m)`` levels, no loop over
  the rows). The LU's solves check their backward error and refine
  (:mod:`jaxdia._kernels.band_refine`); a system that still fails is solved by LAPACK on CPU
  and is NaN elsewhere. On CPU ``info`` of a failed ``CR`` factor is LAPACK's.
* The one-shot solve (:func:`jaxdia._dispatch.oneshot_implementation` chooses): on CPU
  LAPACK, a batch in one call (``gtsv`` through ``lax.linalg.tridiagonal_solve`` for a
  tridiagonal matrix, ``?gbtrf`` + ``?gbtrs`` in one call, ``gbsv``, else); on GPUs
  ``lax.linalg.tridiagonal_solve`` (cuSPARSE's ``gtsv2``, parallel and pivoting) for a
  tridiagonal matrix, cyclic reduction else; on TPU cyclic reduction.

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
from jax import Array, lax
from jax._src import dispatch
from jax.core import ShapedArray
from jax.extend.core import Primitive
from jax.interpreters import batching, mlir

from .. import _dispatch
from .._geometry import diagonal_bounds, in_bounds
from . import band_parallel, band_refine, band_scan, lapack
from .band_layouts import CR, GB, GT, ONESHOT, PB, PT, Layout
from .shared import to_front

factor_p = Primitive("jaxdia_band_factor")
factor_p.multiple_results = True
solve_p = Primitive("jaxdia_band_solve")


def block_size(layout: Layout, widths: tuple[int, ...]) -> int:
    """``m``, the blocks' size of a parallel layout (or of the one-shot solve)."""
    if layout.hermitian:
        return max(widths[0], 1)
    return band_parallel.block_size(*widths)


def parallel_shapes(layout: Layout, widths: tuple[int, ...], n: int) -> list[tuple[int, ...]]:
    """The core shape of each array of a parallel factor of ``n`` rows."""
    m = block_size(layout, widths)
    return band_parallel.factor_shapes(-(-n // m), m)


def factor(
    *operands: Array,
    layout: Layout,
    widths: tuple[int, ...],
    placement: tuple[tuple[int, int], ...] = (),
    offsets: tuple[int, ...] = (),
    method: str = "auto",
) -> list[Array]:
    """The factor arrays and ``info`` of a layout (see the module docstring).

    ``method`` (:data:`jaxdia._dispatch.METHODS`; LAPACK's layouts read it on CPU):
    "auto" (by size), "lapack" or "scan" (forced).
    """
    return factor_p.bind(
        *operands,
        layout=layout,
        widths=widths,
        placement=placement,
        offsets=offsets,
        method=method,
    )


def solve(
    *operands: Array,
    layout: Layout,
    widths: tuple[int, ...],
    trans: int = 0,
    offsets: tuple[int, ...] = (),
    method: str = "auto",
) -> Array:
    """``x`` ``(..., k, n)`` for the factor arrays and right-hand sides ``operands[-1]``.

    ``trans``: 0 solves ``A x = b``, 1 ``A^T x = b``, 2 ``A^H x = b`` (the LU layouts and
    the one-shot solve; the Cholesky layouts take 0 only, their ``A`` being Hermitian).
    ``method`` (:data:`jaxdia._dispatch.METHODS`): LAPACK's layouts read it on CPU as
    the factor does; the one-shot solve, "parallel": cyclic reduction everywhere.
    """
    return solve_p.bind(
        *operands, layout=layout, widths=widths, trans=trans, offsets=offsets, method=method
    )


# -- abstract evaluation -------------------------------------------------------------------


def _batch(aval, core: int) -> tuple[int, ...]:
    return tuple(aval.shape[: aval.ndim - core])


def _factor_abstract(*avals, layout, widths, placement, offsets, method):
    del placement, offsets, method
    if layout.parallel:
        (data,) = avals
        batch = _batch(data, 2)
        shapes = parallel_shapes(layout, widths, data.shape[-1])
        arrays = [ShapedArray((*batch, *shape), data.dtype) for shape in shapes]
        return [*arrays, ShapedArray(batch, np.int32)]
    batch = _batch(avals[0], layout.operand_core[0])
    if layout is PT:
        d, e = avals
        return [
            ShapedArray(d.shape, d.dtype),
            ShapedArray(e.shape, e.dtype),
            ShapedArray(batch, np.int32),
        ]
    (operand,) = avals
    n = operand.shape[-1]
    if layout is GT:
        results = [ShapedArray(operand.shape, operand.dtype)]
    else:
        shape = (*batch, n, layout.band_columns(widths))
        results = [ShapedArray(shape, operand.dtype)]
    if layout.pivots:
        results.append(ShapedArray((*batch, n), np.int32))
    return [*results, ShapedArray(batch, np.int32)]


def _solve_abstract(*avals, layout, widths, trans, offsets, method):
    del layout, widths, trans, offsets, method
    b = avals[-1]
    return ShapedArray(b.shape, b.dtype)


factor_p.def_abstract_eval(_factor_abstract)
solve_p.def_abstract_eval(_solve_abstract)


# -- batching ------------------------------------------------------------------------------


def _factor_batch(args, dims, **params):
    size = next(a.shape[d] for a, d in zip(args, dims) if d is not None)
    moved = [to_front(a, d, size) for a, d in zip(args, dims)]
    results = factor_p.bind(*moved, **params)
    return results, [0] * len(results)


def _solve_batch(args, dims, *, layout, widths, trans, offsets, method):
    *factors, b = args
    *factor_dims, b_dim = dims
    params = dict(layout=layout, widths=widths, trans=trans, offsets=offsets, method=method)
    if all(d is None for d in factor_dims):
        # A batch of right-hand sides for one factor: fold it into the columns.
        b = jnp.moveaxis(b, b_dim, -3)  # (..., V, k, n)
        *lead, size, k, n = b.shape
        x = solve_p.bind(*factors, b.reshape(*lead, size * k, n), **params)
        return jnp.moveaxis(x.reshape(*lead, size, k, n), -3, 0), 0
    size = next(a.shape[d] for a, d in zip(factors, factor_dims) if d is not None)
    factors = [to_front(a, d, size) for a, d in zip(factors, factor_dims)]
    b = to_front(b, b_dim, size)
    factor_batch = factors[0].ndim - layout.solve_core
    if b.ndim - 2 != factor_batch:  # the factor had no batch dims before: b's must go too
        b = jnp.broadcast_to(b, (*factors[0].shape[:factor_batch], *b.shape[-2:]))
    return solve_p.bind(*factors, b, **params), 0


batching.primitive_batchers[factor_p] = _factor_batch
batching.primitive_batchers[solve_p] = _solve_batch


# -- implementations -----------------------------------------------------------------------


def _flatten(value, core: int):
    batch = value.shape[: value.ndim - core]
    return value.reshape(math.prod(batch), *value.shape[value.ndim - core :]), batch


def _bands(data, placement, ldab: int):
    """LAPACK's band arrays ``(..., n, ldab)`` of DIA ``data`` (see the module docstring)."""
    n = data.shape[-1]
    zeros = jnp.zeros(data.shape[:-2] + (n,), data.dtype)
    columns = [zeros] * ldab
    inside = in_bounds(tuple(offset for offset, _ in placement), (n, n))
    for index, (_, column) in enumerate(placement):
        if column >= 0:  # padding slots hold anything
            columns[column] = jnp.where(inside[index], data[..., index, :], 0)
    return jnp.stack(columns, axis=-1)


def _factor_scan(*operands, layout, widths, placement):
    if layout.band_array:
        operands = (_bands(operands[0], placement, layout.band_columns(widths)),)
    flat = [_flatten(o, c)[0] for o, c in zip(operands, layout.operand_core)]
    batch = _flatten(operands[0], layout.operand_core[0])[1]
    kernel = {
        GB: lambda ab: band_scan.gbtrf(ab, kl=widths[0], ku=widths[1]),
        PB: lambda ab: band_scan.pbtrf(ab, kd=widths[0], lower=bool(widths[1])),
        GT: band_scan.gttrf,
        PT: band_scan.pttrf,
    }[layout]
    results = jax.vmap(kernel)(*flat)
    return [r.reshape(*batch, *r.shape[1:]) for r in results]


def _solve_scan(*operands, layout, widths, trans):
    *factors, b = operands
    core = layout.array_core
    kernel = {
        GB: lambda lu, p, rhs: band_scan.gbtrs(lu, p, rhs, kl=widths[0], ku=widths[1], trans=trans),
        PB: lambda c, rhs: band_scan.pbtrs(c, rhs, kd=widths[0], lower=bool(widths[1])),
        GT: lambda lu, p, rhs: band_scan.gttrs(lu, p, rhs, trans=trans),
        PT: band_scan.pttrs,
    }[layout]
    if factors[0].ndim == core[0]:  # one factor: all right-hand sides as columns
        return kernel(*factors, b.reshape(-1, b.shape[-1])).reshape(b.shape)
    flat_factors = [_flatten(f, c)[0] for f, c in zip(factors, core)]
    flat_b, _ = _flatten(b, 2)
    return jax.vmap(kernel)(*flat_factors, flat_b).reshape(b.shape)


def _factor_host(*operands, layout, widths, placement):
    if layout is GB:
        return lapack.gbtrf(*operands, placement=placement, kl=widths[0], ku=widths[1])
    if layout is PB:
        return lapack.pbtrf(*operands, placement=placement, kd=widths[0], lower=bool(widths[1]))
    return (lapack.gttrf if layout is GT else lapack.pttrf)(*operands)


def _solve_host(*operands, layout, widths, trans):
    if layout is GB:
        return lapack.gbtrs(*operands, kl=widths[0], ku=widths[1], trans=trans)
    if layout is PB:
        return lapack.pbtrs(*operands, kd=widths[0], lower=bool(widths[1]))
    if layout is GT:
        return lapack.gttrs(*operands, trans=trans)
    return lapack.pttrs(*operands)


def _factor_cpu(*operands, layout, widths, placement, offsets, method):
    if layout.parallel:
        return _factor_parallel(
            *operands, layout=layout, widths=widths, offsets=offsets, platform="cpu"
        )
    first = operands[0]
    core = layout.operand_core[0]
    n = first.shape[-1]
    size = n * (layout.band_columns(widths) if layout.band_array else 4)
    if _dispatch.calls_lapack(method, n, math.prod(first.shape[: first.ndim - core]), size):
        return _factor_host(*operands, layout=layout, widths=widths, placement=placement)
    return _factor_scan(*operands, layout=layout, widths=widths, placement=placement)


def _solve_cpu(*operands, layout, widths, trans, offsets, method):
    if layout is ONESHOT:
        return _solve_oneshot(
            *operands, widths=widths, trans=trans, offsets=offsets, method=method, platform="cpu"
        )
    if not layout.lapack:
        return _solve_parallel(
            *operands, layout=layout, widths=widths, trans=trans, offsets=offsets, platform="cpu"
        )
    first = operands[0]
    core = layout.array_core[0]
    n = first.shape[-2] if layout.band_array else first.shape[-1]
    systems = math.prod(first.shape[: first.ndim - core])
    if _dispatch.calls_lapack(method, n, systems, math.prod(first.shape[first.ndim - core :])):
        return _solve_host(*operands, layout=layout, widths=widths, trans=trans)
    return _solve_scan(*operands, layout=layout, widths=widths, trans=trans)


def _factor_on(platform: str):
    def lowering(*operands, layout, widths, placement, offsets, method):
        del method
        if layout.parallel:
            return _factor_parallel(
                *operands, layout=layout, widths=widths, offsets=offsets, platform=platform
            )
        return _factor_scan(*operands, layout=layout, widths=widths, placement=placement)

    return lowering


def _solve_on(platform: str):
    def lowering(*operands, layout, widths, trans, offsets, method):
        if layout is ONESHOT:
            return _solve_oneshot(
                *operands,
                widths=widths,
                trans=trans,
                offsets=offsets,
                method=method,
                platform=platform,
            )
        if not layout.lapack:
            return _solve_parallel(
                *operands,
                layout=layout,
                widths=widths,
                trans=trans,
                offsets=offsets,
                platform=platform,
            )
        return _solve_scan(*operands, layout=layout, widths=widths, trans=trans)

    return lowering


# -- the parallel layouts and the one-shot solve ----------------------------------------------


def _gb_placement(offsets: tuple[int, ...], widths: tuple[int, ...]) -> tuple[tuple[int, int], ...]:
    """``GB``'s placement of diagonals of these offsets (see the module docstring)."""
    kl, ku = widths
    return tuple((offset, kl + ku - offset) for offset in offsets)


def _systems(data: Array) -> Array:
    """``data`` ``(..., nd, n)`` as ``(S, nd, n)``."""
    return data.reshape(math.prod(data.shape[:-2]), *data.shape[-2:])


def _zero_padding(data: Array, offsets: tuple[int, ...]) -> Array:
    """``data`` with its padding slots (which hold anything) zero."""
    n = data.shape[-1]
    return jnp.where(in_bounds(offsets, (n, n)), data, 0)


def _triangle(layout: Layout, widths: tuple[int, ...]) -> str | None:
    if not layout.hermitian:
        return None
    return "lower" if widths[1] else "upper"


def _factor_parallel(data, *, layout, widths, offsets, platform: str):
    batch = data.shape[:-2]
    if data.shape[-1] == 0:
        shapes = parallel_shapes(layout, widths, 0)
        empty = [jnp.zeros((*batch, *shape), data.dtype) for shape in shapes]
        return [*empty, jnp.zeros(batch, np.int32)]
    flat = _zero_padding(_systems(data), offsets)
    m = block_size(layout, widths)
    form = _dispatch.block_form(platform)
    triangle = _triangle(layout, widths)
    arrays, failed = band_parallel.factor_systems(flat, offsets, m, triangle, form=form)
    info = jnp.where(failed >= 0, failed + 1, 0).astype(np.int32)
    if platform == "cpu" and layout is CR and offsets:
        # LAPACK says whether the matrix is singular (the reduction fails on more).
        def lapack_info():
            placement = _gb_placement(offsets, widths)
            info = lapack.gbtrf(flat, placement=placement, kl=widths[0], ku=widths[1])[2]
            return jnp.where(failed >= 0, info, 0)

        info = lax.cond(jnp.any(failed >= 0), lapack_info, lambda: info)
    return [a.reshape(*batch, *a.shape[1:]) for a in arrays] + [info.reshape(batch)]


def _lapack_solve(data, b, *, offsets, widths, trans):
    """LAPACK's ``?gbtrf`` + ``?gbtrs`` (one call: ``lapack.gbsv``) on ``data``
    ``(S or 1, nd, n)``; NaN where a matrix is singular."""
    if not offsets:  # the zero matrix
        return jnp.full(b.shape, jnp.nan, b.dtype)
    kl, ku = widths
    placement = _gb_placement(offsets, widths)
    x, info = lapack.gbsv(data, b, placement=placement, kl=kl, ku=ku, trans=trans)
    return jnp.where((info != 0)[:, None, None], jnp.nan, x)


def _scan_solve(data, b, *, offsets, widths, trans):
    """The ``lax.scan`` LU (``GB``'s kernels of :mod:`jaxdia._kernels.band_scan`) of
    ``data`` ``(S or 1, nd, n)``, the systems side by side; NaN where a matrix is
    singular."""
    placement = _gb_placement(offsets, widths)
    lu, pivots, info = _factor_scan(data, layout=GB, widths=widths, placement=placement)
    if data.shape[0] == 1:  # one factor for every right-hand side
        lu, pivots, info = lu[0], pivots[0], jnp.broadcast_to(info, (b.shape[0],))
    x = _solve_scan(lu, pivots, b, layout=GB, widths=widths, trans=trans)
    return jnp.where((info != 0)[:, None, None], jnp.nan, x)


def _tridiagonal_library(data, b, *, offsets, trans):
    """``lax.linalg.tridiagonal_solve`` (LAPACK's ``gtsv`` on CPU, cuSPARSE's ``gtsv2`` on
    GPUs; both pivot) of the tridiagonal ``op(A)`` of ``data`` ``(S or 1, nd, n)``."""
    n = data.shape[-1]
    if trans:
        data, offsets = _transposed(data, offsets)
        if trans == 2:
            data = data.conj()
    if data.shape[0] == 1 < b.shape[0]:
        # One matrix for every right-hand side: they are the columns of one system (no
        # copy of the matrix per system).
        systems, k = b.shape[:2]
        x = _tridiagonal_library(data, b.reshape(1, systems * k, n), offsets=offsets, trans=0)
        return x.reshape(b.shape)

    def diagonal(offset):
        # lax's layout: dl[i] = A[i, i - 1] (dl[0] = 0), du[i] = A[i, i + 1] (du[-1] = 0).
        if offset not in offsets:
            return jnp.zeros((*data.shape[:-2], n), data.dtype)
        values = data[..., offsets.index(offset), :]
        return _row_aligned(values, offset)

    dl, d, du = (jnp.broadcast_to(diagonal(k), (b.shape[0], n)) for k in (-1, 0, 1))
    x = lax.linalg.tridiagonal_solve(dl, d, du, jnp.swapaxes(b, -1, -2))
    return jnp.swapaxes(x, -1, -2)


def _row_aligned(values: Array, offset: int) -> Array:
    """``out[i] = A[i, i + offset]`` from the column-aligned diagonal ``values[j] = A[j -
    offset, j]``, zero outside the matrix."""
    n = values.shape[-1]
    start, stop = diagonal_bounds(offset, (n, n))
    pad = [(0, 0)] * (values.ndim - 1) + [(start - offset, n - (stop - offset))]
    return jnp.pad(values[..., start:stop], pad)


def _transposed(data, offsets):
    """DIA ``data`` and offsets of ``A^T`` (not conjugated): diagonal ``o`` of ``A`` is
    diagonal ``-o`` of ``A^T``, whose column ``j - o`` holds ``A[j - o, j]``."""
    order = sorted(range(len(offsets)), key=lambda k: -offsets[k])
    rows = [_shift(data[..., k, :], offsets[k]) for k in order]
    return jnp.stack(rows, axis=-2), tuple(-offsets[k] for k in order)


def _shift(values: Array, by: int) -> Array:
    """``out[j] = values[j + by]``, zero-filled."""
    n = values.shape[-1]
    if by == 0 or n == 0:
        return values
    if by > 0:
        return jnp.pad(values[..., by:], [(0, 0)] * (values.ndim - 1) + [(0, by)])
    return jnp.pad(values[..., :by], [(0, 0)] * (values.ndim - 1) + [(-by, 0)])


def _solve_oneshot(data, b, *, widths, trans, offsets, method, platform: str):
    """The one-shot solve of ``data``'s systems: a library call, LAPACK, the scan LU or
    cyclic reduction, as :func:`jaxdia._dispatch.oneshot_implementation` chooses for
    ``platform`` and the systems' shapes."""
    n = b.shape[-1]
    systems = math.prod(data.shape[:-2])
    implementation = _dispatch.oneshot_implementation(
        platform, method, n, widths, systems, n * GB.band_columns(widths)
    )
    if implementation == "parallel":
        return _solve_parallel(
            data,
            b,
            layout=ONESHOT,
            widths=widths,
            trans=trans,
            offsets=offsets,
            platform=platform,
        )
    lead = b.shape[:-2]
    b = b.reshape(math.prod(lead), *b.shape[-2:])
    # Not zero-padded: ?gtsv's diagonals, ?gbtrf's fill and the scan's band arrays read the
    # slots inside the matrix only (a mask costs a small batch more than gtsv).
    data = _systems(data)
    if implementation == "gtsv":
        x = _tridiagonal_library(data, b, offsets=offsets, trans=trans)
    else:
        factor_and_solve = _lapack_solve if implementation == "lapack" else _scan_solve
        x = factor_and_solve(data, b, offsets=offsets, widths=widths, trans=trans)
    return x.reshape(*lead, *b.shape[-2:])


def _solve_parallel(*operands, layout, widths, trans, offsets, platform: str):
    """Cyclic reduction's solve: with a parallel layout's stored arrays, or for the
    one-shot solve factoring as it goes; refined (LU), and where that fails LAPACK's on
    CPU, NaN elsewhere."""
    *arrays, b = operands
    lead = b.shape[:-2]
    b = b.reshape(math.prod(lead), *b.shape[-2:])
    form = _dispatch.block_form(platform)
    if layout.hermitian:
        flat = [a.reshape(-1, *a.shape[-3:]) if a.ndim > 3 else a for a in arrays]
        x = band_parallel.solve_systems(flat, b, trans=0, form=form)
        return x.reshape(*lead, *b.shape[-2:])
    data = _zero_padding(_systems(arrays.pop()), offsets)
    m = block_size(layout, widths)
    if layout is ONESHOT:
        arrays, failed = band_parallel.factor_systems(data, offsets, m, form=form)
    else:
        arrays = [a.reshape(-1, *a.shape[-3:]) if a.ndim > 3 else a for a in arrays]
        failed = None

    def solve(rhs):
        return band_parallel.solve_systems(arrays, rhs, trans=trans, form=form)

    # The factor's precision, which may be below b's (see jaxdia._linalg.banded).
    precision = arrays[-1].dtype
    x, error = band_refine.refined(solve, data, offsets, b, trans=trans, precision=precision)
    bad = ~(error <= band_refine.limit(precision))
    if failed is not None:
        bad = bad | (failed >= 0)
    if platform == "cpu":

        def fallback():
            exact = _lapack_solve(data, b, offsets=offsets, widths=widths, trans=trans)
            return jnp.where(bad[:, None, None], exact, x)

        x = lax.cond(jnp.any(bad), fallback, lambda: x)
    else:
        x = jnp.where(bad[:, None, None], jnp.nan, x)
    return x.reshape(*lead, *b.shape[-2:])


factor_p.def_impl(partial(dispatch.apply_primitive, factor_p))
solve_p.def_impl(partial(dispatch.apply_primitive, solve_p))
mlir.register_lowering(factor_p, mlir.lower_fun(_factor_on("tpu"), multiple_results=True))
mlir.register_lowering(solve_p, mlir.lower_fun(_solve_on("tpu"), multiple_results=False))
mlir.register_lowering(factor_p, mlir.lower_fun(_factor_cpu, multiple_results=True), platform="cpu")
mlir.register_lowering(solve_p, mlir.lower_fun(_solve_cpu, multiple_results=False), platform="cpu")
for _gpu in ("cuda", "rocm"):
    mlir.register_lowering(
        factor_p, mlir.lower_fun(_factor_on("gpu"), multiple_results=True), platform=_gpu
    )
    mlir.register_lowering(
        solve_p, mlir.lower_fun(_solve_on("gpu"), multiple_results=False), platform=_gpu
    )
