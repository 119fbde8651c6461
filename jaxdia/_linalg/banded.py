"""Banded factorizations at the array level: factor a square ``DiaParts`` once, solve many.

A factor is a :class:`Factor`: the arrays of one of the layouts of
:mod:`jaxdia._kernels.band_layouts`, chosen from the offsets and the platform:

* LU (:func:`factor_lu`): on CPU LAPACK's, with partial pivoting: ``GT`` (``?gttrf``'s
  rows) when the band is within one diagonal of the main one, else ``GB``
  (``?gbtrf``'s bands); on GPU and TPU ``CR``, block cyclic reduction (no loop over the
  rows; see :mod:`jaxdia._kernels.band_parallel` for what it is exact for, and
  :mod:`jaxdia._kernels.band_refine` for what its solves do otherwise); a periodic
  matrix's, the factor of its band and a :class:`jaxdia._linalg.periodic.Correction`;
* Cholesky (:func:`factor_cholesky`) of a Hermitian positive definite band, from the
  triangle ``lower`` selects: on CPU ``PT`` (``?pttrf``'s ``L D L^H``) for a
  tridiagonal one, else ``PB`` (``?pbtrf``'s bands); on GPU and TPU ``CH``, cyclic
  reduction;
* one-shot (:func:`oneshot`, ``ONESHOT``): no arrays; each solve factors (LAPACK or
  cyclic reduction chosen per platform and size when the program is compiled).

The layout is chosen when the factorization is traced, for the platform computations run on
by default (:func:`jaxdia._dispatch.default_platform`): unlike a solve, a factor's arrays
are a result, and their layout must be fixed before the program is lowered.

:func:`solve` solves with a factor: by ``lax.custom_linear_solve``, whose ``matvec`` is
the matrix itself (a sparse product), so derivatives with respect to ``A.data`` and ``b``
come from the products and from solves with the *stored* factor (the transposed solve for
reverse mode), never from differentiating or repeating the factorization.

:func:`solve_once` solves with :func:`oneshot`'s factor: on CPU LAPACK (``gtsv`` for a
tridiagonal matrix, ``?gbtrf`` + ``?gbtrs`` in one call else; a batch in one call);
cuSPARSE's ``gtsv2`` for a tridiagonal matrix on GPUs, cyclic reduction for other bands
there and on TPU (see
:func:`jaxdia._dispatch.oneshot_implementation`).

16-bit matrices are factored in float32. The factor keeps its dtype; a solve runs in the
promoted dtype of the matrix and ``b`` (float32 for 16-bit ones), a complex ``b`` for a
real factor as its real and imaginary parts side by side.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike

from .. import _dispatch
from .._checks import as_array, check_rhs, integers_as, is_traced, result_dtype
from .._geometry import accumulation_dtype, band_widths, in_bounds
from .._kernels import band_primitives as prims
from .._kernels.band_layouts import CH, CR, GB, GT, ONESHOT, PB, PT, Layout
from .._kernels.primitives import spmm
from .._parts import DiaParts
from .._sharding import on_auto_axes
from . import periodic

#: The factorizations' implementation: "auto" (by platform, see the module docstring),
#: "host" or "scan" (LAPACK's layouts, by LAPACK on CPU or by ``lax.scan``), "parallel"
#: (cyclic reduction). Tests force each; read when a factorization or solve is traced.
METHOD = "auto"


def trace_keys() -> tuple[str, str]:
    """What the dispatch rules read when a function is traced (the default platform and
    :data:`METHOD`): static arguments of a public function's compiled body, so that a
    program compiled under one choice is never reused where the rules choose another."""
    return _dispatch.default_platform(), METHOD


def is_tridiagonal(offsets: tuple[int, ...]) -> bool:
    lower, upper = band_widths(offsets)
    return lower <= 1 and upper <= 1


class Factor(NamedTuple):
    """A factorization: its ``layout`` and ``widths`` (static), ``arrays`` (with the
    matrix's batch dims leading), ``info`` (``(*batch_shape,)`` int32: 0, or the 1-based
    index of the first zero pivot / non-positive leading minor, or :data:`NON_FINITE`),
    and for a periodic matrix the ``correction`` of its corners (``arrays`` then factor
    the band without them). A pytree whose leaves are the arrays, the correction's and
    ``info``."""

    layout: Layout
    widths: tuple[int, ...]
    arrays: tuple[Array, ...]
    info: Array
    correction: periodic.Correction | None = None


jax.tree_util.register_pytree_node(
    Factor,
    lambda factor: (
        (factor.arrays, factor.correction, factor.info),
        (factor.layout, factor.widths),
    ),
    lambda static, leaves: Factor(static[0], static[1], leaves[0], leaves[2], leaves[1]),
)


def _real(dtype: np.dtype) -> np.dtype:
    return np.dtype(np.finfo(dtype).dtype)


def lu_layout(offsets: tuple[int, ...], method: str) -> tuple[Layout, tuple[int, ...]]:
    """The LU factor's layout and widths for a square matrix with these offsets."""
    if _dispatch.factors_by_cyclic_reduction(method):
        return CR, band_widths(offsets)
    if is_tridiagonal(offsets):
        return GT, ()
    return GB, band_widths(offsets)


