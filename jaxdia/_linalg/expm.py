"""The action of the matrix exponential, ``exp(t A) B``: :func:`expm_multiply`.

The algorithm is SciPy's ``scipy.sparse.linalg.expm_multiply`` (Al-Mohy & Higham 2011,
"Computing the action of the matrix exponential"): shift ``A`` by ``mu = trace(A) / n``,
choose the Taylor degree ``m`` and the number of substeps ``s`` from 1-norms of powers
of ``A`` (code fragment 3.1, with SciPy's table of ``theta_m``), then take ``s`` substeps
of a truncated Taylor series that stops early once two consecutive terms are negligible.
A grid of times is algorithm 5.2, with SciPy's cases (``q <= s``: one step per point;
otherwise blocks of points that share their Taylor terms).

The work is split by concern, each module saying where it differs from SciPy:

* ``expm_norms``: the 1-norms of ``A`` and its powers (exact for a DiaMatrix, estimated
  as SciPy's ``onenormest`` for other operators and scattered offsets) and the choice of
  ``(m, s)`` (SciPy's ``LazyOperatorNormInfo``, ``_fragment_3_1``);
* ``expm_taylor``: the Taylor stepping and the time grid (SciPy's
  ``_expm_multiply_simple_core`` and ``_expm_multiply_interval_core_*``), for any
  product;
* ``expm_gradients``: a DiaMatrix's evolution as a ``jax.custom_vjp`` (cotangents
  w.r.t. ``B``, the stored diagonals, ``start`` and ``stop``);
* ``expm_operators``: any other operator (SciPy's ``LinearOperator``, dense and sparse
  matrices, lineax operators, functions), with SciPy's estimates of its trace and norms;
* this module: the arguments, checked, and the public function.
"""

from __future__ import annotations

import math
import sys
import warnings
from functools import partial
from typing import Any

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import as_array, check_rhs, converted, is_scipy_sparse, scalar, static_int
from .._geometry import accumulation_dtype
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from .._typing import ArrayLike, OperatorLike, Scalar
from . import expm_operators
from .expm_gradients import Config, evolve
from .operators import as_operator, matrix_of

#: What a complex time should be instead (the hint of its TypeError).
_COMPLEX_TIME = "; fold a complex factor into A (e.g. expm_multiply(-1j * H, psi, start=0, stop=T))"
#: SciPy's estimates of the trace (Hutch++'s ``m3``): for one time and for a grid.
TRACE_SAMPLES = {False: 1, True: 5}


# -- the arguments ---------------------------------------------------------------------------


def _time_grid(
    start: Scalar | None, stop: Scalar | None, num: int | None, endpoint: bool | None
) -> tuple[bool, Any, Any, int, np.ndarray]:
    """``(grid, start, stop, num, divisions)``: the checked time grid (``grid`` False: the
    single time 1), its step ``(stop - start) / divisions``."""
    grid = any(value is not None for value in (start, stop, num, endpoint))
    if not grid:
        zero = np.zeros((), np.float32)
        return False, zero, zero, 1, np.ones((), np.float32)
    if start is None or stop is None:
        raise TypeError(
            "expm_multiply: a time grid needs both start and stop (as numpy.linspace); "
            f"got start={start!r}, stop={stop!r}"
        )
    num = 50 if num is None else static_int(num, "expm_multiply: num")
    if num < 2:
        raise ValueError(f"expm_multiply: at least two time points are required, got num={num}")
    if endpoint is None:
        endpoint = True
    if isinstance(endpoint, jax.core.Tracer) or not isinstance(endpoint, (bool, np.bool_)):
        raise TypeError(
            f"expm_multiply: endpoint must be a Python bool, got {type(endpoint).__name__}"
        )
    start, stop = (
        scalar(time, f"expm_multiply: {name}", hint=_COMPLEX_TIME)
        for time, name in ((start, "start"), (stop, "stop"))
    )
    return True, start, stop, num, np.asarray(num - 1 if endpoint else num, np.float32)


