"""Banded factorizations at the array level: factor a square ``DiaParts`` as its plan
says, then solve many times.

A factor is a :class:`Factor`: its :class:`jaxdia._linalg.plan.Plan` (static: the layout of
:mod:`jaxdia._kernels.band_layouts`, the widths, the triangle of a Cholesky factor, the
corners of a periodic matrix, the method), the arrays of that layout, ``info`` and, for a
periodic matrix, the :class:`jaxdia._linalg.periodic.Correction` of its corners. Nothing
here chooses: :func:`jaxdia._linalg.plan.choose` did, before (see its table):

* :func:`factor` computes the factor the plan names: LAPACK's LU (``GT``, ``GB``) or
  Cholesky (``PT``, ``PB``) on CPU, block cyclic reduction's (``CR``, ``CH``) on GPU and
  TPU (see :mod:`jaxdia._kernels.band_parallel` for what it is exact for, and
  :mod:`jaxdia._kernels.band_refine` for what its solves do otherwise); a periodic
  matrix's, the factor of its band and the corners' correction (outside ``jit``, where
  that fails, the factor of the plan's ``fallback``); a one-shot plan's, no arrays: each
  solve factors (LAPACK or cyclic reduction, chosen per platform and size when the program
  is lowered, see :func:`jaxdia._dispatch.oneshot_implementation`).
* :func:`solve` solves with a factor: by ``lax.custom_linear_solve``, whose ``matvec`` is
  the matrix itself (a sparse product), so derivatives with respect to ``A.data`` and
  ``b`` come from the products and from solves with the *stored* factor (the transposed
  solve for reverse mode), never from differentiating or repeating the factorization. Its
  seams: a band solve (:func:`_band_solve`, a complex ``b`` for a real factor as its real
  and imaginary parts side by side, :func:`_complex_on_real`), wrapped by the periodic
  correction where the plan split the corners (:func:`jaxdia._linalg.periodic.corrected`),
  wired into ``custom_linear_solve`` (:func:`_implicit_solve`).

16-bit matrices are factored in float32. The factor keeps its dtype; a solve runs in the
promoted dtype of the matrix and ``b`` (float32 for 16-bit ones).
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

from .._checks import check_rhs, converted, is_traced, result_dtype
from .._geometry import accumulation_dtype, in_bounds, real_dtype
from .._kernels import band_primitives as prims
from .._kernels.band_layouts import GT, PT, Layout
from .._kernels.primitives import spmm
from .._parts import DiaParts
from .._sharding import on_auto_axes
from . import periodic
from .plan import Plan


class Factor(NamedTuple):
    """A factorization: its ``plan`` (static: layout, widths, triangle, corners, method),
    ``arrays`` (with the matrix's batch dims leading; a periodic factor's are its band's),
    ``info`` (``(*batch_shape,)`` int32: 0, or the 1-based index of the first zero pivot /
    non-positive leading minor, or :data:`NON_FINITE_ENTRY`, or a periodic correction's
    :data:`jaxdia._linalg.periodic.SINGULAR` or :data:`jaxdia._linalg.periodic.UNSTABLE`),
    and for a periodic matrix the ``correction`` of its corners. A pytree whose leaves are
    the arrays, the correction's and ``info``."""

    plan: Plan
    arrays: tuple[Array, ...]
    info: Array
    correction: periodic.Correction | None = None


jax.tree_util.register_pytree_node(
    Factor,
    lambda factor: ((factor.arrays, factor.correction, factor.info), factor.plan),
    lambda plan, leaves: Factor(plan, leaves[0], leaves[2], leaves[1]),
)


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
        d = _diagonal(data, offsets, 0).real  # of the real dtype of data's precision
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
        *operands,
        layout=layout,
        widths=widths,
        placement=placement,
        offsets=offsets,
        method=method,
    )
    # LAPACK factors NaN and inf without complaint (a NaN pivot is no zero pivot): say so
    # in info, where SciPy's check_finite would have refused the matrix.
    return tuple(arrays), jnp.where(finite(data, offsets, lower), info, NON_FINITE_ENTRY)


