"""Log-determinants of square banded matrices, read from their banded factors, and their
derivatives from the selected inverse.

The determinant is a reduction over the stored factor, whatever its layout
(:mod:`jaxdia._kernels.band_layouts`), with no further factorization and no loop:

* ``GB``/``GT`` (LAPACK's LU with partial pivoting): the product of ``U``'s diagonal
  times ``(-1)`` per row interchange (``pivots[i] != i``);
* ``PB`` (``?pbtrf``'s ``U^H U``/``L L^H``): the squared product of the factor's
  diagonal; ``PT`` (``?pttrf``'s ``L D L^H``): the product of ``d``;
* ``CR``/``CH`` (block cyclic reduction): ``det A = prod det D_q`` over the diagonal
  blocks eliminated at every level and the last block (Schur's determinant formula),
  read from their stored inverses as ``1 / det E_q``;
* a periodic factor (a band ``B`` plus the corner correction ``A = B + U V^T``):
  ``det A = det B det S`` for the capacitance matrix ``S = I + V^T B^-1 U``
  (the matrix determinant lemma), ``S``'s LU being stored.

A singular matrix gives ``(0, -inf)`` as ``numpy.linalg.slogdet`` does: LAPACK's LU
completes with an exactly zero pivot. Where the factor cannot say (a failed Cholesky
factor, a cyclic reduction that met a singular block, a non-finite entry, a periodic
factor whose band is singular or too ill-conditioned) the result is NaN, never a wrong
finite number; the factor's ``info`` says why.

Derivatives: ``d log|det A| = Re tr(A^-1 dA)`` (and ``d sign = sign i Im tr(A^-1 dA)``),
so the gradient with respect to ``A.data`` is ``A^-T`` on ``A``'s pattern: a custom JVP
computes it by :mod:`jaxdia._linalg.selected_inverse` (O(n m^2), never a dense inverse;
for a LAPACK Cholesky factor on CPU, read from that factor by Takahashi's recurrences; for
a periodic LU factor, the band's plus the corners' correction; for a matrix that needs row
interchanges across cyclic reduction's blocks, on CPU, reverse mode through the pivoted
LU), which is itself differentiable, so second derivatives are exact too.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .. import _dispatch
from .._geometry import in_bounds, real_dtype
from .._kernels import band_parallel
from .._kernels.band_layouts import GB, GT, PB, PT
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from . import banded, periodic
from .plan import Plan, choose, pivoted_lu
from .selected_inverse import factor_data, selected_data


def _pivot_terms(diagonal: Array, swaps: Array) -> tuple[Array, Array]:
    """``(sign, log|det|)`` of ``(-1)^swaps prod(diagonal)`` over the last axis."""
    magnitude = jnp.abs(diagonal)
    logabs = jnp.sum(jnp.log(magnitude), axis=-1)
    if jnp.iscomplexobj(diagonal):
        phase = jnp.prod(diagonal / jnp.where(magnitude == 0, 1, magnitude), axis=-1)
        phase = phase / jnp.where(jnp.abs(phase) == 0, 1, jnp.abs(phase))
    else:
        phase = jnp.prod(jnp.sign(diagonal), axis=-1)
    phase = jnp.where(swaps % 2 == 1, -phase, phase)
    singular = jnp.any(magnitude == 0, axis=-1)
    return jnp.where(singular, 0, phase).astype(diagonal.dtype), logabs


def _swaps(pivots: Array) -> Array:
    """The number of row interchanges LAPACK's 0-based ``pivots`` ``(..., n)`` made."""
    n = pivots.shape[-1]
    return jnp.sum(pivots != jnp.arange(n, dtype=pivots.dtype), axis=-1)


def _block_terms(inverses: list[Array]) -> tuple[Array, Array]:
    """``(sign, log|det|)`` of ``prod det(E_q)^-1`` over stored block inverses ``(..., m,
    m, blocks)``: every level's blocks side by side along the block axis (the lanes, see
    :mod:`jaxdia._kernels.band_parallel`), their determinants in one pass."""
    dtype = inverses[-1].dtype
    shape = inverses[-1].shape[:-3]
    blocks = [inverse for inverse in inverses if inverse.shape[-1]]
    if not blocks:
        return jnp.ones(shape, dtype), jnp.zeros(shape, real_dtype(dtype))
    form = _dispatch.block_form(_dispatch.default_platform())
    sign, logabs = band_parallel.slogdet_blocks(jnp.concatenate(blocks, axis=-1), form=form)
    return jnp.prod(sign.conj(), axis=-1), -jnp.sum(logabs, axis=-1)


