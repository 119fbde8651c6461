"""Least squares with a banded matrix: ``min ||A x - b||`` for an ``m x n`` DiaMatrix,
``m >= n``, of full column rank.

The method is the corrected semi-normal equations (Björck): the columns of ``A`` are
scaled to unit norm (``A D``), the normal matrix ``G = (A D)^H (A D)`` is formed as a
banded matrix (its band is the difference set of ``A``'s offsets: at most twice as wide)
and factored by :func:`jaxdia.cho_factor`'s banded Cholesky, ``G y = (A D)^H b`` is
solved, and :data:`REFINEMENTS` steps of iterative refinement on the least-squares
residual (``y += G^-1 (A D)^H (b - A D y)``) recover the accuracy the squared condition
number costs the first solve, as long as ``kappa(A D)^2 eps`` stays well below 1.
Everything is products and banded Cholesky solves, so the platform rules are
:func:`jaxdia.cho_factor`'s: LAPACK's ``?pbtrf``/``?pttrf`` on CPU, block cyclic
reduction on GPU and TPU (no loop over the rows there).

Why not a banded QR by Givens rotations (which does not square the condition number):
it is a loop of ``n`` dependent steps (a ``lax.scan``, which on an accelerator is the
sequential loop the project avoids) and LAPACK has no banded QR to call on CPU, where
the Cholesky factor of the normal matrix is LAPACK's compiled ``?pbtrf``.

Full column rank is checked, never assumed: a zero column, a Cholesky factorization that
fails, or an estimate of ``kappa(A D)^2`` (a bound on ``G``'s largest eigenvalue by its
row sums, and two steps of inverse iteration for its smallest) above
:data:`MAX_SQUARED_CONDITION` ``/ eps`` marks the matrix rank deficient for this method:
:func:`lstsq_banded` raises outside ``jit`` and returns NaN under it.
"""

from __future__ import annotations

import math
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import as_array, broadcast_batch, integers_as, is_traced, result_dtype
from .._geometry import accumulation_dtype, in_bounds
from .._matrix import DiaMatrix, as_matrix
from .._parts import DiaParts
from .._products import adjoint, pair_products
from .._pytree import StaticBooleans
from .._typing import ArrayLike
from .factor import BandedCholesky, cholesky_unchecked

#: Steps of iterative refinement after the semi-normal solve: each multiplies the error
#: of the normal equations' solution by about ``kappa(A D)^2 eps``.
REFINEMENTS = 2
#: The largest ``kappa(A D)^2 eps`` (estimated) that is solved; above it the matrix is
#: numerically rank deficient for the semi-normal equations (the refinement would no
#: longer contract the error fast enough to reach the least-squares accuracy).
MAX_SQUARED_CONDITION = 1e-2


#: The pairs ``(ia, ib)`` of diagonals of ``A`` whose products make ``A^H A``: static.
Pairs = tuple[tuple[int, int], ...]


def _columns_of_pair(a: int, b: int, shape: tuple[int, int]) -> tuple[int, int]:
    """``[start, stop)``: the columns ``j`` of diagonal ``b - a`` of ``A^H A`` that
    diagonals ``a`` and ``b`` of ``A`` (``m x n``) reach in a shared row ``j - b``."""
    m, n = shape
    return max(b - a, b, 0), min(n, m + b)


def normal_pairs(offsets: tuple[int, ...], shape: tuple[int, int], slots: np.ndarray) -> Pairs:
    """The pairs of diagonals ``a <= b`` that share a row where both may hold a nonzero
    (``slots``, host booleans in ``data``'s layout): a structural zero (a slot outside
    the matrix, or one a mask marks) adds no diagonal to ``A^H A``. Stacked blocks (a fit
    and its penalty rows) otherwise couple their far diagonals' few in-bounds slots into
    a band as wide as the matrix."""
    pairs = []
    for ia, a in enumerate(offsets):
        for ib, b in enumerate(offsets):
            start, stop = _columns_of_pair(a, b, shape)
            d = b - a
            if (
                d >= 0
                and start < stop
                and np.any(slots[ia, start - d : stop - d] & slots[ib, start:stop])
            ):
                pairs.append((ia, ib))
    return tuple(pairs)