#: ``info`` of a factorization whose matrix holds a non-finite entry (LAPACK's negative
#: values name an illegal argument; a periodic correction's are -2 and -3).
NON_FINITE_ENTRY = -1


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


#: :func:`finite` of every matrix together, as one compiled call (an eager check).
_all_finite = jax.jit(lambda data, offsets: jnp.all(finite(data, offsets, None)), static_argnums=1)


def refuse_non_finite(function: str, A: DiaParts, lower: bool | None = None) -> None:
    """A ValueError naming the first entry of a concrete ``A`` that a factorization reads
    (``lower``: the triangle a Cholesky factor reads) and is NaN or inf, if there is one;
    as SciPy's ``check_finite``, which LAPACK needs: it factors such entries as numbers."""
    host = np.asarray(A.data)
    read = read_slots(A.offsets, A.shape[0], lower, host=True)
    bad = np.argwhere(~np.isfinite(host) & read)
    if not len(bad):
        return
    *member, k, j = (int(i) for i in bad[0])
    where = f" (matrix {tuple(member)} of the batch)" if member else ""
    raise ValueError(
        f"{function}: A must not contain infs or NaNs (as SciPy's check_finite requires), "
        f"but A[{j - A.offsets[k]}, {j}] = {host[(*member, k, j)]}{where}"
    )


def factor(A: DiaParts, plan: Plan) -> Factor:
    """The factor of a square ``A`` that ``plan`` names (see the module docstring): its
    band's and the corners' correction for a periodic plan, where that factor fails
    outside ``jit`` (the band without its corners is singular, or too ill-conditioned for
    the correction to be accurate, or ``A`` is singular) the factor of ``plan.fallback``
    (under ``jit`` its ``info`` says so); none for a one-shot plan."""
    if not plan.stored:
        return Factor(plan, (), jnp.zeros(A.batch_shape, np.int32))
    if plan.split is None:
        arrays, info = _factor(
            A.data,
            offsets=A.offsets,
            layout=plan.layout,
            widths=plan.widths,
            lower=plan.lower,
            method=plan.method,
        )
        return Factor(plan, arrays, info)
    corrected = factor_periodic(A, plan)
    if is_traced(corrected.info) or not np.any(np.asarray(corrected.info)):
        return corrected
    assert plan.fallback is not None
    return factor(A, plan.fallback)


def factor_periodic(A: DiaParts, plan: Plan) -> Factor:
    """The periodic factor of a square ``A`` for a plan with a ``split`` (its band's factor
    and the corners' :class:`periodic.Correction`), whatever its ``info`` says."""
    arrays, correction, info = _periodic_factor(A.data, offsets=A.offsets, plan=plan)
    return Factor(plan, arrays, info, correction)


@partial(jax.jit, static_argnames=("offsets", "plan"))
def _periodic_factor(
    data: Array, *, offsets: tuple[int, ...], plan: Plan
) -> tuple[tuple[Array, ...], periodic.Correction, Array]:
    """:func:`factor_periodic`, as one compiled call: the band's factor of the plan's
    layout, then ``Z = B^-1 U``, the LU of ``S = I + V^T Z`` and the check of ``Z``'s
    growth."""
    n = data.shape[-1]
    where = plan.split
    assert where is not None
    data = lax.stop_gradient(data).astype(accumulation_dtype(data.dtype))
    band = DiaParts(data[..., list(where.band), :], where.band_offsets(offsets), (n, n))
    band_factor = factor(band, plan.band)
    correction, info = periodic.correct(
        data, offsets, where, lambda U: solve(band, band_factor, U), band_factor.info
    )
    info = jnp.where(finite(data, offsets, None), info, NON_FINITE_ENTRY)
    return band_factor.arrays, correction, info


# -- solves --------------------------------------------------------------------------------