def cholesky_bandwidth(offsets: tuple[int, ...], lower: bool) -> int:
    """``kd``: how far the triangle ``lower`` selects reaches from the main diagonal."""
    return max((abs(k) for k in offsets if (k <= 0 if lower else k >= 0)), default=0)


def cholesky_layout(
    offsets: tuple[int, ...], lower: bool, method: str
) -> tuple[Layout, tuple[int, ...]]:
    """The Cholesky factor's layout and widths, from the triangle ``lower`` selects."""
    kd = cholesky_bandwidth(offsets, lower)
    if _dispatch.factors_by_cyclic_reduction(method):
        return CH, (kd, int(lower))
    if kd <= 1:
        return PT, ()
    return PB, (kd, int(lower))


def _clean(data: Array, offsets: tuple[int, ...]) -> Array:
    """``data`` of a square matrix with zeros in the padding slots (which may hold
    anything)."""
    n = data.shape[-1]
    return jnp.where(in_bounds(offsets, (n, n)), data, 0)


def _diagonal(data: Array, offsets: tuple[int, ...], offset: int) -> Array:
    """Row ``offset`` of DIA ``data`` (column-aligned), zeros if not stored."""
    if offset in offsets:
        return data[..., offsets.index(offset), :]
    return jnp.zeros((*data.shape[:-2], data.shape[-1]), data.dtype)


def _shift_left(row: Array, by: int) -> Array:
    """``row[..., i + by]`` at ``i``, zero-filled: a column-aligned diagonal as a
    row-aligned one."""
    if by == 0 or row.shape[-1] == 0:
        return row
    pad = [(0, 0)] * (row.ndim - 1) + [(0, by)]
    return jnp.pad(row[..., by:], pad)


#: A factor primitive's operands and the ``placement`` of DIA ``data``'s diagonals in
#: LAPACK's band array (see :mod:`jaxdia._kernels.band_primitives`).
_Operands = tuple[tuple[Array, ...], tuple[tuple[int, int], ...]]


def _lu_operands(
    data: Array, offsets: tuple[int, ...], layout: Layout, widths: tuple[int, ...]
) -> _Operands:
    """The factor primitive's operands and ``placement`` (see
    ``jaxdia._kernels.band_primitives``)."""
    if layout.parallel:
        return (data,), ()
    if layout is GT:
        data = _clean(data, offsets)
        dl = _diagonal(data, offsets, -1)  # dl[i] = A[i + 1, i], column i
        du = _shift_left(_diagonal(data, offsets, 1), 1)  # du[i] = A[i, i + 1], column i + 1
        d = _diagonal(data, offsets, 0)
        return (jnp.stack([dl, d, du, jnp.zeros_like(d)], axis=-2),), ()
    kl, ku = widths
    # LAPACK's ab[j, kl + ku + i - j] = A[i, j]: diagonal o = j - i fills column kl + ku - o.
    return (data,), tuple((offset, kl + ku - offset) for offset in offsets)


