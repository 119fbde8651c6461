"""Smoothers and polynomial preconditioners: polynomials in ``D^-1 A`` (``D`` the diagonal).

* :func:`chebyshev_steps`: Chebyshev iteration for ``A x = b``, the error multiplied by
  the scaled Chebyshev polynomial smallest on a chosen interval of the spectrum of
  ``D^-1 A``; :func:`jacobi_steps`: damped Jacobi sweeps. Both take the product and the
  scaling as functions, so the public :class:`jaxdia.Chebyshev` applies them to any
  operator.
* :func:`gershgorin` (one square matrix) and :func:`smoothing_data` (a diagonal and the
  absolute row sums): the inverse diagonal and Gershgorin's bound ``rho`` on the spectrum
  of ``D^-1 A``, read off the stored entries (no product is spent on it).
* :func:`smooth`: one smoothing of a multigrid level, with the interval or weight tuned for
  stencils (:data:`CHEBYSHEV_LOWER`, :data:`JACOBI_WEIGHT`).
* :func:`fusible_product`: ``A @ v`` written so that XLA fuses it with the vector updates
  of a polynomial step.
* :func:`check_diagonal` and :func:`is_operator`: what the preconditioners built on
  ``D^-1`` (Jacobi, Chebyshev, multigrid's smoothers) ask of ``A``: a nonzero diagonal,
  stored or given by ``diagonal()``.

The same polynomial before and after a coarse correction keeps a V-cycle symmetric for a
symmetric ``A``; ``rho`` bounds the spectrum, so the smoothers converge in the energy norm.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._checks import check_nonzero_diagonal
from .._geometry import band_widths, by_rows, in_bounds
from .._matrix import DiaMatrix
from .._parts import DiaParts
from .._products import matvec as dia_matvec
from .._shard import ShardedDiaMatrix

#: Values on the device or on the host (``xp`` says which), kept as they came.
_V = TypeVar("_V", Array, np.ndarray, Array | np.ndarray)


def row_sums(cells: Sequence[_V], xp: ModuleType = jnp) -> _V:
    """``sum |A[i, j]|`` over ``j`` for each point ``i``: a sum of the cells (a reduction
    over the leading axis of a stencil array is a slow strided loop on CPU)."""
    total = None
    for values in cells:
        total = xp.abs(values) if total is None else total + xp.abs(values)
    assert total is not None
    return total


#: Polynomial steps up to this many are unrolled; longer polynomials run in a
#: ``fori_loop``, so that compile time does not grow with the degree.
_UNROLL = 4


def chebyshev_steps(
    matvec: Callable[[Array], Array],
    scale: Callable[[Array], Array],
    b: Array,
    x: Array | None,
    lower: Array,
    upper: Array,
    steps: int,
    residual: bool,
    unroll: bool | None = None,
) -> tuple[Array, Array | None]:
    """``steps`` steps of Chebyshev iteration for ``A x = b``, preconditioned by ``scale``.

    The error is multiplied by the polynomial of degree ``steps`` that is smallest on
    ``[lower, upper]`` (the part of the spectrum of ``scale(A)`` to damp) among those
    equal to 1 at 0, a scaled Chebyshev polynomial. ``x`` None is a zero start, which
    saves a product. With ``residual``, also returns ``b - A x`` of the result (one more
    product). The three-term recurrence is Saad's (Iterative Methods for Sparse Linear
    Systems, 2nd ed., Algorithm 12.1). ``unroll``: the steps as straight-line code (the
    default up to :data:`_UNROLL` steps) or in a ``fori_loop``.
    """
    theta = (upper + lower) / 2
    delta = (upper - lower) / 2
    sigma = theta / delta
    r = b if x is None else b - matvec(x)
    d = scale(r) / theta
    x = d if x is None else x + d
    rho = 1 / sigma

    def step(carry):
        x, r, d, rho = carry
        r = r - matvec(d)
        rho_next = 1 / (2 * sigma - rho)
        d = (rho_next * rho) * d + (2 * rho_next / delta) * scale(r)
        return x + d, r, d, rho_next

    carry = (x, r, d, rho)
    if unroll is None:
        unroll = steps - 1 <= _UNROLL
    if not unroll:
        carry = lax.fori_loop(0, steps - 1, lambda _, c: step(c), carry)
    else:
        for _ in range(steps - 1):
            carry = step(carry)
    x, r, d, _ = carry
    assert x is not None
    return x, (r - matvec(d)) if residual else None


def chebyshev_steps_by_ratio(
    matvec: Callable[[Array], Array],
    scale: Callable[[Array], Array],
    b: Array,
    x: Array | None,
    upper: Array,
    ratio: float,
    steps: int,
    residual: bool,
) -> tuple[Array, Array | None]:
    """:func:`chebyshev_steps` on ``[ratio * upper, upper]``: the recurrence's
    coefficients depend on the interval only through ``ratio``, so they are computed here
    once (in float64, NumPy) and scaled by ``1 / upper``; the compiled smoother holds one
    division where :func:`chebyshev_steps` computes a few scalars per step (each its own
    compiled kernel in XLA:CPU). The same polynomial, to rounding."""
    sigma = (1 + ratio) / (1 - ratio)
    theta, delta = (1 + ratio) / 2, (1 - ratio) / 2  # of an interval with upper = 1
    rho = 1 / sigma
    keep, new = [], []  # d = keep[k] d + new[k] / upper * scale(r) at step k
    for _ in range(steps - 1):
        rho_next = 1 / (2 * sigma - rho)
        keep.append(rho_next * rho)
        new.append(2 * rho_next / delta)
        rho = rho_next
    inverse = 1 / upper
    r = b if x is None else b - matvec(x)
    d = (inverse / theta).astype(r.dtype) * scale(r)
    x = d if x is None else x + d

    def step(carry: tuple[Array, Array, Array], keep, new) -> tuple[Array, Array, Array]:
        x, r, d = carry
        r = r - matvec(d)
        d = keep.astype(r.dtype) * d + (new * inverse).astype(r.dtype) * scale(r)
        return x + d, r, d

    carry = (x, r, d)
    if steps - 1 <= _UNROLL:
        for k in range(steps - 1):
            carry = step(carry, np.asarray(keep[k]), np.asarray(new[k]))
    else:
        keeps, news = jnp.asarray(keep), jnp.asarray(new)
        carry = lax.fori_loop(0, steps - 1, lambda k, c: step(c, keeps[k], news[k]), carry)
    x, r, d = carry
    return x, (r - matvec(d)) if residual else None


def jacobi_steps(
    matvec: Callable[[Array], Array],
    scale: Callable[[Array], Array],
    b: Array,
    x: Array | None,
    omega: Array,
    steps: int,
    residual: bool,
) -> tuple[Array, Array | None]:
    """``steps`` damped Jacobi sweeps ``x += omega * scale(b - A x)`` (``x`` and
    ``residual`` as in :func:`chebyshev_steps`)."""
    r = b if x is None else b - matvec(x)
    for index in range(steps):
        d = omega * scale(r)
        x = d if x is None else x + d
        if residual or index < steps - 1:
            r = r - matvec(d)
    assert x is not None
    return x, r if residual else None


def fusible_product(A: DiaParts) -> Callable[[Array], Array]:
    """``v -> A @ v`` for vectors ``(..., n)`` (batch dims broadcast with ``A``'s), as one
    expression that XLA fuses with the vector updates that consume it.

    Diagonal ``k`` contributes ``data[k, i + o] * v[i + o]`` to row ``i``: the product of
    the two rows, zero-padded and shifted by the offset (padding slots of ``data`` are
    never read). The ``dia_spmm`` primitive computes the product on its own, into a
    buffer written piece by piece; a Chebyshev step around it (the product, then three
    vector updates) then passes over memory several times, where XLA makes one loop of
    this expression and the updates (measured in benchmarks/notes/preconditioners.md).
    Not a primitive: differentiated and batched as ``jax.numpy``. Where a step is
    unrolled, XLA may recompute it in every consumer instead: the polynomial's steps run
    in a loop.
    """
    data, offsets, shape = A
    n = shape[1]
    lower, upper = band_widths(offsets)

    def matvec(v: Array) -> Array:
        dtype = jnp.result_type(data.dtype, v.dtype)
        pad = [(0, 0)] * (v.ndim - 1) + [(lower, upper)]
        padded = jnp.pad(v.astype(dtype), pad)
        total = jnp.zeros(jnp.broadcast_shapes(data.shape[:-2], v.shape[:-1]) + (n,), dtype)
        for k, offset in enumerate(offsets):
            row = jnp.pad(
                data[..., k, :].astype(dtype), [(0, 0)] * (data.ndim - 2) + [(lower, upper)]
            )
            total = total + lax.slice_in_dim(
                row * padded, lower + offset, lower + offset + n, axis=-1
            )
        return total

    return matvec


def smoothing_data(center: _V, sums: _V, xp: ModuleType = jnp) -> tuple[_V, _V]:
    """``(1 / diag, rho)``: the inverse diagonal and Gershgorin's bound on ``D^-1 A``
    (``xp``: ``jax.numpy``, or ``numpy`` for host arrays)."""
    inverse = 1 / center
    return inverse, xp.max(sums * xp.abs(inverse))


def gershgorin(A: DiaParts) -> tuple[Array, Array]:
    """``(1 / diag(A), bound)`` for one square matrix: ``bound`` is the largest absolute
    row sum of ``D^-1 A``, which bounds the modulus of its eigenvalues."""
    data, offsets, shape = A
    n = shape[0]
    inside = in_bounds(offsets, shape)
    magnitudes = jnp.where(inside, jnp.abs(data), 0)
    # Row i of diagonal k sits in column i + offset: shift each row of data back by it.
    rows = row_sums([by_rows(magnitudes[k], offset) for k, offset in enumerate(offsets)])
    diagonal = data[offsets.index(0)] if 0 in offsets else jnp.zeros((n,), data.dtype)
    return smoothing_data(diagonal, rows)


#: The Chebyshev smoother damps ``[CHEBYSHEV_LOWER[dim] * rho, rho]`` of the spectrum of
#: ``D^-1 A``; the damped Jacobi smoother's weight is ``JACOBI_WEIGHT / rho``. For the
#: 3-, 5- and 7-point Laplacians ``rho`` is 2 and the modes that linear interpolation
#: cannot represent lie above ``2 / dim``; the fractions were tuned on 1-D, 2-D and 3-D
#: Poisson, jumping coefficients and convection-diffusion (benchmarks/notes/preconditioners.md).
CHEBYSHEV_LOWER = {1: 1 / 3, 2: 1 / 6, 3: 1 / 6}


JACOBI_WEIGHT = 1.6


SMOOTHERS = ("chebyshev", "jacobi")


def smooth(
    kind: str,
    sweeps: int,
    dim: int,
    A: DiaParts | Callable[[Array], Array],
    inverse_diagonal: Array,
    rho: Array,
    b: Array,
    x: Array | None,
    residual: bool,
) -> tuple[Array, Array | None]:
    """One smoothing of ``A x = b`` (``x`` None: from zero); ``A`` a matrix's parts or
    its product ``v -> A v`` (a sharded level's)."""
    matvec = A if callable(A) else dia_matvec(A)

    def scale(v):
        return inverse_diagonal * v

    if kind == "jacobi":
        return jacobi_steps(matvec, scale, b, x, JACOBI_WEIGHT / rho, sweeps, residual)
    return chebyshev_steps_by_ratio(
        matvec, scale, b, x, rho, CHEBYSHEV_LOWER[dim], sweeps, residual
    )


# -- what the preconditioners ask of A -------------------------------------------------------


def is_operator(A: object) -> bool:
    """Whether ``A`` is an operator other than a DiaMatrix with ``@``, ``shape`` and
    ``diagonal()`` (a :class:`jaxdia.ShardedDiaMatrix`), as :func:`jaxdia.jacobi` and
    :func:`jaxdia.chebyshev` take."""
    return (
        callable(getattr(A, "diagonal", None))
        and hasattr(A, "__matmul__")
        and hasattr(A, "shape")
        and not isinstance(A, (np.ndarray, jax.Array))
    )


def check_diagonal(
    function: str, A: DiaMatrix | ShardedDiaMatrix, host: np.ndarray | None = None
) -> None:
    """A ValueError naming the zeros of a concrete diagonal (the smoothers divide by it;
    ``host``: A's data on the host, read instead of a slice of ``A.data``)."""
    if 0 not in A.offsets:
        raise ValueError(
            f"{function}: A stores no main diagonal (offsets {A.offsets}); its smoother "
            "divides by the diagonal, which must be nonzero"
        )
    if isinstance(A, ShardedDiaMatrix):  # laid out like its vectors, 1 in padding rows
        check_nonzero_diagonal(A.diagonal(), function, "")
        return
    data = A.data if host is None else host.reshape(A.data.shape)
    check_nonzero_diagonal(data[..., A.offsets.index(0), :], function, "")