def _trace(traceA: ArrayLike | None, batch: tuple[int, ...]) -> Any:
    """``traceA`` checked: a scalar, or an array that broadcasts to the batch shape."""
    if traceA is None:
        return np.zeros((), np.float32)
    traceA = as_array(traceA, "expm_multiply: traceA", expected="a scalar")
    try:
        if np.ndim(traceA) > len(batch):
            raise ValueError
        np.broadcast_to(np.empty(np.shape(traceA)), batch)
    except ValueError:
        raise ValueError(
            f"expm_multiply: traceA must be a scalar (or broadcast to the batch shape "
            f"{batch}), got shape {np.shape(traceA)}"
        ) from None
    return traceA


def _in_work_dtype(
    matrix: Any, B: Any, traceA: Any, start: Any, stop: Any, divisions: Any
) -> tuple[np.dtype, np.dtype, tuple[Any, ...]]:
    """``(dtype, work, operands)``: the result's dtype (``matrix``'s, an array or a dtype,
    promoted with ``B``'s; at least a float), the dtype of the work, and ``B``,
    ``traceA``, ``start``, ``stop``, ``divisions`` converted to it (the times to its real
    dtype) before the compiled call, whose program then depends on the work's dtype only."""
    dtype = jnp.result_type(matrix, B, float)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = jnp.result_type(float)
    work = accumulation_dtype(dtype)
    real = np.finfo(work).dtype
    times = tuple(converted(x, real) for x in (start, stop, divisions))
    return np.dtype(dtype), work, (converted(B, work), converted(traceA, work), *times)


# -- a DiaMatrix -----------------------------------------------------------------------------


def _exponential_action(
    A: DiaParts,
    B: ArrayLike,
    *,
    start: Scalar | None = None,
    stop: Scalar | None = None,
    num: int | None = None,
    endpoint: bool | None = None,
    traceA: ArrayLike | None = None,
) -> Array:
    """``exp(A) B``, or ``exp(t_k A) B`` on a time grid, for a square ``A`` (see
    :func:`expm_multiply`)."""
    n = A.shape[0]
    B, batch = check_rhs("expm_multiply", n, A.batch_shape, B, A.dtype, name="B")
    grid, start, stop, num, divisions = _time_grid(start, stop, num, endpoint)
    given = traceA is not None
    traceA = _trace(traceA, batch)
    dtype, work, operands = _in_work_dtype(A.data, B, traceA, start, stop, divisions)
    config = Config(A.offsets, n, grid, num)
    X = _run(
        converted(A.data, work),
        *operands,
        config=config,
        batch=batch,
        trace_given=given,
    )
    return converted(X, dtype)


@partial(jax.jit, static_argnames=("config", "batch", "trace_given"))
def _run(data, B, trace, start, stop, divisions, *, config: Config, batch, trace_given):
    """:func:`expm_multiply` for checked operands, converted to the dtype of the work
    (``B``'s; times real), as one compiled call; a batch is flattened and mapped with
    ``vmap``."""
    work = B.dtype
    vector = B.ndim == 1
    if vector:
        B = B[:, None]
    if not trace_given:
        trace = (
            jnp.sum(data[..., config.offsets.index(0), :], axis=-1)
            if 0 in config.offsets
            else jnp.zeros(data.shape[:-2], work)
        )
    size = math.prod(batch)
    data = jnp.broadcast_to(data, (*batch, *data.shape[-2:])).reshape(size, *data.shape[-2:])
    B = jnp.broadcast_to(B, (*batch, *B.shape[-2:])).reshape(size, *B.shape[-2:])
    trace = jnp.broadcast_to(trace, batch).reshape(size)
    one_column = B.shape[-1] == 1  # kept 1-D inside (see jaxdia._products.matvec)
    if one_column:
        B = B[..., 0]
    if config.n == 0:
        X = jnp.zeros((size, *((config.num,) if config.grid else ()), *B.shape[1:]), work)
    elif batch:
        X = jax.vmap(lambda d, b, tr: evolve(config, d, b, tr, start, stop, divisions))(
            data, B, trace
        )
    else:
        X = jnp.asarray(evolve(config, data[0], B[0], trace[0], start, stop, divisions))[None]
    if one_column:
        X = X[..., None]
    X = X.reshape(*batch, *X.shape[1:])
    return X[..., 0] if vector else X