def _cholesky_operands(
    data: Array, offsets: tuple[int, ...], layout: Layout, widths: tuple[int, ...], lower: bool
) -> _Operands:
    if layout.parallel:
        return (data,), ()
    if layout is PT:
        data = _clean(data, offsets)
        d = _diagonal(data, offsets, 0).real.astype(_real(data.dtype))
        if lower:
            e = _diagonal(data, offsets, -1)  # A[i + 1, i], column i
        else:  # A[i + 1, i] = conj(A[i, i + 1]), column i + 1
            e = _shift_left(_diagonal(data, offsets, 1), 1).conj()
        return (d, e), ()
    kd = widths[0]
    # lower: ab[j, i - j] = A[i, j] (i >= j); upper: ab[j, kd + i - j] = A[i, j] (i <= j).
    placement = tuple(
        (
            offset,
            (-offset if offset <= 0 else -1) if lower else (kd - offset if offset >= 0 else -1),
        )
        for offset in offsets
    )
    return (data,), placement


@partial(jax.jit, static_argnames=("offsets", "layout", "widths", "lower", "method"))
@on_auto_axes(last=False)
def _factor(
    data: Array,
    *,
    offsets: tuple[int, ...],
    layout: Layout,
    widths: tuple[int, ...],
    lower: bool | None,
    method: str,
) -> tuple[tuple[Array, ...], Array]:
    data = jax.lax.stop_gradient(data)  # derivatives come from the solves
    # 16-bit floats factor in float32: LAPACK has no 16-bit routines.
    data = data.astype(accumulation_dtype(data.dtype))
    if lower is None:
        operands, placement = _lu_operands(data, offsets, layout, widths)
    else:
        operands, placement = _cholesky_operands(data, offsets, layout, widths, lower)
    *arrays, info = prims.factor(
        *operands, layout=layout, widths=widths, placement=placement, offsets=offsets,
        method=method,
    )  # fmt: skip
    # LAPACK factors NaN and inf without complaint (a NaN pivot is no zero pivot): say so
    # in info, where SciPy's check_finite would have refused the matrix.
    return tuple(arrays), jnp.where(finite(data, offsets, lower), info, NON_FINITE)


#: ``info`` of a factorization whose matrix holds a non-finite entry (LAPACK's negative
#: values name an illegal argument).
NON_FINITE = -1


def read_slots(
    offsets: tuple[int, ...], n: int, lower: bool | None, host: bool = False
) -> np.ndarray | Array:
    """The slots of an ``n x n`` matrix's DIA ``data`` that a factorization reads: every
    in-bounds one for an LU (``lower`` None), the triangle ``lower`` selects for a
    Cholesky factor."""
    if lower is None:
        diagonals = np.ones(len(offsets), bool)
    else:
        diagonals = np.array([(k <= 0) if lower else (k >= 0) for k in offsets], bool)
    return in_bounds(offsets, (n, n), host=host) & diagonals[:, None]


def finite(data: Array, offsets: tuple[int, ...], lower: bool | None) -> Array:
    """Per matrix (shape ``data.shape[:-2]``): whether every entry that the factorization
    reads (see :func:`read_slots`) is finite."""
    read = read_slots(offsets, data.shape[-1], lower)
    return jnp.all(jnp.isfinite(data) | ~read, axis=(-2, -1))


def factor_lu(A: DiaParts, method: str | None = None) -> Factor:
    """The banded LU factor of a square ``A`` (``GT``, ``GB`` or ``CR``), or, when ``A``
    is a band plus corner diagonals that are cheaper as a low-rank correction (periodic
    boundaries, see :mod:`jaxdia._linalg.periodic`), the periodic factor: the band's
    layout, widths and arrays, and the corners' :class:`periodic.Correction` (``Z``,
    ``S``'s LU and its pivots). Outside ``jit``, a periodic
    factor that failed (the band without its corners is singular, or too ill-conditioned
    for the correction to be accurate, or ``A`` is singular) is replaced by the factor of
    the whole band; under ``jit`` its ``info`` says so."""
    method = method or METHOD
    factor = factor_periodic(A, method)
    if factor is not None and (is_traced(factor.info) or not np.any(np.asarray(factor.info))):
        return factor
    return _factor_of(A, *lu_layout(A.offsets, method), None, method)


