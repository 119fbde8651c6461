"""Linear solves at the array level: the Jacobi preconditioner and one-shot banded solves.

:func:`solve_banded` is :func:`jaxdia._banded.lu_factor` followed by
:func:`jaxdia._banded.solve` (LAPACK's banded LU on CPU, a ``lax.scan`` LU elsewhere),
except for tridiagonal systems on CPU and GPUs, which take
``jax.lax.linalg.tridiagonal_solve`` (LAPACK's ``gtsv`` on CPU, cuSPARSE's ``gtsv2`` on
GPUs; both pivot): a one-shot solve is then one library call with no host round trip
(the stored factor's solve has a fixed cost per call), and on a GPU one parallel call
where the factor's sequential scan takes ``n`` steps. TPU keeps the factor (its
``tridiagonal_solve`` does not pivot).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array, lax

from . import _banded
from ._checks import check_nonzero_diagonal
from ._geometry import accumulation_dtype, diagonal_bounds
from ._parts import DiaParts
from ._sharding import on_auto_axes


def _main_diagonal(A: DiaParts) -> Array:
    """The main diagonal of a square ``A``, shape ``(*batch_shape, n)`` (zeros if unstored)."""
    if 0 not in A.offsets:
        return jnp.zeros((*A.batch_shape, A.shape[1]), A.dtype)
    return A.data[..., A.offsets.index(0), :]


def _scale(inverse_diagonal: Array, v: Array) -> Array:
    return inverse_diagonal * v


def jacobi_preconditioner(A: DiaParts) -> jax.tree_util.Partial:
    """``M(v) = v / diag(A)`` for a square ``A`` (see :func:`jaxdia.jacobi`).

    Raises a ValueError naming the zeros of a concrete diagonal.
    """
    stored = "" if 0 in A.offsets else " (A stores no main diagonal)"
    return inverse_diagonal_preconditioner(_main_diagonal(A), stored)


def inverse_diagonal_preconditioner(diagonal: Array, hint: str = "") -> jax.tree_util.Partial:
    """``M(v) = v / diagonal``, laid out (and sharded) as ``diagonal`` is.

    Raises a ValueError naming the zeros of a concrete ``diagonal`` (``hint`` follows the
    message).
    """
    check_nonzero_diagonal(
        diagonal, "jacobi", f"{hint}; the Jacobi preconditioner 1/diag(A) does not exist."
    )
    return jax.tree_util.Partial(_scale, 1 / diagonal)


# -- banded direct solves ------------------------------------------------------------------


def _pad_last(x: Array, before: int, after: int) -> Array:
    return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(before, after)])


def tridiagonal_solve(A: DiaParts, b: Array, function: str) -> Array:
    """``A x = b`` by ``lax.linalg.tridiagonal_solve`` (its own derivative rules), for
    ``A`` of offsets within ``{-1, 0, 1}`` and ``b`` ``(*batch, n, k)`` of the solve's
    dtype, batch dims matching ``A``'s or ``A`` unbatched. On TPU, whose
    ``tridiagonal_solve`` is the Thomas algorithm (no pivoting), the banded LU with
    partial pivoting instead (``function`` names the caller in its errors)."""

    def pivoting(b):
        return _banded.solve(A, _banded.lu_factor(A), b, function=function)

    return lax.platform_dependent(b, tpu=pivoting, default=partial(_library_solve, A))


def _library_solve(A: DiaParts, b: Array) -> Array:
    n = A.shape[0]
    data = A.data.astype(b.dtype)

    def diagonal(offset):
        if offset not in A.offsets:
            return jnp.zeros((*data.shape[:-2], n), b.dtype)
        values = data[..., A.offsets.index(offset), :]
        start, stop = diagonal_bounds(offset, (n, n))
        # lax's layout: dl[i] = A[i, i - 1] (dl[0] = 0), du[i] = A[i, i + 1] (du[-1] = 0).
        return _pad_last(values[..., start:stop], start - offset, n - (stop - offset))

    batch = b.shape[:-2]
    dl, d, du = (jnp.broadcast_to(diagonal(k), (*batch, n)) for k in (-1, 0, 1))
    return lax.linalg.tridiagonal_solve(dl, d, du, b)


def solve_banded(A: DiaParts, b: Any) -> Array:
    """Solves ``A @ x == b`` for a square ``A`` (see :func:`jaxdia.solve_banded`)."""
    n = A.shape[0]
    b, batch = _banded.check_rhs("solve_banded", n, A.batch_shape, b, A.dtype)
    if _banded.lu_kind(A.offsets)[0] != "gt" or n == 0:
        return _banded.solve(A, _banded.lu_factor(A), b, function="solve_banded")
    dtype = _banded.result_dtype(A.dtype, b)
    return _tridiagonal(
        A.data, b, offsets=A.offsets, batch=batch, dtype=dtype, method=_banded.METHOD
    )


@partial(jax.jit, static_argnames=("offsets", "batch", "dtype", "method"))
@on_auto_axes(last=False)
def _tridiagonal(data, b, *, offsets, batch, dtype, method):
    n = data.shape[-1]
    parts = DiaParts(data, offsets, (n, n))

    if method != "auto":  # a forced implementation (tests)
        factor = _banded.lu_factor(parts, method)
        return _banded.solve(parts, factor, b, function="solve_banded", method=method)
    work = accumulation_dtype(dtype)
    rhs = (b[:, None] if b.ndim == 1 else b).astype(work)
    rhs = jnp.broadcast_to(rhs, (*batch, *rhs.shape[-2:]))
    x = tridiagonal_solve(parts, rhs, "solve_banded").astype(dtype)
    return x[..., 0] if b.ndim == 1 else x