# -- any other operator ----------------------------------------------------------------------


def _scipy_operator(A: object) -> bool:
    """Whether ``A`` is what SciPy's ``expm_multiply`` treats as a ``LinearOperator``
    (a ``LinearOperator``, or an object with ``shape`` and ``matvec`` that
    ``aslinearoperator`` wraps and ``as_operator`` does not take as a function), whose
    trace it estimates."""
    linalg = sys.modules.get("scipy.sparse.linalg")
    if linalg is not None and isinstance(A, linalg.LinearOperator):
        return True
    plain = not (callable(A) or hasattr(A, "__matmul__") or is_scipy_sparse(A))
    return plain and hasattr(A, "shape") and hasattr(A, "matvec")


def _operator_action(
    original: Any,
    operator: Any,
    n: int | None,
    operator_dtype: np.dtype | None,
    B: ArrayLike,
    *,
    start: Scalar | None,
    stop: Scalar | None,
    num: int | None,
    endpoint: bool | None,
    traceA: ArrayLike | None,
) -> Array:
    """:func:`expm_multiply` of ``original``, sorted by ``as_operator`` into ``operator``
    (of size ``n`` and dtype ``operator_dtype``, None for a function)."""
    stacked = n is not None and operator_dtype is not None  # functions of stacks of vectors
    if n is None or operator_dtype is None:  # a function of one vector
        if not callable(operator):
            raise TypeError(
                "expm_multiply: A must be a DiaMatrix, a dense or scipy.sparse matrix, a "
                "scipy.sparse.linalg.LinearOperator, a lineax operator or a function v -> A v "
                f"written in JAX, got {type(original).__name__}"
                + (" (pass A.to_dia())" if hasattr(original, "to_dia") else "")
            )
        operator, n, operator_dtype = _function(operator, B)
    if expm_operators.host_without_adjoint(operator, n):
        raise TypeError(
            "expm_multiply: A is a LinearOperator without rmatvec or rmatmat, and "
            "expm_multiply estimates the 1-norms of A's powers as SciPy's onenormest does, "
            "with products by A^H (SciPy's expm_multiply fails on it too). Give the "
            "LinearOperator an rmatvec, or pass its matrix or a function written in JAX."
        )
    B, batch = check_rhs("expm_multiply", n, (), B, operator_dtype, name="B")
    grid, start, stop, num, divisions = _time_grid(start, stop, num, endpoint)
    samples = 0
    if traceA is None:
        matrix = matrix_of(operator)
        if matrix is not None and not _scipy_operator(original):  # exact, as SciPy's
            traceA = original.trace() if is_scipy_sparse(original) else jnp.trace(matrix)
        else:
            samples = TRACE_SAMPLES[grid]
            what = (
                "Trace of LinearOperator not available"
                if _scipy_operator(original)
                else f"The trace of A (a {type(original).__name__}) is not available"
            )
            warnings.warn(
                f"expm_multiply: {what}, it will be estimated (from {3 * samples} products "
                "with A, as SciPy's traceest). Provide `traceA` to ensure performance.",
                UserWarning,
                stacklevel=3,
            )
    traceA = _trace(traceA, batch)
    dtype, _, operands = _in_work_dtype(operator_dtype, B, traceA, start, stop, divisions)
    config = expm_operators.Config(n, grid, num, stacked, samples, None)
    X = expm_operators.run(
        operator,
        *operands,
        config=config,
        batch=batch,
    )
    return converted(X, dtype)