def factor_periodic(A: DiaParts, method: str | None = None) -> Factor | None:
    """The periodic factor of a square ``A`` (its band's factor and the corners'
    :class:`periodic.Correction`), whatever its ``info`` says, or None when ``A``'s offsets
    do not split into a band and corners (:func:`periodic.split`)."""
    method = method or METHOD
    where = periodic.split(A.offsets, A.shape[0])
    if where is None:
        return None
    layout, widths = lu_layout(where.band_offsets(A.offsets), method)
    arrays, correction, info = _periodic_factor(
        A.data, offsets=A.offsets, p=where.p, q=where.q, layout=layout, widths=widths,
        method=method,
    )  # fmt: skip
    return Factor(layout, widths, arrays, info, correction)


#: ``info`` of a periodic factor whose band factored but whose correction ``S`` is
#: singular or not finite: ``A`` is singular, or its band nearly so.
SINGULAR_CORRECTION = -2
#: ``info`` of a periodic factor whose band is too ill-conditioned, next to ``A``, for the
#: corner correction to be accurate: the growth ``1 + ||B^-1 U||_inf`` bounding its
#: solves' loss of accuracy is above ``periodic.MAX_GROWTH`` (see
#: :mod:`jaxdia._linalg.periodic`).
UNSTABLE_CORRECTION = -3


@partial(jax.jit, static_argnames=("offsets", "p", "q", "layout", "widths", "method"))
def _periodic_factor(
    data: Array,
    *,
    offsets: tuple[int, ...],
    p: int,
    q: int,
    layout: Layout,
    widths: tuple[int, ...],
    method: str,
) -> tuple[tuple[Array, ...], periodic.Correction, Array]:
    """:func:`factor_lu`'s periodic factor, as one compiled call: the band's factor of
    ``layout``, then ``Z = B^-1 U``, the LU of ``S = I + V^T Z`` and the check of
    ``Z``'s growth."""
    n = data.shape[-1]
    where = periodic.Split.of(offsets, n, p, q)
    data = lax.stop_gradient(data).astype(accumulation_dtype(data.dtype))
    band = DiaParts(data[..., list(where.band), :], where.band_offsets(offsets), (n, n))
    arrays, info = _factor(
        band.data, offsets=band.offsets, layout=layout, widths=widths, lower=None, method=method
    )
    U = periodic.corners(data, offsets, where)
    Z = solve(band, Factor(layout, widths, arrays, info), U, method=method)
    lu, pivots = periodic.capacitance(Z, n, where)
    bad = jnp.any(jnp.diagonal(lu, axis1=-2, axis2=-1) == 0, axis=-1)
    bad = bad | ~jnp.all(jnp.isfinite(lu), axis=(-2, -1))
    info = jnp.where(info != 0, info, jnp.where(bad, SINGULAR_CORRECTION, 0))
    # NaN growth (a NaN in Z) is unstable too.
    stable = periodic.growth(Z) <= periodic.MAX_GROWTH
    info = jnp.where(info != 0, info, jnp.where(stable, 0, UNSTABLE_CORRECTION))
    info = jnp.where(finite(data, offsets, None), info, NON_FINITE)
    return arrays, periodic.Correction(Z, lu, pivots, p, q), info


def factor_cholesky(A: DiaParts, lower: bool, method: str | None = None) -> Factor:
    """The banded Cholesky factor of a square ``A`` from its upper (or ``lower``)
    triangle (``PT``, ``PB`` or ``CH``)."""
    method = method or METHOD
    return _factor_of(A, *cholesky_layout(A.offsets, lower, method), lower, method)


