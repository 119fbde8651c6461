"""The Jacobian of a :func:`jaxdia.solve_ivp` problem as a :class:`jaxdia.DiaMatrix`, in
every form SciPy's ``solve_ivp`` takes it.

- No ``jac``: the diagonals are ``jac_offsets`` (with ``jac_mask``), or SciPy's
  ``jac_sparsity`` read into offsets and a mask on the host, or every diagonal for a
  small system. A right-hand side in ``jax.numpy`` is differentiated by
  :func:`jaxdia.jacobian` (one product per colour); one written in NumPy gets SciPy's
  finite differences on those diagonals, on the host (:mod:`jaxdia._ivp_host`).
- ``jac`` a matrix (a ``DiaMatrix``, a dense array, a ``scipy.sparse`` matrix): a
  constant Jacobian, never recomputed (SciPy's ``njev`` 0).
- ``jac`` a function: one that returns a ``DiaMatrix`` is traced into the program; one
  that returns a dense array in ``jax.numpy`` is read on ``jac_offsets`` (every diagonal
  without them, for a small system) in the program; one written in NumPy (or returning
  a ``scipy.sparse`` matrix) runs on the host, its value read into the data of those
  diagonals there.

Every Jacobian is outside differentiation (``stop_gradient`` of ``t`` and ``y``): the
Newton matrix is held fixed by forward-mode derivatives.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, cast

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from ._checks import is_scipy_sparse, is_traced
from ._colouring import Pattern, column_colouring
from ._ivp_host import HostArgs, HostCall, banded_num_jac, dia_data, needs_values
from ._jacobian import jacobian as banded_jacobian, pattern
from ._matrix import DiaMatrix
from ._parts import DiaParts
from ._typing import ArrayLike, Offsets

#: Without a band (``jac_offsets``, ``jac_sparsity``) or ``jac`` the Jacobian is the
#: whole matrix: for small systems.
DENSE_LIMIT = 1024


class Jacobian(NamedTuple):
    """``evaluate(t, y, threshold)``: the Jacobian at ``(t, y)`` (``threshold``: SciPy's
    ``atol``, the floor of ``|y|`` in a finite-difference step); ``placeholder(t, y)``:
    zeros of its structure (without tracing ``evaluate`` again); ``constant``: a matrix
    given once."""

    evaluate: Callable[[Array, Array, Array], DiaMatrix]
    placeholder: Callable[[Array, Array], DiaMatrix]
    constant: bool


def sparsity_pattern(jac_sparsity: Any, n: int) -> tuple[tuple[int, ...], np.ndarray]:
    """SciPy's ``jac_sparsity`` (an ``(n, n)`` array or ``scipy.sparse`` matrix whose
    nonzeros may be nonzero in the Jacobian) as ``(offsets, mask)`` in DIA layout."""
    if is_traced(jac_sparsity):
        raise TypeError("solve_ivp: jac_sparsity must be concrete (it fixes the program)")
    if is_scipy_sparse(jac_sparsity):
        coo = jac_sparsity.tocoo()
        keep = coo.data != 0
        rows, cols, shape = coo.row[keep], coo.col[keep], coo.shape
    else:
        dense = np.asarray(jac_sparsity)
        shape = dense.shape
        rows, cols = np.nonzero(dense) if dense.ndim == 2 else (np.zeros(0), np.zeros(0))
    if shape != (n, n):
        raise ValueError(f"solve_ivp: jac_sparsity must have shape ({n}, {n}), got {shape}")
    rows, cols = np.asarray(rows, np.int64), np.asarray(cols, np.int64)
    offsets = np.unique(cols - rows)
    if offsets.size == 0:
        return (0,), np.zeros((1, n), bool)
    mask = np.zeros((offsets.size, n), bool)
    mask[np.searchsorted(offsets, cols - rows), cols] = True
    return tuple(int(k) for k in offsets), mask


def band(
    jac_offsets: Offsets | None, jac_mask: ArrayLike | None, jac_sparsity: Any, n: int
) -> Pattern | None:
    """The band the arguments give (None for none): ``jac_offsets`` with ``jac_mask``,
    or ``jac_sparsity``."""
    if jac_sparsity is not None:
        if jac_offsets is not None or jac_mask is not None:
            raise ValueError("solve_ivp: give jac_sparsity, or jac_offsets (and jac_mask)")
        offsets, mask = sparsity_pattern(jac_sparsity, n)
        return pattern(offsets, (n, n), mask, "solve_ivp")
    if jac_offsets is None:
        if jac_mask is not None:
            raise ValueError("solve_ivp: jac_mask needs jac_offsets")
        return None
    offsets = tuple(int(k) for k in np.atleast_1d(np.asarray(jac_offsets)))
    return pattern(offsets, (n, n), jac_mask, "solve_ivp")


def _whole(given: Pattern | None, n: int, what: str) -> Pattern:
    """``given``, or every diagonal of a small system."""
    if given is not None:
        return given
    if n > DENSE_LIMIT:
        raise ValueError(
            f"solve_ivp: give jac_offsets (the Jacobian's diagonals), jac_sparsity or a jac "
            f"returning a DiaMatrix for a system of n = {n} > {DENSE_LIMIT} equations; "
            f"without them {what} would be the whole matrix"
        )
    return pattern(range(-(n - 1), n), (n, n), None, "solve_ivp")


def _zeros(stored: Pattern, dtype: np.dtype) -> Callable[[Array, Array], DiaMatrix]:
    def placeholder(t: Array, y: Array) -> DiaMatrix:
        n = stored.shape[0]
        zeros = jnp.zeros((len(stored.offsets), n), dtype)
        return DiaMatrix._wrap(DiaParts(zeros, stored.offsets, (n, n)))

    return placeholder


def _held(evaluate: Callable[..., DiaMatrix]) -> Callable[..., DiaMatrix]:
    """``evaluate`` outside differentiation."""

    def held(t: Array, y: Array, threshold: Array) -> DiaMatrix:
        J = evaluate(*jax.lax.stop_gradient((t, y, threshold)))
        return jax.lax.stop_gradient(J)

    return held


def constant_matrix(jac: Any, given: Pattern | None, n: int) -> DiaMatrix:
    """A matrix ``jac`` (a ``DiaMatrix``, a dense array, a ``scipy.sparse`` matrix) as a
    ``DiaMatrix`` of shape ``(n, n)``, in its own dtype: an operand of the program."""
    if given is not None:
        raise ValueError("solve_ivp: give jac, or jac_offsets (and jac_mask), not both")
    if isinstance(jac, DiaMatrix):
        J = jac
    elif is_scipy_sparse(jac):
        J = DiaMatrix.from_scipy(jac)
    elif is_traced(jac):
        J = DiaMatrix.from_dense(jnp.asarray(jac), _whole(None, n, "jac").offsets)
    else:
        J = DiaMatrix.from_dense(np.asarray(jac))
    if J.shape != (n, n) or J.batch_shape:
        raise ValueError(
            f"solve_ivp: jac must be one matrix of shape ({n}, {n}), got shape "
            f"{J.batch_shape + J.shape}"
        )
    return J


def _constant(matrix: DiaMatrix, dtype: np.dtype) -> Jacobian:
    """The Jacobian of :func:`constant_matrix`, never recomputed."""
    J = matrix.astype(dtype)

    def evaluate(t: Array, y: Array, threshold: Array) -> DiaMatrix:
        return J

    def placeholder(t: Array, y: Array) -> DiaMatrix:
        return J

    return Jacobian(evaluate, placeholder, constant=True)


def _probe_jac(jac: Callable[..., Any], n: int, real: np.dtype, dtype: np.dtype) -> Any:
    """What ``jac`` returns when traced: a ``DiaMatrix`` or an array's shape, or None
    when it must run on the host (it does not trace, or returns a NumPy or SciPy value)."""
    seen: dict[str, Any] = {}

    def probe(t: Array, y: Array) -> Any:
        out = jac(t, y)
        seen["traced"] = any(is_traced(leaf) for leaf in jax.tree.leaves(out))
        seen["matrix"] = isinstance(out, DiaMatrix)
        if is_scipy_sparse(out):
            seen["traced"] = False
            return jnp.zeros(())
        if isinstance(out, DiaMatrix):
            return out
        try:
            return jnp.asarray(out)
        except (TypeError, ValueError):
            raise TypeError(
                "solve_ivp: jac must return a jaxdia.DiaMatrix, a dense matrix or a "
                f"scipy.sparse matrix, got {type(out).__name__}"
            ) from None

    t_shape, y_shape = jax.ShapeDtypeStruct((), real), jax.ShapeDtypeStruct((n,), dtype)
    try:
        out = jax.eval_shape(probe, t_shape, y_shape)
    except Exception as error:
        if needs_values(error):
            return None
        raise
    if seen["matrix"]:
        return out
    return out if seen["traced"] else None


def jacobian_of(
    jax_rhs: Callable[[Array, Array], Array] | None,
    host_rhs: tuple[Callable[..., np.ndarray], Callable[..., np.ndarray]] | None,
    jac: Any,
    given: Pattern | None,
    n: int,
    args: tuple[Any, ...],
    dtype: np.dtype,
) -> Jacobian:
    """The problem's :class:`Jacobian`: of ``jax_rhs`` (``fun`` in ``jax.numpy``) or of
    ``host_rhs`` (``fun`` in NumPy: SciPy's ``fun_single`` and ``fun_vectorized``), or
    from ``jac`` (a function, or the ``DiaMatrix`` of :func:`constant_matrix`);
    ``given`` is the band of the arguments (:func:`band`)."""
    real = np.dtype(np.finfo(dtype).dtype)
    host_args = HostArgs(args)
    if isinstance(jac, DiaMatrix):
        return _constant(jac, dtype)
    if jac is None:
        stored = _whole(given, n, "the Jacobian")
        if jax_rhs is not None:
            rhs = jax_rhs
            mask = stored.mask

            def differentiate(t: Array, y: Array, threshold: Array) -> DiaMatrix:
                J = banded_jacobian(lambda v: rhs(t, v), stored.offsets, mask=mask)(y)
                return cast(DiaMatrix, J)

            return Jacobian(_held(differentiate), _zeros(stored, dtype), constant=False)
        assert host_rhs is not None
        single, columns = host_rhs
        colours = column_colouring(stored).host(n)

        def num_jac(t: Any, y: np.ndarray, threshold: np.ndarray, args: tuple) -> np.ndarray:
            f = single(t, y, args)
            return banded_num_jac(
                lambda s, Y: columns(s, Y, args),
                t,
                y,
                f,
                threshold,
                stored.offsets,
                stored.slots,
                colours,
            )

        return _on_host(num_jac, stored, host_args, n, dtype)
    user_jac = jac
    out = _probe_jac(lambda t, y: user_jac(t, y, *args), n, real, dtype)
    if isinstance(out, DiaMatrix):
        if given is not None:
            raise ValueError("solve_ivp: give jac, or jac_offsets (and jac_mask), not both")

        def evaluate(t: Array, y: Array, threshold: Array) -> DiaMatrix:
            J = cast(DiaMatrix, user_jac(t, y, *args))
            if J.shape != (n, n) or J.batch_shape:
                raise TypeError(
                    f"solve_ivp: jac must return a jaxdia.DiaMatrix of shape ({n}, {n}), got "
                    f"shape {J.batch_shape + J.shape}"
                )
            return J.astype(dtype)

        def placeholder(t: Array, y: Array) -> DiaMatrix:
            shapes = jax.eval_shape(_held(evaluate), t, y, jnp.zeros((), real))
            return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

        return Jacobian(_held(evaluate), placeholder, constant=False)
    stored = _whole(given, n, "jac's matrix")
    if out is not None:
        if out.shape != (n, n):
            raise TypeError(
                f"solve_ivp: jac must return a jaxdia.DiaMatrix or an ({n}, {n}) matrix, got "
                f"shape {out.shape}"
            )

        def read(t: Array, y: Array, threshold: Array) -> DiaMatrix:
            dense = jnp.asarray(user_jac(t, y, *args)).astype(dtype)
            return DiaMatrix.from_dense(dense, stored.offsets)

        return Jacobian(_held(read), _zeros(stored, dtype), constant=False)

    def on_host(t: Any, y: np.ndarray, threshold: np.ndarray, args: tuple) -> np.ndarray:
        return dia_data(user_jac(t, y, *args), stored.offsets, n, dtype)

    return _on_host(on_host, stored, host_args, n, dtype)


def _on_host(
    evaluate: Callable[..., np.ndarray],
    stored: Pattern,
    host_args: HostArgs,
    n: int,
    dtype: np.dtype,
) -> Jacobian:
    """A Jacobian whose data ``evaluate(t, y, threshold, args)`` computes on the host."""
    result = jax.ShapeDtypeStruct((len(stored.offsets), n), dtype)
    call = HostCall(evaluate, result, host_args, "jac")

    def jacobian(t: Array, y: Array, threshold: Array) -> DiaMatrix:
        data = call(t, y, jnp.broadcast_to(threshold, (n,)))
        return DiaMatrix._wrap(DiaParts(data, stored.offsets, (n, n)))

    return Jacobian(_held(jacobian), _zeros(stored, dtype), constant=False)