def normal_upper(A: DiaParts, pairs: Pairs) -> DiaParts:
    """The upper triangle (offsets ``>= 0``) of ``A^H A`` (``n x n``) for an ``m x n``
    DIA ``A``: diagonal ``b - a`` collects ``conj(A[r, i]) A[r, i + b - a]`` for each
    pair of diagonals ``a <= b`` of ``pairs`` (see :func:`normal_pairs`), as one loop
    over ``A``'s diagonals (:func:`jaxdia._products.pair_products`: a program of constant
    size, however many pairs)."""
    n, q = A.shape[1], len(A.offsets)
    keep = np.zeros((q, q), bool)
    for ia, ib in pairs:  # A^H's diagonal -a is its row q - 1 - ia
        keep[q - 1 - ia, ib] = True
    G = pair_products(adjoint(A), A, keep)
    if not G.offsets:  # no entry at all: a zero matrix (its rank check fails)
        return DiaParts(jnp.zeros((*A.data.shape[:-2], 1, n), A.data.dtype), (0,), (n, n))
    return G


def _row_sum_bound(G: DiaParts) -> Array:
    """``max_i sum_j |G[i, j]|`` of the Hermitian matrix whose upper triangle ``G`` holds
    (zero in its padding slots): a bound of its largest eigenvalue. Row ``i`` of ``G``
    holds the upper triangle's row ``i`` and, mirrored, its column ``i`` (the diagonal
    once); the column sums add ``data``'s rows, the row sums those of ``G^H``'s (one
    gather), so the program does not grow with the band."""
    magnitude = jnp.abs(G.data)
    columns = jnp.sum(magnitude, axis=-2)
    rows = jnp.sum(jnp.abs(adjoint(G).data), axis=-2)
    diagonal = magnitude[..., G.offsets.index(0), :] if 0 in G.offsets else 0
    return jnp.max(rows + columns - diagonal, axis=-1)


class LeastSquares(NamedTuple):
    """A factored least-squares problem: ``scaled`` (``A D``, unit columns), ``scale``
    (the column norms ``1 / D``, ``(*batch, n)``), the Cholesky factor of ``(A D)^H A D``
    and ``ok`` (``(*batch,)``: full column rank, as far as the checks can tell). A pytree."""

    scaled: DiaMatrix
    scale: Array
    factor: BandedCholesky
    ok: Array

    def solve(self, b: Array) -> Array:
        """``x`` minimizing ``||A x - b||`` (``b`` of shape ``(m,)`` or ``(..., m, k)``),
        NaN where ``ok`` is false."""
        if b.ndim == 1:  # one vector, for every matrix of a batch
            return self.solve(b[:, None])[..., 0]
        A, factor = self.scaled, self.factor

        def refine(_: Array, y: Array) -> Array:
            return y + factor.solve(_adjoint_times(A, b - A @ y))

        # One refinement step compiled, run REFINEMENTS times.
        y = jax.lax.fori_loop(0, REFINEMENTS, refine, factor.solve(_adjoint_times(A, b)))
        return _nan_unless(self.ok, y / self.scale[..., :, None])

    def solve_adjoint(self, c: Array) -> Array:
        """The minimum-norm ``y`` with ``A^H y = c`` (``c`` of shape ``(n,)`` or
        ``(..., n, k)``): ``y = A (A^H A)^-1 c``, NaN where ``ok`` is false."""
        if c.ndim == 1:
            return self.solve_adjoint(c[:, None])[..., 0]
        y = self.scaled @ self.factor.solve(c / self.scale[..., :, None])
        return _nan_unless(self.ok, y)