def oneshot(A: DiaParts) -> Factor:
    """A factor of ``A`` without arrays, whose solves factor as they go (``ONESHOT``):
    LAPACK or cyclic reduction, chosen per platform and size when the program is
    lowered."""
    info = jnp.zeros(A.batch_shape, np.int32)
    return Factor(ONESHOT, band_widths(A.offsets), (), info)


def _factor_of(
    A: DiaParts, layout: Layout, widths: tuple[int, ...], lower: bool | None, method: str
) -> Factor:
    arrays, info = _factor(
        A.data, offsets=A.offsets, layout=layout, widths=widths, lower=lower, method=method
    )
    return Factor(layout, widths, arrays, info)


# -- solves --------------------------------------------------------------------------------


def solve(
    A: DiaParts,
    factor: Factor,
    b: ArrayLike,
    *,
    trans: int = 0,
    lower: bool | None = None,
    function: str = "solve",
    method: str | None = None,
    nan_on_failure: bool = True,
) -> Array:
    """Solves ``op(A) x = b`` with ``factor`` of ``A`` (``lower`` given: a Cholesky factor
    of the Hermitian matrix that triangle of ``A`` defines). ``b`` is ``(n,)`` or
    ``(..., n, k)``; the solution has the broadcast batch shape and ``b``'s trailing shape.

    One call of a jitted function per static layout (:func:`_compiled_solve`), its
    arrays passed positionally: an eager solve is one dispatch on JAX's C++ fast path,
    and ``b``'s shape is checked when that function is traced for it, once per shape
    and dtype, not per call. Only a ``b`` that is not a JAX array is converted here (a
    NumPy integer ``b`` on the host, see :func:`jaxdia._checks.integers_as`).

    A failed factor's solution is NaN, or, with ``nan_on_failure`` False, whatever the
    failed factor gives (for a caller that reads ``factor.info`` itself: one pass less).
    """
    return solve_arrays(
        A.data, factor.arrays, factor.correction, factor.info, b, A.offsets, A.shape,
        factor.layout, factor.widths, trans, lower, function, method, nan_on_failure,
    )  # fmt: skip


def solve_arrays(
    data: Array,
    arrays: tuple[Array, ...],
    correction: periodic.Correction | None,
    info: Array,
    b: ArrayLike,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    layout: Layout,
    widths: tuple[int, ...],
    trans: int = 0,
    lower: bool | None = None,
    function: str = "solve",
    method: str | None = None,
    nan_on_failure: bool = True,
) -> Array:
    """:func:`solve` with the matrix and the factor as their fields (what a stored
    factor holds: its eager solves build neither a ``DiaParts`` nor a :class:`Factor`)."""
    if not isinstance(b, jax.Array):
        b = integers_as(as_array(b, f"{function}: b"), np.dtype(data.dtype))
    platform, default_method = trace_keys()
    solve_with = _compiled_solve(
        offsets, shape, layout, widths, trans, lower, function, method or default_method,
        nan_on_failure, platform,
    )  # fmt: skip
    return solve_with(data, arrays, correction, info, b)


@cache
def _compiled_solve(
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    layout: Layout,
    widths: tuple[int, ...],
    trans: int,
    lower: bool | None,
    function: str,
    method: str,
    nan_on_failure: bool,
    platform: str,
) -> Callable[[Array, tuple[Array, ...], periodic.Correction | None, Array, ArrayLike], Array]:
    """:func:`_solve` for one static layout, jitted with no static arguments: JAX's C++
    dispatch then only checks the arrays' types (hashing static keyword arguments on
    every call cost about a sixth of an eager solve). ``platform`` only keys the cache
    (:func:`trace_keys`): the dispatch rules read it when the function is traced."""
    del platform
    return jax.jit(
        partial(
            _solve,
            offsets=offsets,
            shape=shape,
            layout=layout,
            widths=widths,
            trans=trans,
            lower=lower,
            function=function,
            method=method,
            nan_on_failure=nan_on_failure,
        )  # fmt: skip
    )


