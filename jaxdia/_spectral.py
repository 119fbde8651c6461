"""Public spectral functions of a DiaMatrix: :func:`eigsh` and :func:`expm_multiply`,
SciPy's ``scipy.sparse.linalg`` names, computed by :mod:`jaxdia._lanczos` and
:mod:`jaxdia._expm`."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.core
import numpy as np
from jax import Array

from . import _expm, _lanczos
from ._linalg import square
from ._matrix import DiaMatrix


def _reject(name: str, value: Any, why: str) -> None:
    if value is not None:
        raise NotImplementedError(f"eigsh: {name} is not supported ({why}); got {value!r}")


def eigsh(
    A: DiaMatrix,
    k: int = 6,
    M: Any = None,
    sigma: Any = None,
    which: str = "LM",
    v0: Any = None,
    ncv: int | None = None,
    maxiter: int | None = None,
    tol: Any = 0.0,
    return_eigenvectors: bool = True,
    Minv: Any = None,
    OPinv: Any = None,
    mode: str = "normal",
    *,
    return_info: bool = False,
) -> Any:
    """``k`` eigenvalues and eigenvectors of a Hermitian DiaMatrix, as SciPy's ``eigsh``.

    The same arguments and results as ``scipy.sparse.linalg.eigsh`` for a standard
    problem: ``which`` picks the eigenvalues of largest (``"LM"``) or smallest (``"SM"``)
    magnitude, largest (``"LA"``) or smallest (``"SA"``) value, or half from each end
    (``"BE"``); with ``sigma`` it is shift-invert mode (SciPy's ``mode="normal"``):
    ``which`` then applies to ``nu = 1 / (lambda - sigma)``, so the default ``"LM"``
    finds the eigenvalues nearest ``sigma``, the fast way to the bottom of a spectrum.
    Eigenvalues come back in ascending order and eigenvectors as the columns of ``v``,
    normalized (their sign or complex phase is arbitrary, as in SciPy).

    The solver is thick-restart Lanczos (Krylov-Schur) with full reorthogonalization and
    ARPACK's convergence test, ``||A v - lambda v|| <= tol * |lambda|`` estimated from the
    Krylov relation (``tol=0``: machine precision). ``ncv`` basis vectors (default
    ``min(n, max(2k + 1, 20))``) live in fixed buffers inside a ``lax.while_loop``, so
    the call works under ``jit`` and ``vmap`` (a batch of matrices runs until its slowest
    member has converged). Shift-invert applies ``(A - sigma I)^{-1}`` with the banded
    solver of :func:`jaxdia.solve_banded`, which factors ``A - sigma I`` again on every
    iteration (cheap for tridiagonal matrices, O(n l (l + u)) per step otherwise).
    Matrices with ``n <= 128``, or ``ncv > n / 2`` (``k`` close to ``n``), are solved
    densely with ``jnp.linalg.eigh``. Any ``1 <= k < n`` works.

    Convergence is not an exception (none can be raised under ``jit``): pass
    ``return_info=True`` for a last value ``info``, a named tuple (a pytree, batched like
    ``w``) of ``converged`` (all ``k`` pairs passed the test; always true on the dense
    path), ``nconv`` (how many did), ``iterations`` (restarts), ``matvecs``
    (applications of ``A`` or ``(A - sigma I)^{-1}``) and ``residuals``
    (``||A v_i - lambda_i v_i||``, in the order of ``w``). Without it, an unconverged
    eager call warns. SciPy raises ``ArpackNoConvergence``.

    ``A`` must be Hermitian (real symmetric, or complex Hermitian); with concrete data
    this is checked (to 1000 rounding errors of ``A``'s largest entry). Under ``jit``
    it cannot be, and a non-Hermitian matrix gives meaningless results, as in SciPy.

    Differentiation: the eigenvalues are differentiable w.r.t. ``A.data``
    (``jax.grad``, ``jvp``) for simple eigenvalues, ``d lambda = Re(v^H dA v)`` over the
    stored diagonals: the derivative of the eigenvalues of the Hermitian part of ``A``
    (a perturbation that breaks the symmetry counts through its Hermitian part, as
    ``jnp.linalg.eigh`` does). Eigenvector derivatives are not computed: their tangent
    is NaN, so a loss that reads the eigenvectors gets a NaN gradient, never a silently
    wrong one (the ``info`` fields have zero tangents). Degenerate eigenvalues have no
    derivative.

    Args:
      A: a square, Hermitian DiaMatrix (possibly batched: leading dims of ``A.data``).
      k: the number of eigenpairs, ``1 <= k < n`` (static).
      M: must be None (generalized problems are not supported).
      sigma: a real shift for shift-invert mode, or None.
      which: ``"LM"``, ``"SM"``, ``"LA"``, ``"SA"`` or ``"BE"``.
      v0: the starting vector ``(n,)`` (or a batch of them); default: a fixed
        pseudo-random vector, so results are reproducible.
      ncv: the number of Lanczos vectors, ``k < ncv <= n`` (static).
      maxiter: the largest number of restarts (static; default ``10 n``, as SciPy).
      tol: the relative accuracy of the eigenvalues; 0 means machine precision.
      return_eigenvectors: also return the eigenvectors (SciPy's flag).
      Minv: must be None.
      OPinv: must be None.
      mode: must be ``"normal"`` (SciPy's ``"buckling"`` and ``"cayley"`` are not
        supported).
      return_info: also return ``info`` (above) as the last value.

    Returns:
      ``w`` of shape ``(..., k)`` (real, ascending), then ``v`` of shape ``(..., n, k)``
      if ``return_eigenvectors``, then ``info`` if ``return_info``. 16-bit matrices are
      solved in float32 and the results cast back.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix, ``k``, ``ncv`` or ``maxiter`` are not
        static ints, ``sigma`` is complex, or ``v0`` is complex for a real ``A``.
      ValueError: if ``A`` is not square, or (with concrete data) not Hermitian; if ``k``
        is not in ``[1, n)``, ``which`` is unknown, ``ncv`` is out of range, or ``v0``
        has the wrong shape.
      NotImplementedError: for ``M``, ``Minv``, ``OPinv`` or another ``mode``.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> n = 200
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> w, v = jaxdia.eigsh(A, k=3, which="SA")
      >>> exact = 2 - 2 * jnp.cos(jnp.arange(1, 4) * jnp.pi / (n + 1))
      >>> bool(jnp.allclose(w, exact, atol=1e-5)), v.shape
      (True, (200, 3))
      >>> w, info = jaxdia.eigsh(A, k=3, sigma=0.0, return_eigenvectors=False,
      ...                        return_info=True)
      >>> bool(info.converged), bool(jnp.allclose(w, exact, atol=1e-5))
      (True, True)
    """
    A = square(A, "eigsh")
    _reject("M", M, "generalized eigenproblems need a factorization of M")
    _reject("Minv", Minv, "only standard problems are solved")
    _reject("OPinv", OPinv, "shift-invert uses jaxdia's banded solver")
    if mode != "normal":
        raise NotImplementedError(
            f"eigsh: mode must be 'normal' (plain shift-invert), got {mode!r}"
        )
    if not isinstance(return_eigenvectors, (bool, np.bool_)):
        raise TypeError(
            "eigsh: return_eigenvectors must be a Python bool, got "
            f"{type(return_eigenvectors).__name__}"
        )
    if not isinstance(return_info, (bool, np.bool_)):
        raise TypeError(
            f"eigsh: return_info must be a Python bool, got {type(return_info).__name__}"
        )
    parts = A._parts
    w, v, info = _lanczos.eigsh(
        parts, k, sigma=sigma, which=which, v0=v0, ncv=ncv, maxiter=maxiter, tol=tol
    )
    w, v = w.astype(np.finfo(A.dtype).dtype), v.astype(A.dtype)
    if not return_info and not isinstance(info.converged, jax.core.Tracer):
        missing = np.asarray(info.converged) == 0
        if missing.any():
            warnings.warn(
                f"eigsh: not converged after maxiter restarts ({int(np.sum(missing))} of "
                f"{missing.size} matrices); pass return_info=True to read the residuals, "
                "or raise maxiter/ncv",
                RuntimeWarning,
                stacklevel=2,
            )
    out: tuple[Any, ...] = (w, v) if return_eigenvectors else (w,)
    if return_info:
        out += (info,)
    return out[0] if len(out) == 1 else out


def expm_multiply(
    A: DiaMatrix,
    B: Any,
    *,
    start: Any = None,
    stop: Any = None,
    num: int | None = None,
    endpoint: bool | None = None,
    traceA: Any = None,
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

    ``(m, s)`` depend on the values of ``A``, so the loops are ``lax.while_loop``: the
    call works under ``jit`` and ``vmap`` (each member of a batch gets its own
    parameters). Reverse-mode differentiation (``grad``, ``vjp``) w.r.t. ``A.data``,
    ``B``, ``start`` and ``stop`` is a custom rule: ``exp(A)^T G`` for ``B``, and for
    ``A.data`` the integral ``int_0^1 exp((1 - r) A)^T G (exp(r A) B)^T dr`` on the
    stored diagonals by Gauss-Legendre quadrature on short panels (exact to rounding;
    at most 4096 panels of ``||t A||_1 <= 3.54`` per time step, beyond which the
    gradient is NaN). Forward mode (``jvp``, ``jacfwd``) is not available.

    Batches follow :func:`jaxdia.solve_banded`: a 1-D ``B`` of length ``n`` is a vector,
    an N-D ``B`` a stack of ``(n, c)`` blocks whose batch dims broadcast with
    ``A.batch_shape``; the result has the batch dims first, then SciPy's shape.

    Args:
      A: a square DiaMatrix (possibly batched).
      B: a vector ``(n,)`` or a block ``(..., n, c)``.
      start: the first time of a grid (a real scalar; may be traced).
      stop: the last time of the grid (excluded if ``endpoint=False``).
      num: the number of times, at least 2 (static).
      endpoint: whether ``stop`` is the last time (a Python bool).
      traceA: ``trace(A)``, used only to shift ``A`` (default: computed exactly).

    Returns:
      ``exp(A) @ B``, of ``B``'s shape (batch dims broadcast), or ``(num, *B.shape)`` on
      a time grid; in the promoted dtype of ``A`` and ``B`` (16-bit floats computed in
      float32 and cast back).

    Raises:
      TypeError: if ``A`` is not a DiaMatrix, ``B`` is not numeric, ``num`` is not a
        static int, ``endpoint`` not a bool, a time is complex, or a grid lacks
        ``start`` or ``stop``.
      ValueError: if ``A`` is not square, ``B``'s shape does not fit, ``num < 2``, or a
        time or ``traceA`` is not a scalar.

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
    """
    A = square(A, "expm_multiply")
    return _expm.expm_multiply(
        A._parts, B, start=start, stop=stop, num=num, endpoint=endpoint, traceA=traceA
    )


__all__ = ["eigsh", "expm_multiply"]