def band_slogdet(factor: banded.Factor) -> tuple[Array, Array]:
    """``(sign, log|det|)`` of the matrix a factor's arrays factor (a periodic factor's
    band), by layout, before ``info`` is read."""
    layout, widths, arrays = factor.plan.layout, factor.plan.widths, factor.arrays
    if layout is GB:
        kl, ku = widths
        return _pivot_terms(arrays[0][..., :, kl + ku], _swaps(arrays[1]))
    if layout is GT:
        return _pivot_terms(arrays[0][..., 1, :], _swaps(arrays[1]))
    if layout is PB:
        kd, lower = widths
        diagonal = arrays[0][..., :, 0 if lower else kd].real
        return jnp.ones_like(diagonal[..., 0]), 2 * jnp.sum(jnp.log(diagonal), axis=-1)
    if layout is PT:
        d = arrays[0]
        return jnp.ones_like(d[..., 0]), jnp.sum(jnp.log(d), axis=-1)
    if layout.parallel:  # per level (inverses, couplings, kept), then the last inverse
        sign, logabs = _block_terms([*arrays[:-1:3], arrays[-1]])
        if layout.hermitian:
            sign = sign.real
        return sign, logabs
    raise ValueError(f"no determinant for a factor of layout {layout!r}")


def factor_slogdet(factor: banded.Factor, n: int) -> tuple[Array, Array]:
    """``(sign, log|det A|)`` per matrix from ``factor`` of an ``n x n`` ``A`` (``sign``
    1 for a Cholesky factor), NaN where ``info`` says the factor cannot tell (see the
    module docstring)."""
    if n == 0:
        arrays = factor.arrays
        dtype = np.dtype(arrays[factor.plan.layout.typed_array].dtype if arrays else np.float32)
        shape = factor.info.shape
        return jnp.ones(shape, dtype), jnp.zeros(shape, real_dtype(dtype))
    sign, logabs = band_slogdet(factor)
    info = factor.info
    readable = info == 0
    if factor.plan.layout in (GB, GT):
        readable = info >= 0  # an exactly zero pivot: det A = 0
    correction = factor.correction
    if correction is not None:  # det A = det B det S
        r = correction.capacitance_lu.shape[-1]
        pivots = correction.capacitance_pivots
        swaps = jnp.sum(pivots != jnp.arange(r, dtype=pivots.dtype), axis=-1)
        diagonal = jnp.diagonal(correction.capacitance_lu, axis1=-2, axis2=-1)
        s_sign, s_logabs = _pivot_terms(diagonal, swaps)
        sign, logabs = sign * s_sign, logabs + s_logabs
        # S exactly singular says A is only where the correction is accurate: a band
        # nearly singular next to A (large growth) rounds S to singular too.
        accurate = periodic.growth(correction.corrections) <= periodic.MAX_GROWTH
        readable = (info == 0) | ((info == periodic.SINGULAR) & accurate)
    # A reduction that met a singular block reads NaN from it: both are NaN then.
    readable = readable & ~jnp.isnan(logabs)
    sign = jnp.where(readable, sign, jnp.nan)
    logabs = jnp.where(readable, logabs, jnp.nan)
    return sign, logabs


@partial(jax.custom_jvp, nondiff_argnums=(2,))
def _slogdet(data: Array, factor: banded.Factor, offsets: tuple[int, ...]) -> tuple[Array, Array]:
    """``(sign, log|det A|)`` of ``A = (data, offsets)`` from its ``factor`` (a Cholesky
    factor: of the Hermitian matrix that its triangle defines), differentiable in ``data``
    (the factor's arrays get no derivative)."""
    n = data.shape[-1]
    sign, logabs = factor_slogdet(factor, n)
    pivoted = pivoted_lu(factor.plan)
    if pivoted is None or n == 0:
        return sign, logabs
    # Where cyclic reduction met a singular block (its info is LAPACK's, so only the NaN
    # says so), the determinant is read from LAPACK's pivoted LU, as the solves fall back.
    failed = jnp.isnan(logabs) & (factor.info >= 0)

    def from_pivoted_lu() -> tuple[Array, Array]:
        lu = banded.factor(DiaParts(data, offsets, (n, n)), pivoted)
        s, log = factor_slogdet(lu, n)
        return jnp.where(failed, s, sign), jnp.where(failed, log, logabs)

    return jax.lax.cond(jnp.any(failed), from_pivoted_lu, lambda: (sign, logabs))