def _hermitian_matvec(data, x, offsets, shape, lower: bool):
    """``H x`` for the Hermitian ``H`` the upper (``lower``: lower) triangle defines (the
    diagonal's real part, as LAPACK reads it)."""
    strict = [i for i, k in enumerate(offsets) if (k < 0 if lower else k > 0)]
    y = _diagonal(data, offsets, 0).real.astype(x.dtype)[..., None] * x
    if strict:
        part = data[..., strict, :]
        part_offsets = tuple(offsets[i] for i in strict)
        y = y + spmm(part, x, offsets=part_offsets, shape=shape)
        y = y + spmm(part.conj(), x, offsets=part_offsets, shape=shape, transpose=True)
    return y


@on_auto_axes(last=False)
def _solve(
    data: Array,
    arrays: tuple[Array, ...],
    correction: periodic.Correction | None,
    info: Array,
    b: Array | np.ndarray,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    layout: Layout,
    widths: tuple[int, ...],
    trans: int,
    lower: bool | None,
    function: str,
    method: str,
    nan_on_failure: bool = True,
) -> Array:
    """:func:`solve`'s traced body (see :func:`_compiled_solve`): checks ``b`` for the
    matrix's shape and batch, promotes the solution's dtype, solves with
    ``lax.custom_linear_solve``."""
    b, batch = check_rhs(function, shape[0], data.shape[:-2], b, data.dtype)
    dtype = result_dtype(data.dtype, b)
    n = shape[0]
    work = accumulation_dtype(dtype)
    vector = b.ndim == 1
    b = (b[:, None] if vector else b).astype(work)
    b = jnp.broadcast_to(b, (*batch, *b.shape[-2:]))
    factor_batch = data.shape[:-2]
    if factor_batch and factor_batch != batch:
        # The factor's batch dims must be the solution's (or absent): broadcast them.
        def widen(a: Array) -> Array:
            return jnp.broadcast_to(a, (*batch, *a.shape[len(factor_batch) :]))

        arrays = tuple(widen(a) for a in arrays)
        correction = jax.tree.map(widen, correction)
        info = jnp.broadcast_to(info, batch)
        data = jnp.broadcast_to(data, (*batch, *data.shape[-2:]))
    matrix = jnp.reshape(data, (1,) * (len(batch) - data.ndim + 2) + data.shape).astype(work)
    corners = None
    band_offsets = offsets
    if correction is not None:  # periodic: a factor of the band, and the corners'
        corners = correction.split(offsets)
        band_offsets = corners.band_offsets(offsets)
        data = data[..., list(corners.band), :]
    if layout is ONESHOT:  # no arrays: the solve factors the matrix
        factor_dtype = accumulation_dtype(data.dtype)
    else:
        factor_dtype = arrays[layout.typed_array].dtype  # PT: d is real, e is not
    split = jnp.issubdtype(work, jnp.complexfloating) and not jnp.issubdtype(
        factor_dtype, jnp.complexfloating
    )
    # The factor's arrays in the solve's precision (a copy only if they differ).
    precision = _real(work) if split else work

    def cast(index: int, array: Array) -> Array:
        if array.dtype == np.int32:  # pivots
            return array
        if layout.refined and not split:
            # Kept: its solves refine to the factor's own precision (see
            # jaxdia._kernels.band_refine).
            return array
        if index in layout.real_arrays:  # the real diagonal of L D L^H
            return array.astype(_real(precision))
        return array.astype(precision)

    arrays = tuple(cast(index, array) for index, array in enumerate(arrays))
    if layout.refined:  # the solve's residuals (and the one-shot's factorization)
        arrays = (*arrays, lax.stop_gradient(data).astype(precision))
    failed = (info != 0)[..., None, None]
    hermitian = lower is not None

    def raw(rhs, t):
        """``op_t(A)^-1 rhs`` with the stored factor; ``rhs`` is ``(*batch, n, k)``."""
        if hermitian and t:
            # A^T = conj(A) for a Hermitian A (and A^H = A).
            return raw(rhs.conj(), 0).conj() if t == 1 else raw(rhs, 0)
        if correction is not None and corners is not None:
            Z = correction.corrections.astype(precision)
            S_lu = correction.capacitance_lu.astype(precision)
            return periodic.solve(band_raw, Z, S_lu, correction.capacitance_pivots, rhs, t, corners)
        return band_raw(rhs, t)

    def band_raw(rhs, t):
        """``op_t(B)^-1 rhs`` for the band ``B`` the factor's arrays factor (``A``
        itself, or its band without the corners)."""
        columns = jnp.swapaxes(rhs, -1, -2)  # (*batch, k, n): LAPACK's column-major B
        k = columns.shape[-2]
        if split:
            columns = jnp.concatenate([columns.real, columns.imag], axis=-2)
        x = prims.solve(
            *arrays,
            columns.astype(precision),
            layout=layout,
            widths=widths,
            trans=min(t, 1) if split else t,
            offsets=band_offsets if layout.refined else (),
            method=method,
        )
        if split:
            x = lax.complex(x[..., :k, :], x[..., k:, :])
        if nan_on_failure:
            x = jnp.where(failed, jnp.nan, x)
        return jnp.swapaxes(x, -1, -2)

    def product(x, t):
        if lower is not None:  # hermitian
            return _hermitian_matvec(matrix, x, offsets, shape, lower)
        if t == 2:
            return spmm(matrix.conj(), x, offsets=offsets, shape=shape, transpose=True)
        return spmm(matrix, x, offsets=offsets, shape=shape, transpose=t == 1)

    if n == 0:
        x = b
    elif hermitian:
        x = lax.custom_linear_solve(
            lambda v: product(v, 0),
            b,
            lambda _, r: raw(r, 0),
            lambda _, r: raw(r, 1),
            symmetric=not jnp.issubdtype(work, jnp.complexfloating),
        )
    else:
        if trans == 2 and not jnp.issubdtype(work, jnp.complexfloating):
            trans = 1
        # The transpose of op_t(A): t = 0 <-> 1; A^H's transpose is conj(A).
        if trans == 2:
            transpose_solve = lambda _, r: raw(r.conj(), 0).conj()  # noqa: E731
        else:
            transpose_solve = lambda _, r: raw(r, 1 - trans)  # noqa: E731
        x = lax.custom_linear_solve(
            lambda v: product(v, trans), b, lambda _, r: raw(r, trans), transpose_solve
        )
    x = x.astype(dtype)
    return x[..., 0] if vector else x


