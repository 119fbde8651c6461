"""The arguments of :func:`jaxdia.eigsh` checked, and the errors of a failed solve.

* :func:`sort_operand` sorts an operator (``A``, ``M``, ``Minv``, ``OPinv``) into one of the
  three kinds :mod:`.eigsh_modes` knows: a :class:`jaxdia.DiaMatrix` or a
  ``scipy.sparse`` matrix as a ``DiaParts`` (banded: the factorizations run on the
  band), a 2-D array as a dense matrix, anything else
  :func:`jaxdia._linalg.operators.as_operator` takes as a function (a host
  ``LinearOperator`` through ``jax.pure_callback``, a lineax operator, a JAX function).
* :func:`check_matrix`: concrete matrices are finite and Hermitian (to 1000 rounding
  errors of their largest entry), checked on the host.
* Outside ``jit``, a factor that failed raises (:func:`raise_failure`:
  ``numpy.linalg.LinAlgError`` for ``A - sigma M`` singular or ``M`` not positive
  definite), and so does non-convergence (:func:`raise_no_convergence`), with an
  exception that is SciPy's ``ArpackNoConvergence`` (:func:`no_convergence_error`; SciPy
  is imported then, not with jaxdia), carrying the pairs that converged.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import is_scipy_sparse, is_traced, spans_processes
from .._geometry import accumulation_dtype, in_bounds
from .._matrix import DiaMatrix
from .._ops import add, conj, transpose
from .._parts import DiaParts
from .eigsh_modes import BANDED, DENSE, GIVEN, ITERATIVE, EigshInfo, Problem
from .operators import apply as apply_stack, as_operator, operator_dtype

# -- the operators -------------------------------------------------------------------------


class Operand(NamedTuple):
    """One operator sorted: ``value`` (a ``DiaParts``, a 2-D array or a ``Partial``), its
    kind, size (None: unknown, a function), dtype (None: unknown), batch shape, and what
    it was given as, for SciPy's rules of ``k >= n``: ``"dense"`` (an array),
    ``"sparse"`` (a ``scipy.sparse`` matrix or a DiaMatrix) or ``"LinearOperator"``
    (anything else, ``aslinearoperator`` of a matrix too)."""

    value: Any
    kind: str
    n: int | None
    dtype: np.dtype | None
    batch: tuple[int, ...] = ()
    given_as: str = "LinearOperator"


def sort_operand(X: Any, name: str) -> Operand | None:
    """``X`` (the argument ``name``) sorted into one of :mod:`.eigsh_modes`' kinds."""
    if X is None:
        return None
    sorted_ = _sort(X, name)
    if isinstance(X, (np.ndarray, jax.Array)):
        return sorted_._replace(given_as="dense")
    if is_scipy_sparse(X) or isinstance(X, DiaMatrix):
        return sorted_._replace(given_as="sparse")
    return sorted_


def _sort(X: Any, name: str) -> Operand:
    if is_scipy_sparse(X):
        X = DiaMatrix.from_scipy(X)
    if "scipy.sparse.linalg" in sys.modules and type(X).__name__ == "MatrixLinearOperator":
        wrapped = getattr(X, "A", None)
        if isinstance(wrapped, np.ndarray) or is_scipy_sparse(wrapped):
            return _sort(wrapped, name)  # aslinearoperator's matrix, as a matrix
    if isinstance(X, DiaMatrix):
        _square(X.shape, name)
        dtype = np.dtype(jax.dtypes.canonicalize_dtype(X.dtype))
        return Operand(X._parts, BANDED, X.shape[0], dtype, X.batch_shape)
    if isinstance(X, (np.ndarray, jax.Array)):
        if X.ndim != 2:
            raise ValueError(
                f"eigsh: {name} given as an array must be a 2-D matrix, got shape {X.shape}"
            )
        _square(X.shape, name)
        dtype = operator_dtype(X.dtype, "eigsh", name)
        value = X.astype(dtype) if isinstance(X, jax.Array) else np.asarray(X, dtype)
        return Operand(value, DENSE, X.shape[0], dtype)
    converted = as_operator(X, "eigsh", name)
    if isinstance(converted.operator, DiaMatrix):  # a jaxdia.DiaLinearOperator
        return _sort(converted.operator, name)
    operator = converted.operator
    if not isinstance(operator, jax.tree_util.Partial):
        if not callable(operator):  # an object with @ and a shape
            _square(operator.shape, name)
            n = int(operator.shape[0])
            if int(getattr(operator, "padded_size", n)) != n:
                raise TypeError(
                    f"eigsh: {name} pads its vectors (a ShardedDiaMatrix): pass its DiaMatrix"
                )
            return Operand(
                jax.tree_util.Partial(apply_stack, operator), ITERATIVE, n, np.dtype(operator.dtype)
            )
        operator = jax.tree_util.Partial(operator)  # the function is static
    return Operand(operator, ITERATIVE, converted.size, converted.dtype)