def _adjoint_times(A: DiaMatrix, r: Array) -> Array:
    """``A^H @ r`` for ``r`` of shape ``(..., m, k)``, as ``conj(conj(r)^T @ A)^T``: the
    product reads ``A``'s data in place, where ``A.H`` would first build the transposed
    copy (one piece per diagonal)."""
    return jnp.conj(jnp.swapaxes(jnp.swapaxes(jnp.conj(r), -1, -2) @ A, -1, -2))


def _nan_unless(ok: Array, x: Array) -> Array:
    """``x`` (``(..., rows, k)``) where ``ok`` (``(*batch,)``), else NaN."""
    return jnp.where(ok[..., None, None], x, jnp.nan)


def factor_least_squares(A: DiaMatrix, slots: np.ndarray | None = None) -> LeastSquares:
    """The :class:`LeastSquares` factor of an ``m x n`` DiaMatrix, ``m >= n`` (unchecked:
    callers check the shape; never raises on a rank-deficient matrix, ``ok`` says so).
    ``slots``: host booleans in ``data``'s layout, false on structural zeros (whose
    values are taken as zero); None: every slot inside the matrix."""
    m, n = A.shape
    inside = np.asarray(in_bounds(A.offsets, A.shape, host=True))
    slots = inside if slots is None else inside & slots
    data = A.data.astype(accumulation_dtype(A.dtype))
    data = jnp.where(slots, data, 0)
    real = np.dtype(np.finfo(data.dtype).dtype)
    # The column scaling only conditions the problem (x does not depend on it): no
    # derivative flows through it.
    norms = jax.lax.stop_gradient(jnp.sqrt(jnp.sum(jnp.abs(data) ** 2, axis=-2)))
    nonzero = jnp.all((norms > 0) & jnp.isfinite(norms), axis=-1)
    scale = jnp.where(norms > 0, norms, 1).astype(real)
    scaled = DiaParts(data / scale[..., None, :], A.offsets, (m, n))
    G = normal_upper(scaled, normal_pairs(A.offsets, A.shape, slots))
    factor = cholesky_unchecked(DiaMatrix._wrap(G), lower=False)
    ok = nonzero & factor.ok & _well_conditioned(jax.lax.stop_gradient(G), factor)
    return LeastSquares(DiaMatrix._wrap(scaled), scale, factor, ok)


def _well_conditioned(G: DiaParts, factor: BandedCholesky) -> Array:
    """Whether the estimate of ``kappa(G) eps`` is at most :data:`MAX_SQUARED_CONDITION`:
    ``||G||`` bounded by its row sums, ``||G^-1||`` by two steps of inverse iteration from
    a fixed vector with no structure a band would single out."""
    n = G.shape[0]
    batch = G.data.shape[:-2]
    real = np.dtype(np.finfo(G.data.dtype).dtype)
    start = np.cos(np.arange(n) * (1 + np.sqrt(5)) * np.pi) + 1.5  # no null direction
    v = jnp.broadcast_to(jnp.asarray(start, real)[:, None], (*batch, n, 1))
    v = v / jnp.linalg.norm(v, axis=(-2, -1), keepdims=True)
    w = jax.lax.stop_gradient(factor.solve(v.astype(G.data.dtype)))
    w_norm = jnp.linalg.norm(w, axis=(-2, -1))
    u = jax.lax.stop_gradient(factor.solve(w / w_norm[..., None, None]))
    inverse_norm = jnp.maximum(w_norm, jnp.linalg.norm(u, axis=(-2, -1)))
    estimate = _row_sum_bound(G) * inverse_norm * np.finfo(real).eps
    return jnp.isfinite(estimate) & (estimate <= MAX_SQUARED_CONDITION)


@partial(jax.jit, static_argnames=("offsets", "shape", "slots"))
def _lstsq(data: Array, b: Array, *, offsets: tuple[int, ...], shape: tuple[int, int], slots):
    A = DiaMatrix._wrap(DiaParts(data, offsets, shape))
    problem = factor_least_squares(A, slots.array)
    return problem.solve(b), problem.ok