def solve(
    A: DiaParts,
    factor: Factor,
    b: Array | np.ndarray,
    *,
    trans: int = 0,
    function: str = "solve",
    nan_on_failure: bool = True,
) -> Array:
    """Solves ``op(A) x = b`` with ``factor`` of ``A`` (a Cholesky factor: of the Hermitian
    matrix that its triangle of ``A`` defines). ``b`` is ``(n,)`` or ``(..., n, k)``; the
    solution has the broadcast batch shape and ``b``'s trailing shape.

    One call of a jitted function per static plan (:func:`_compiled_solve`), its arrays
    passed positionally: an eager solve is one dispatch on JAX's C++ fast path, and
    ``b``'s shape is checked when that function is traced for it, once per shape and
    dtype, not per call (a public door converts a ``b`` that is not an array first).

    A failed factor's solution is NaN, or, with ``nan_on_failure`` False, whatever the
    failed factor gives (for a caller that reads ``factor.info`` itself: one pass less).
    """
    solve_with = _compiled_solve(A.offsets, A.shape, factor.plan, trans, function, nan_on_failure)
    if b.dtype != A.data.dtype:  # b in the solution's dtype: one program per solution dtype
        b = converted(b, result_dtype(A.data.dtype, b))
    return solve_with(A.data, factor.arrays, factor.correction, factor.info, b)


@cache
def _compiled_solve(
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    plan: Plan,
    trans: int,
    function: str,
    nan_on_failure: bool,
) -> Callable[[Array, tuple[Array, ...], periodic.Correction | None, Array, ArrayLike], Array]:
    """:func:`_solve` for one static plan, jitted with no static arguments: JAX's C++
    dispatch then only checks the arrays' types (hashing static keyword arguments on
    every call would cost a sizeable part of an eager solve)."""
    return jax.jit(
        partial(
            _solve,
            offsets=offsets,
            shape=shape,
            plan=plan,
            trans=trans,
            function=function,
            nan_on_failure=nan_on_failure,
        )
    )


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
    plan: Plan,
    trans: int,
    function: str,
    nan_on_failure: bool = True,
) -> Array:
    """:func:`solve`'s traced body (see :func:`_compiled_solve`): ``b`` checked for the
    matrix's shape and batch and broadcast with the factor, then ``op(A) x = b`` by
    ``lax.custom_linear_solve``, in the promoted dtype."""
    b, batch = check_rhs(function, shape[0], data.shape[:-2], b, data.dtype)
    dtype = result_dtype(data.dtype, b)
    work = accumulation_dtype(dtype)
    vector = b.ndim == 1
    # The right-hand sides as rows (*batch, k, n), n minor, as the band solves take them:
    # TPU tiles an (n, 1) column one row per element (see jaxdia._kernels.band_parallel).
    rows = (b[None, :] if vector else jnp.swapaxes(b, -1, -2)).astype(work)
    rows = jnp.broadcast_to(rows, (*batch, *rows.shape[-2:]))
    if data.shape[:-2] and data.shape[:-2] != batch:
        # The factor's batch dims must be the solution's (or absent): broadcast them.
        data, arrays, correction, info = _broadcast_factor(batch, data, arrays, correction, info)
    matrix = jnp.reshape(data, (1,) * (len(batch) - data.ndim + 2) + data.shape).astype(work)
    where = plan.split
    band = data if where is None else data[..., list(where.band), :]
    band_offsets = offsets if where is None else where.band_offsets(offsets)
    if plan.stored:
        factor_dtype = arrays[plan.layout.typed_array].dtype  # PT: d is real, e is not
    else:  # no arrays: the solve factors the matrix
        factor_dtype = accumulation_dtype(band.dtype)
    # A complex b for a real factor: its real and imaginary parts, side by side.
    real_factor = jnp.issubdtype(work, jnp.complexfloating) and not jnp.issubdtype(
        factor_dtype, jnp.complexfloating
    )
    precision = real_dtype(work) if real_factor else work
    arrays = _in_precision(plan.layout, arrays, band, precision, real_factor)
    failed = (info != 0)[..., None, None]
    nan_where = failed if nan_on_failure else None
    inverse = _band_solve(arrays, plan, band_offsets, precision, real_factor, nan_where)
    if correction is not None and where is not None:  # periodic: correct for the corners
        # Its corrections Z are columns (n, r): the corrected solve takes columns.
        inverse = _swapped(periodic.corrected(_swapped(inverse), correction, where, precision))
    if shape[0] == 0:
        x = rows
    else:
        x = _implicit_solve(matrix, offsets, shape, plan.lower, inverse, rows, trans, work)
    x = x.astype(dtype)
    return x[..., 0, :] if vector else jnp.swapaxes(x, -1, -2)