def info_errors(info: ArrayLike) -> list[tuple[tuple[int, ...], int]]:
    """``(batch index, info)`` of the failed systems of a concrete ``info``."""
    host = np.asarray(info)
    return [(index, int(host[index])) for index in np.ndindex(host.shape) if host[index]]


# -- one-shot solves -----------------------------------------------------------------------


def solve_once(A: DiaParts, b: ArrayLike) -> Array:
    """Solves ``A @ x == b`` for a square ``A`` (see :func:`jaxdia.solve_banded`) with
    :func:`oneshot`'s factor, which factors as it solves, the implementation chosen per
    platform and size when the program is compiled (see
    :mod:`jaxdia._kernels.band_primitives`)."""
    n = A.shape[0]
    b, _ = check_rhs("solve_banded", n, A.batch_shape, b, A.dtype)
    dtype = result_dtype(A.dtype, b)
    # Factored in the solution's precision (float64 for a float32 A and a float64 b), as
    # jnp.linalg.solve and SciPy compute; a real A stays real.
    precision = np.dtype(jnp.result_type(A.dtype, jnp.finfo(dtype).dtype))
    if precision != A.dtype:
        A = A.with_data(A.data.astype(precision))
    # A periodic band's factor, LAPACK's layouts forced (tests), else a factor whose solve
    # factors.
    stored = METHOD in ("host", "scan") or periodic.split(A.offsets, n) is not None
    factor = factor_lu(A, METHOD) if stored else oneshot(A)
    return solve(A, factor, b, function="solve_banded")