def _square(shape: Any, name: str) -> None:
    shape = tuple(shape)
    if len(shape) != 2 or shape[0] != shape[1]:
        raise ValueError(f"eigsh: {name} must be square, got shape {shape}")


def check_matrix(operand: Operand, name: str) -> None:
    """A ValueError unless a concrete matrix is finite and Hermitian."""
    value = operand.value
    if isinstance(value, DiaParts):
        if not is_traced(value.data):
            check_hermitian(value, name)
    elif operand.kind == DENSE and not is_traced(value):
        host = np.asarray(value)
        bad = np.argwhere(~np.isfinite(host))
        if len(bad):
            i, j = (int(x) for x in bad[0])
            raise ValueError(
                f"eigsh: {name} must not contain infs or NaNs, but {name}[{i}, {j}] = {host[i, j]}"
            )
        _refuse_non_hermitian(
            name,
            host.dtype,
            float(np.max(np.abs(host - host.conj().T), initial=0.0)),
            float(np.max(np.abs(host), initial=0.0)),
        )


def check_hermitian(A: DiaParts, name: str = "A") -> None:
    """A ValueError unless ``A`` (concrete data) is finite and Hermitian to 1000 rounding
    errors of its largest entry. On the host, with NumPy: it also runs inside a trace that
    closes over a concrete matrix. Data that spans other processes is checked by a
    reduction on the devices instead (this host cannot fetch it; a NaN there fails the
    Hermitian test)."""
    work = accumulation_dtype(np.dtype(A.data.dtype))
    if spans_processes(A.data):
        defect, scale = (float(value) for value in _hermitian_defect(A))
    else:
        host = np.asarray(A.data)
        host = np.where(in_bounds(A.offsets, A.shape, host=True), host, 0)
        bad = np.argwhere(~np.isfinite(host))
        if len(bad):
            # NaN would make every Ritz value NaN (SciPy's ARPACK fails at once on it too).
            *member, k, j = (int(i) for i in bad[0])
            where = f" (matrix {tuple(member)} of the batch)" if member else ""
            raise ValueError(
                f"eigsh: {name} must not contain infs or NaNs, but "
                f"{name}[{j - A.offsets[k]}, {j}] = {host[(*member, k, j)]}{where}"
            )
        defect, scale = _host_hermitian_defect(host.astype(work), A.offsets, A.shape[0])
    _refuse_non_hermitian(name, work, defect, scale)


def _refuse_non_hermitian(name: str, dtype: Any, defect: float, scale: float) -> None:
    work = accumulation_dtype(np.dtype(dtype))
    if not defect <= 1000 * float(np.finfo(work).eps) * scale:
        kind = "Hermitian" if np.dtype(dtype).kind == "c" else "symmetric"
        raise ValueError(
            f"eigsh: {name} must be {kind} (eigsh solves Hermitian problems), but max|{name} "
            f"- {name}^H| = {defect:.3g} against max|{name}| = {scale:.3g}; use {name} + "
            f"{name}.H (or ({name} + {name}.H) / 2) if the asymmetry is rounding"
        )


def _host_hermitian_defect(
    host: np.ndarray, offsets: tuple[int, ...], n: int
) -> tuple[float, float]:
    """``(max|A - A^H|, max|A|)`` of square DIA data on the host (``(..., n_diags, n)``,
    zero outside the matrix): each stored diagonal against the conjugate of its mirror
    image (zero where that is not stored), one slice of each per diagonal. Entry
    ``(c - o, c)`` of offset ``o`` is ``data[k, c]``; its mirror ``(c, c - o)``, of offset
    ``-o``, is ``data[k', c - o]``."""
    stored = {offset: k for k, offset in enumerate(offsets)}
    defect = 0.0
    for k, offset in enumerate(offsets):
        lo, hi = max(0, offset), min(n, n + offset)  # the columns inside the matrix
        if lo >= hi:
            continue
        values = host[..., k, lo:hi]
        mirror = stored.get(-offset)
        if mirror is not None:
            values = values - np.conj(host[..., mirror, lo - offset : hi - offset])
        defect = max(defect, float(np.max(np.abs(values))))
    return defect, float(np.max(np.abs(host), initial=0.0))