def _slots(A: DiaMatrix, mask: ArrayLike | None) -> np.ndarray:
    """The slots of ``A.data`` that may hold nonzeros: ``mask``'s, else, for a concrete
    ``A``, those holding a nonzero in some matrix of the batch, else all."""
    expected = (len(A.offsets), A.shape[1])
    if mask is not None:
        if is_traced(mask):
            raise TypeError("lstsq_banded: mask must be a concrete (static) boolean array")
        mask = np.asarray(mask)
        if mask.shape != expected or mask.dtype != np.bool_:
            raise ValueError(
                f"lstsq_banded: mask must be a boolean array of shape (len(A.offsets), n) = "
                f"{expected} (data's layout, rows in the order of A.offsets), got "
                f"{mask.dtype} of shape {mask.shape}"
            )
        return mask
    if is_traced(A.data):
        return np.ones(expected, bool)
    values = np.asarray(A.data).reshape(math.prod(A.batch_shape), *expected)  # 0 offsets too
    return np.any(values != 0, axis=0)


def lstsq_banded(A: DiaMatrix, b: ArrayLike, *, mask: ArrayLike | None = None) -> Array:
    """The least-squares solution of ``A @ x ≈ b`` for a banded ``m x n`` DiaMatrix
    ``A``, ``m >= n``, of full column rank: ``x`` minimizing ``||A x - b||_2``.

    The banded counterpart of ``scipy.linalg.lstsq`` / ``jnp.linalg.lstsq`` and of
    ``scipy.optimize.least_squares``'s linear step with ``jac_sparsity``; it returns
    ``x`` alone (as :func:`jaxdia.solve_banded` does): a banded factorization gives no
    singular values, and the rank is checked rather than computed. ``m == n`` solves a
    square system (in the least-squares sense, so more slowly than
    :func:`jaxdia.solve_banded`).

    The method is the corrected semi-normal equations: the columns of ``A`` are scaled
    to unit norm, the banded normal matrix ``G = A^H A`` (offsets the differences of
    ``A``'s: a band at most twice as wide) is factored by the banded Cholesky of
    :func:`jaxdia.cho_factor` (LAPACK's ``?pbtrf`` on CPU, block cyclic reduction on
    GPU and TPU: no loop over the rows), and two steps of iterative refinement on the
    least-squares residual follow the first solve. O(m w + n w^2) work for ``w``
    diagonals. The accuracy is that of a QR method (a backward-stable solve) while
    ``kappa^2 eps`` is small, ``kappa`` the condition number of ``A`` with its columns
    scaled to unit norm.

    **Rank deficiency** is reported, never solved silently: a zero column, a normal
    matrix that is not numerically positive definite, or an estimated
    ``kappa^2 eps > 1e-2`` (``kappa`` above about 1e7 in float64, 300 in float32: the
    semi-normal equations square the condition number, where a QR would go to about
    ``1 / eps``) raises ``numpy.linalg.LinAlgError`` outside ``jit`` and gives an
    all-NaN ``x`` under ``jit`` (check ``jnp.isfinite``). A rank-deficient problem has
    no unique solution: regularize it (append ``sqrt(lam) I`` rows, as
    Levenberg-Marquardt does) or drop the dependent columns.

    **Stacked blocks.** A fit stacked over its penalty (``[F; P]``: ``F``'s rows, then
    ``P``'s) puts ``P``'s diagonals far below the main one, and their first slots fall
    in ``F``'s rows: structurally they couple columns far apart, and ``A^H A``'s band
    would span the matrix. Slots that are always zero are therefore left out of
    ``A^H A``'s pattern: where ``A.data`` is concrete, every slot that holds a zero in
    each matrix of the batch; under ``jit`` (``A.data`` traced), the slots ``mask``
    marks (``mask[k, j]`` false: ``A.data[..., k, j]`` is a structural zero, read as
    zero), as for :func:`jaxdia.jacobian`. (An eager call compiles once per pattern of
    zeros; a loop of solves with changing values belongs under ``jit``, with ``mask``.)

    Batches follow :func:`jaxdia.solve_banded`'s rules: a 1-D ``b`` of length ``m`` is a
    vector, an N-D ``b`` a stack of ``(m, k)`` right-hand sides whose batch dims
    broadcast with ``A.batch_shape``. Works under ``jit`` and ``vmap`` and is
    differentiable with respect to ``A.data`` and ``b`` (forward and reverse mode: the
    derivatives of the products and of the Cholesky solves, whose own derivatives solve
    with the stored factor).

    Args:
      A: an ``m x n`` DiaMatrix with ``m >= n`` (possibly batched). 16-bit matrices are
        solved in float32.
      b: the right-hand side(s): shape ``(m,)``, or ``(..., m, k)``.
      mask: optional host booleans of ``A.data``'s shape ``(len(A.offsets), n)`` (rows
        in the order of ``A.offsets``): false on the structural zeros of ``A``, whose
        values are ignored.

    Returns:
      ``x``: shape ``(n,)``, or ``(*batch, n, k)``, in the promoted dtype of ``A`` and
      ``b``.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix, or ``b`` is not numeric.
      ValueError: if ``A`` has fewer rows than columns, or ``b``'s or ``mask``'s shape
        does not fit.
      numpy.linalg.LinAlgError: outside ``jit``, if ``A`` is rank deficient, or too
        ill-conditioned for the method (see above), or holds a NaN or infinity.

    Example:
      >>> import jax.numpy as jnp
      >>> import numpy as np
      >>> import jaxdia
      >>> # Fit 4 unknowns to 6 observations: A is 6 x 4 with offsets -2..0.
      >>> A = jaxdia.diags([1.0, 2.0, 1.0], offsets=[-2, -1, 0], shape=(6, 4))
      >>> b = jnp.arange(6.0)
      >>> x = jaxdia.lstsq_banded(A, b)
      >>> expected = np.linalg.lstsq(np.asarray(A.todense()), np.arange(6.0))[0]
      >>> bool(np.allclose(x, expected, atol=1e-4))
      True
    """
    A = as_matrix(A, "lstsq_banded: A")
    m, n = A.shape
    if m < n:
        raise ValueError(
            f"lstsq_banded: A must have at least as many rows as columns (an overdetermined "
            f"or square system), got shape {A.shape}; an underdetermined system has no "
            "unique least-squares solution"
        )
    b = integers_as(as_array(b, "lstsq_banded: b"), A.dtype)
    if b.ndim == 0 or b.shape[-2 if b.ndim > 1 else 0] != m:
        raise ValueError(
            f"lstsq_banded: b must have shape ({m},) or (..., {m}, k) for A of shape "
            f"{A.shape}, got shape {b.shape}"
        )
    broadcast_batch("lstsq_banded: A and b", A.batch_shape, b.shape[:-2])
    dtype = result_dtype(A.dtype, b)
    solve_dtype = accumulation_dtype(dtype)
    slots = StaticBooleans(_slots(A, mask))
    b = jnp.asarray(b, solve_dtype)
    x, ok = _lstsq(A.data, b, offsets=A.offsets, shape=A.shape, slots=slots)
    if not is_traced(ok) and not bool(jnp.all(ok)):
        _raise_rank_deficient(A, np.asarray(ok))
    return x.astype(dtype)


def _raise_rank_deficient(A: DiaMatrix, ok: np.ndarray) -> None:
    failures = np.argwhere(~ok.reshape(A.batch_shape))
    where = f" (matrix {tuple(int(i) for i in failures[0])} of the batch)" if A.batch_shape else ""
    more = f"; {len(failures) - 1} more matrices of the batch too" if len(failures) > 1 else ""
    finite = bool(jnp.all(jnp.isfinite(A.data) | ~in_bounds(A.offsets, A.shape)))
    why = (
        "A holds a NaN or infinity"
        if not finite
        else "A is rank deficient, or too ill-conditioned for the semi-normal equations "
        "(kappa(A)^2 eps above 1e-2 after scaling its columns to unit norm)"
    )
    raise np.linalg.LinAlgError(f"lstsq_banded: {why}{where}{more}")