def _swapped(solve: Callable[[Array, int], Array]) -> Callable[[Array, int], Array]:
    """A solve of rows ``(..., k, n)`` as one of columns ``(..., n, k)``, or the reverse."""
    return lambda rhs, t: jnp.swapaxes(solve(jnp.swapaxes(rhs, -1, -2), t), -1, -2)


def _broadcast_factor(
    batch: tuple[int, ...],
    data: Array,
    arrays: tuple[Array, ...],
    correction: periodic.Correction | None,
    info: Array,
) -> tuple[Array, tuple[Array, ...], periodic.Correction | None, Array]:
    """The matrix and its factor with their batch dims broadcast to ``batch``."""
    factor_batch = data.shape[:-2]

    def widen(a: Array) -> Array:
        return jnp.broadcast_to(a, (*batch, *a.shape[len(factor_batch) :]))

    arrays = tuple(widen(a) for a in arrays)
    correction = jax.tree.map(widen, correction)
    info = jnp.broadcast_to(info, batch)
    data = jnp.broadcast_to(data, (*batch, *data.shape[-2:]))
    return data, arrays, correction, info


def _in_precision(
    layout: Layout,
    arrays: tuple[Array, ...],
    band: Array,
    precision: np.dtype,
    real_factor: bool,
) -> tuple[Array, ...]:
    """The factor's arrays in the solve's ``precision`` (a copy only if they differ), and
    for a refined layout the band's data after them (its solves' residuals, and the
    one-shot solve's factorization)."""

    def cast(index: int, array: Array) -> Array:
        if array.dtype == np.int32:  # pivots
            return array
        if layout.refined and not real_factor:
            # Kept: its solves refine to the factor's own precision (see
            # jaxdia._kernels.band_refine).
            return array
        if index in layout.real_arrays:  # the real diagonal of L D L^H
            return array.astype(real_dtype(precision))
        return array.astype(precision)

    arrays = tuple(cast(index, array) for index, array in enumerate(arrays))
    if layout.refined:
        arrays = (*arrays, lax.stop_gradient(band).astype(precision))
    return arrays


def _band_solve(
    arrays: tuple[Array, ...],
    plan: Plan,
    offsets: tuple[int, ...],
    precision: np.dtype,
    real_factor: bool,
    failed: Array | None,
) -> Callable[[Array, int], Array]:
    """``solve(rhs, t)``: ``op_t(B)^-1 rhs`` for rows ``rhs`` ``(*batch, k, n)`` (LAPACK's
    column-major ``B``), ``B`` the band (with ``offsets``) that the factor's ``arrays``
    factor (``A`` itself, or its band without the corners); NaN where ``failed``."""

    def solve(rhs: Array, t: int) -> Array:
        def primitive(columns: Array) -> Array:
            return prims.solve(
                *arrays,
                columns.astype(precision),
                layout=plan.layout,
                widths=plan.widths,
                trans=min(t, 1) if real_factor else t,  # a real factor's A^H is A^T
                offsets=offsets if plan.layout.refined else (),
                method=plan.method,
            )

        x = _complex_on_real(primitive, rhs) if real_factor else primitive(rhs)
        if failed is not None:
            x = jnp.where(failed, jnp.nan, x)
        return x

    return solve


def _complex_on_real(solve: Callable[[Array], Array], columns: Array) -> Array:
    """``solve(columns)`` of complex ``columns`` ``(..., k, n)`` by a real linear
    ``solve``: the real and imaginary parts side by side, one call."""
    k = columns.shape[-2]
    x = solve(jnp.concatenate([columns.real, columns.imag], axis=-2))
    return lax.complex(x[..., :k, :], x[..., k:, :])