@jax.jit
def _hermitian_defect(A: DiaParts) -> tuple[Array, Array]:
    """``(max|A - A^H|, max|A|)`` on the devices (the matrix stays where it is)."""
    difference = add(A, conj(transpose(A)), subtract=True)
    return (
        jnp.max(jnp.abs(jnp.where(in_bounds(difference.offsets, A.shape), difference.data, 0))),
        jnp.max(jnp.abs(jnp.where(in_bounds(A.offsets, A.shape), A.data, 0))),
    )


# -- errors ----------------------------------------------------------------------------------


@functools.cache
def no_convergence_error() -> type:
    """The exception :func:`jaxdia.eigsh` raises outside ``jit`` when pairs did not
    converge: a subclass of SciPy's ``ArpackNoConvergence`` (SciPy is imported on the
    first failure, not with jaxdia), whose ``eigenvalues`` and ``eigenvectors`` are the
    pairs that did (NumPy arrays), and ``info`` the whole report."""
    from scipy.sparse.linalg import ArpackNoConvergence

    class EigshNoConvergence(ArpackNoConvergence):
        """SciPy's ``ArpackNoConvergence``, from :func:`jaxdia.eigsh`: ``eigenvalues``
        and ``eigenvectors`` hold the pairs that converged, ``info`` the report."""

        def __init__(self, message: str, eigenvalues: Any, eigenvectors: Any, info: Any):
            super().__init__(message, eigenvalues, eigenvectors)
            self.info = info

    EigshNoConvergence.__module__ = "jaxdia"
    return EigshNoConvergence


def _member(index: tuple[int, ...]) -> str:
    return f" (matrix {index} of the batch)" if index else ""


def raise_failure(problem: Problem, w: np.ndarray, sigma: Any, has_m: bool) -> None:
    """The error of a factor or an inner solve that failed, where the eigenvalues are not
    finite (a failure makes NaN); nothing where no factor or solve is to blame."""
    bad = ~np.all(np.isfinite(w), axis=-1)
    if not bad.any():
        return
    index = tuple(int(i) for i in np.argwhere(bad)[0]) if w.ndim > 1 else ()
    where = _member(index)
    mode = problem.mode
    if mode == 2 and problem.minv == ITERATIVE or mode > 2 and problem.opinv == ITERATIVE:
        what = "M" if mode == 2 else "A - sigma M"
        raise ValueError(
            f"eigsh: the iterative solve with {what} did not converge{where} (SciPy: 'Error "
            f"in inverting {'M' if mode == 2 else '[A-sigma*M]'}'); pass "
            f"{'Minv' if mode == 2 else 'OPinv'}, or M and A as matrices"
        )
    if mode == 2 and problem.minv in (BANDED, DENSE, None):
        raise np.linalg.LinAlgError(
            f"eigsh: M is not positive definite{where} (its Cholesky factor failed); "
            "without sigma, eigsh solves A x = lambda M x for a Hermitian positive definite M"
        )
    if mode < 3 or problem.opinv == GIVEN:
        return
    shift = np.asarray(sigma).item()
    if not has_m and mode == 3:
        raise np.linalg.LinAlgError(
            f"eigsh: A - sigma I is exactly singular{where} (sigma = {shift} is an eigenvalue "
            "of A to rounding, so (A - sigma I)^-1 does not exist; SciPy raises 'Factor is "
            "exactly singular'): move sigma off the spectrum"
        )
    definite = " or A is not positive definite (buckling mode's inner product is A's)"
    raise np.linalg.LinAlgError(
        f"eigsh: A - sigma M is exactly singular{where}{definite if mode == 4 else ''} "
        f"(sigma = {shift} is an eigenvalue of A x = lambda M x to rounding, so (A - sigma "
        "M)^-1 does not exist; SciPy raises 'Factor is exactly singular'): move sigma off "
        "the spectrum"
    )


def raise_no_convergence(w: Any, v: Any, info: EigshInfo, passed: Any) -> None:
    """SciPy's ``ArpackNoConvergence`` (:func:`no_convergence_error`) for the first
    matrix of a batch that did not converge, with its converged pairs."""
    converged = np.asarray(info.converged)
    if converged.all():
        return
    index = tuple(int(i) for i in np.argwhere(~converged)[0]) if converged.ndim else ()
    passed = np.asarray(passed)[index]
    k = passed.shape[-1]
    iterations = int(np.asarray(info.iterations)[index])
    eigenvalues = np.asarray(w)[index][passed]
    eigenvectors = None if v is None else np.asarray(v)[index][:, passed]
    raise no_convergence_error()(
        f"eigsh: no convergence{_member(index)} ({iterations} restarts, {int(passed.sum())}/"
        f"{k} eigenvectors converged); raise maxiter or ncv, or pass return_info=True for "
        "the report instead of this error",
        eigenvalues,
        eigenvectors,
        info,
    )
