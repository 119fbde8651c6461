"""Linear solves at the array level: the Jacobi preconditioner and one-shot banded solves.

:func:`solve_banded` solves with :func:`jaxdia._banded.oneshot`'s factor, which factors
as it solves, with the implementation chosen per platform and size when the program is
compiled (``jaxdia._band_primitives``: LAPACK on CPU, cyclic reduction for batches and
small systems there and on TPU, cuSPARSE's ``gtsv2`` for a tridiagonal matrix on GPUs,
cyclic reduction for other bands there).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import Array

from . import _banded
from ._checks import check_nonzero_diagonal
from ._parts import DiaParts


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


def solve_banded(A: DiaParts, b: Any) -> Array:
    """Solves ``A @ x == b`` for a square ``A`` (see :func:`jaxdia.solve_banded`)."""
    method = _banded.METHOD
    # LAPACK's kinds forced (tests), else a factor whose solve factors.
    factor = _banded.lu_factor(A, method) if method in ("host", "scan") else _banded.oneshot(A)
    return _banded.solve(A, factor, b, function="solve_banded")