def _function(f: Any, B: ArrayLike) -> tuple[Any, int, np.dtype]:
    """A function ``v -> A v`` as a pytree (a ``Partial`` of a plain function), its size
    (``B``'s) and the dtype of its products."""
    B = as_array(B, "expm_multiply: B")
    if B.ndim == 0:
        raise ValueError("expm_multiply: B must have shape (n,) or (..., n, k), got shape ()")
    n = B.shape[0] if B.ndim == 1 else B.shape[-2]
    inexact = B.dtype if np.dtype(B.dtype).kind in "fc" else jnp.result_type(float)
    try:
        out = jax.eval_shape(f, jax.ShapeDtypeStruct((n,), inexact))
    except Exception as error:
        raise TypeError(
            f"expm_multiply: A (a function) must map a vector of shape ({n},) to one of the "
            f"same shape, written in JAX; applying it failed: {error}"
        ) from error
    if not isinstance(out, jax.ShapeDtypeStruct) or out.shape != (n,):
        raise ValueError(
            f"expm_multiply: A (a function) must map a vector of shape ({n},) to one of the "
            f"same shape, got {out}"
        )
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(f)):
        f = jax.tree_util.Partial(f)
    return f, n, np.dtype(out.dtype)


# -- the public function ---------------------------------------------------------------------