def _implicit_solve(
    matrix: Array,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    lower: bool | None,
    inverse: Callable[[Array, int], Array],
    b: Array,
    trans: int,
    work: np.dtype,
) -> Array:
    """``op(A)^-1 b`` for rows ``b`` ``(..., k, n)`` by ``lax.custom_linear_solve``: its
    ``matvec`` the product with the matrix (``lower`` given: the Hermitian matrix that
    triangle defines), its solves ``inverse(rhs, t)`` (``op_t(A)^-1 rhs``), so that
    derivatives come from products and solves with the stored factor."""
    complex_ = jnp.issubdtype(work, jnp.complexfloating)
    if lower is not None:  # Hermitian: A^T = conj(A), and A^H = A

        def hermitian(rhs: Array, t: int) -> Array:
            return inverse(rhs.conj(), 0).conj() if t else inverse(rhs, 0)

        return lax.custom_linear_solve(
            lambda v: _hermitian_matvec(matrix, v, offsets, shape, lower),
            b,
            lambda _, r: hermitian(r, 0),
            lambda _, r: hermitian(r, 1),
            symmetric=not complex_,
        )
    if trans == 2 and not complex_:
        trans = 1

    def product(x: Array) -> Array:
        if trans == 2:
            return _rows_product(matrix.conj(), x, offsets, shape, transpose=True)
        return _rows_product(matrix, x, offsets, shape, transpose=trans == 1)

    # The transpose of op_t(A): t = 0 <-> 1; A^H's transpose is conj(A).
    if trans == 2:
        transpose_solve = lambda _, r: inverse(r.conj(), 0).conj()  # noqa: E731
    else:
        transpose_solve = lambda _, r: inverse(r, 1 - trans)  # noqa: E731
    return lax.custom_linear_solve(product, b, lambda _, r: inverse(r, trans), transpose_solve)


def _rows_product(data, x, offsets, shape, transpose: bool = False):
    """``op(A) x`` for rows ``x`` ``(..., k, n)`` (the product primitive takes columns;
    only derivatives of a solve run it)."""
    columns = jnp.swapaxes(x, -1, -2)
    y = spmm(data, columns, offsets=offsets, shape=shape, transpose=transpose)
    return jnp.swapaxes(y, -1, -2)


def _hermitian_matvec(data, x, offsets, shape, lower: bool):
    """``H x`` for rows ``x`` ``(..., k, n)``, ``H`` the Hermitian matrix the upper
    (``lower``: lower) triangle defines (the diagonal's real part, as LAPACK reads it)."""
    strict = [i for i, k in enumerate(offsets) if (k < 0 if lower else k > 0)]
    y = _diagonal(data, offsets, 0).real.astype(x.dtype)[..., None, :] * x
    if strict:
        part = data[..., strict, :]
        part_offsets = tuple(offsets[i] for i in strict)
        y = y + _rows_product(part, x, part_offsets, shape)
        y = y + _rows_product(part.conj(), x, part_offsets, shape, transpose=True)
    return y


def info_errors(info: ArrayLike) -> list[tuple[tuple[int, ...], int]]:
    """``(batch index, info)`` of the failed systems of a concrete ``info``."""
    host = np.asarray(info)
    return [(index, int(host[index])) for index in np.ndindex(host.shape) if host[index]]


def solve_once(A: DiaParts, b: ArrayLike, plan: Plan, *, check_finite: bool = True) -> Array:
    """Solves ``A @ x == b`` for a square ``A`` (see :func:`jaxdia.solve_banded`) with the
    factor ``plan`` names (for ``Use.SOLVE``: none, each solve factors as it goes, unless
    the matrix is periodic or LAPACK's layouts are forced). Outside ``jit``, with
    ``check_finite``, a non-finite entry is refused first: a one-shot solve has no
    ``info`` to report it."""
    if check_finite and not is_traced(A.data) and not bool(_all_finite(A.data, A.offsets)):
        refuse_non_finite("solve_banded", A)
    n = A.shape[0]
    b, _ = check_rhs("solve_banded", n, A.batch_shape, b, A.dtype)
    dtype = result_dtype(A.dtype, b)
    # Factored in the solution's precision (float64 for a float32 A and a float64 b), as
    # jnp.linalg.solve and SciPy compute; a real A stays real.
    precision = np.dtype(jnp.result_type(A.dtype, jnp.finfo(dtype).dtype))
    if precision != A.dtype:
        A = A.with_data(A.data.astype(precision))
    factored = factor(A, plan)
    return solve(A, factored, b, function="solve_banded")