@_slogdet.defjvp
def _slogdet_jvp(offsets, primals, tangents):
    data, factor = primals
    tangent = tangents[0]
    sign, logabs = _slogdet(data, factor, offsets)
    lower = factor.plan.lower
    n = data.shape[-1]
    parts = DiaParts(data, offsets, (n, n))
    # X^T on A's pattern: tr(A^-1 dA) = sum over A's slots of X[j, i] dA[i, j]; the plan
    # says whether a Cholesky factor gives it itself.
    if factor.plan.takahashi:
        transposed = factor_data(parts, factor, transpose=True)
    else:
        transposed = selected_data(parts, factor.plan, transpose=True, factor=factor)
    inside = in_bounds(offsets, (n, n))
    if lower is not None:  # the Hermitian matrix of one triangle: 2 Re off it, Re on it
        weights = np.array([(k <= 0) if lower else (k >= 0) for k in offsets], bool)
        twice = np.where(np.asarray(offsets) == 0, 1.0, 2.0)
        read = (inside & weights[:, None]) if n else inside
        terms = jnp.where(read, (transposed * tangent).real * twice[:, None], 0)
        trace = jnp.sum(terms, axis=(-2, -1)).astype(logabs.dtype)
        return (sign, logabs), (jnp.zeros_like(sign), trace)
    trace = jnp.sum(jnp.where(inside, transposed * tangent, 0), axis=(-2, -1))
    trace = trace.astype(jnp.result_type(sign.dtype, trace.dtype))
    complex_ = jnp.iscomplexobj(sign)
    sign_tangent = sign * 1j * trace.imag if complex_ else jnp.zeros_like(sign)
    return (sign, logabs), (sign_tangent.astype(sign.dtype), trace.real.astype(logabs.dtype))


def slogdet_of(A: DiaParts, factor: banded.Factor) -> tuple[Array, Array]:
    """:func:`_slogdet` of ``A`` with its ``factor``: what the factors' methods return."""
    return _slogdet(A.data, factor, A.offsets)


def slogdet(A: DiaMatrix, *, method: str = "auto") -> tuple[Array, Array]:
    """The sign and the natural log of the absolute value of the determinant of a square
    banded DiaMatrix, as ``jnp.linalg.slogdet``.

    ``det A = sign * exp(logabsdet)``, computed from the banded LU factor (that of
    :func:`jaxdia.lu_factor`: LAPACK's on CPU, block cyclic reduction's on GPU and TPU, a
    band plus its corner correction for a periodic matrix) as a reduction over it:
    O(n l (l + u)) for the factorization, nothing more. For a real matrix ``sign`` is
    -1, 0 or 1; for a complex one it has modulus 1. A singular matrix gives ``(0,
    -inf)``, as NumPy. Where the factorization fails without proving ``A`` singular (on
    GPU/TPU cyclic reduction meets a singular diagonal block, which a matrix needing row
    interchanges across blocks may do; a non-finite entry) both are NaN. To reuse a
    factor, call :meth:`jaxdia.BandedLU.slogdet` (or, for a Hermitian positive definite
    matrix, :meth:`jaxdia.BandedCholesky.logdet`, half the work).

    Differentiable in ``A.data`` (forward and reverse mode): the gradient of
    ``logabsdet`` is ``A^-T`` on ``A``'s pattern (the conjugate for complex matrices, as
    JAX's convention for real functions of complex inputs), computed by
    :func:`jaxdia.selected_inverse` at banded cost (for a matrix that needs row
    interchanges across cyclic reduction's blocks, on CPU from the banded LU with partial
    pivoting, exactly; on GPU/TPU NaN); second derivatives differentiate that selected
    inverse, exactly. Batched over ``A.batch_shape``; works under ``jit`` and ``vmap``.

    Args:
      A: a square DiaMatrix (possibly batched).
      method: which implementation factors ``A``, as for :func:`jaxdia.lu_factor`.

    Returns:
      ``(sign, logabsdet)``, each of shape ``A.batch_shape``: ``sign`` of the factor's
      dtype (float32 for 16-bit matrices), ``logabsdet`` of its real dtype.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix.
      ValueError: if ``A`` is not square, or ``method`` is not one of
        :func:`jaxdia.lu_factor`'s.

    Example:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([1.0, -3.0, 2.0], offsets=[-1, 0, 1], shape=(4, 4))
      >>> sign, logabsdet = jaxdia.slogdet(A)
      >>> bool(jnp.allclose(sign * jnp.exp(logabsdet), jnp.linalg.det(A.todense())))
      True
      >>> g = jax.grad(lambda d: jaxdia.slogdet(jaxdia.DiaMatrix(d, A.offsets, A.shape))[1])
      >>> bool(jnp.allclose(g(A.data)[1], jnp.diag(jnp.linalg.inv(A.todense())), atol=1e-5))
      True
    """
    A = as_square_matrix(A, "slogdet")
    parts = A._parts
    plan = choose(parts.offsets, parts.shape[0], method=method, function="slogdet")
    if plan.compiled_whole:
        return _compiled_slogdet(parts.data, parts.offsets, parts.shape, plan)
    return slogdet_of(parts, banded.factor(parts, plan))


@partial(jax.jit, static_argnums=(1, 2, 3))
def _compiled_slogdet(
    data: Array, offsets: tuple[int, ...], shape: tuple[int, int], plan: Plan
) -> tuple[Array, Array]:
    """:func:`slogdet` of a band as one compiled program (and its derivative, which
    eagerly would compile each of its operations apart)."""
    parts = DiaParts(data, offsets, shape)
    return slogdet_of(parts, banded.factor(parts, plan))