def expm_multiply(
    A: DiaMatrix | OperatorLike,
    B: ArrayLike,
    *,
    start: Scalar | None = None,
    stop: Scalar | None = None,
    num: int | None = None,
    endpoint: bool | None = None,
    traceA: ArrayLike | None = None,
) -> Array:
    """The action of the matrix exponential, ``exp(A) @ B``, as SciPy's ``expm_multiply``.

    Without ``start``/``stop``/``num``/``endpoint`` it returns ``exp(A) @ B``; with them,
    ``exp(t_k A) @ B`` at the times ``numpy.linspace(start, stop, num, endpoint)``
    (``num`` defaults to 50, ``endpoint`` to True), stacked on a new leading axis. The
    algorithm is SciPy's (Al-Mohy & Higham 2011): ``A`` shifted by ``trace(A) / n``
    (``traceA`` overrides the trace), a Taylor degree ``m`` and ``s`` substeps chosen
    from 1-norms of powers of ``A`` with SciPy's table and code fragment 3.1, and
    Taylor series stopped once two terms are negligible; a time grid reuses Taylor terms
    across points (algorithm 5.2). The norms of a DIA matrix are exact (column sums of
    ``|A^p|``, from the DIA powers ``A^p``), where SciPy estimates them; the results
    agree with SciPy's to rounding.

    For the Schrödinger equation pass ``-1j * H`` (and ``start``/``stop`` for the times,
    or ``-1j * t * H``); a real ``A`` with a complex ``B`` works too.

    ``A`` may also be any operator SciPy's takes: a dense or ``scipy.sparse`` matrix, a
    ``scipy.sparse.linalg.LinearOperator`` (or anything ``aslinearoperator`` takes), a
    lineax operator, or a function ``v -> A v`` on vectors of shape ``(n,)`` written in
    JAX (applied to ``B``'s columns by ``vmap``). Their products run in the compiled
    call, except a ``LinearOperator`` written in NumPy: its ``matmat`` (``rmatmat`` for
    ``A^H``) runs on the host through ``jax.pure_callback``, a host round trip per
    product (on a GPU or TPU a synchronization too), eagerly, under ``jit`` and under
    ``vmap``. As SciPy does for an operator, the norms of ``A``'s powers are estimated
    (Higham and Tisseur's block 1-norm estimator, SciPy's ``onenormest``, which needs
    products with ``A^H``: a ``LinearOperator`` without ``rmatvec``/``rmatmat`` is a
    ``TypeError``, as SciPy fails on it, unless ``n <= 2``), ``||A||_1`` too unless
    ``A`` is a dense or sparse matrix, and without ``traceA`` the trace is estimated
    from 3 products (15 on a time grid; SciPy's ``traceest``, with fixed signs) with
    SciPy's ``UserWarning``, except for a dense or sparse matrix, whose trace is exact.

    ``(m, s)`` depend on the values of ``A``, so the loops are ``lax.while_loop``: the
    call works under ``jit`` and ``vmap`` (each member of a batch gets its own
    parameters). Reverse-mode differentiation (``grad``, ``vjp``) w.r.t. ``A.data``,
    ``B``, ``start`` and ``stop`` is a custom rule: ``exp(A)^T G`` for ``B``, and for
    ``A.data`` the integral ``int_0^1 exp((1 - r) A)^T G (exp(r A) B)^T dr`` on the
    stored diagonals by Gauss-Legendre quadrature on short panels (exact to rounding;
    at most 4096 panels of ``||t A||_1 <= 3.54`` per time step, beyond which the
    gradient is NaN). For an operator that is not a DiaMatrix, gradients w.r.t. ``B``,
    ``start`` and ``stop`` (``exp(A)^T G`` by the same algorithm on the transposed
    products); w.r.t. the operator's own arrays, or through a ``LinearOperator`` on the
    host, a ``TypeError``. Forward mode (``jvp``, ``jacfwd``) is not available.

    Batches follow :func:`jaxdia.solve_banded`: a 1-D ``B`` of length ``n`` is a vector,
    an N-D ``B`` a stack of ``(n, c)`` blocks whose batch dims broadcast with
    ``A.batch_shape``; the result has the batch dims first, then SciPy's shape.

    Args:
      A: a square DiaMatrix (possibly batched), or an operator as above.
      B: a vector ``(n,)`` or a block ``(..., n, c)``.
      start: the first time of a grid (a real scalar; may be traced).
      stop: the last time of the grid (excluded if ``endpoint=False``).
      num: the number of times, at least 2 (static).
      endpoint: whether ``stop`` is the last time (a Python bool).
      traceA: ``trace(A)``, used only to shift ``A`` (a scalar, or one per member of a
        batch; default: computed exactly for a DiaMatrix, a dense or a sparse matrix,
        estimated with a warning for other operators).

    Returns:
      ``exp(A) @ B``, of ``B``'s shape (batch dims broadcast), or ``(num, *B.shape)`` on
      a time grid; in the promoted dtype of ``A`` and ``B`` (16-bit floats computed in
      float32 and cast back).

    Raises:
      TypeError: if ``A`` is none of the operators above (or a LinearOperator without
        ``rmatvec``/``rmatmat``), holds long doubles, ``B`` is not numeric, ``num`` is
        not a static int, ``endpoint`` not a bool, a time is complex, or a grid lacks
        ``start`` or ``stop``; when differentiating w.r.t. an operator's arrays or
        through a host operator.
      ValueError: if ``A`` is not square, ``B``'s shape does not fit, ``num < 2``, or a
        time or ``traceA`` is not a scalar.

    Warns:
      UserWarning: if ``A`` is an operator whose trace is estimated (``traceA`` not
        given; not for a DiaMatrix, a dense or a sparse matrix), as SciPy warns.

    Example:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> u = jaxdia.expm_multiply(0.5 * A, jnp.ones(50))
      >>> exact = jax.scipy.linalg.expm(0.5 * A.todense()) @ jnp.ones(50)
      >>> bool(jnp.allclose(u, exact, atol=1e-5))
      True
      >>> jaxdia.expm_multiply(-1j * A, jnp.ones(50), start=0, stop=1, num=5).shape
      (5, 50)

      Any operator SciPy takes, e.g. a function written in JAX (its trace given):

      >>> def laplacian(v):
      ...     return jnp.roll(v, 1) - 2 * v + jnp.roll(v, -1)
      >>> w = jaxdia.expm_multiply(laplacian, jnp.ones(50), traceA=-100.0)
      >>> bool(jnp.allclose(w, jnp.ones(50), atol=1e-6))
      True
    """
    if not isinstance(A, DiaMatrix):
        operator, n, dtype = as_operator(A, "expm_multiply", "A")
        if not isinstance(operator, DiaMatrix):
            return _operator_action(
                A,
                operator,
                n,
                dtype,
                B,
                start=start,
                stop=stop,
                num=num,
                endpoint=endpoint,
                traceA=traceA,
            )
        A = operator
    A = as_square_matrix(A, "expm_multiply")
    return _exponential_action(
        A._parts, B, start=start, stop=stop, num=num, endpoint=endpoint, traceA=traceA
    )
