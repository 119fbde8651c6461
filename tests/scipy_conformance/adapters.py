"""The adapters that put jaxdia in place of SciPy's solvers in SciPy's own test modules,
and the loader that runs a SciPy test module with them.

An adapter converts the *matrix argument* and nothing else: a dense array or a
``scipy.sparse`` matrix becomes a ``DiaMatrix`` (``from_dense``, ``from_scipy``; for
``scipy.linalg.solve_banded``/``solveh_banded`` the banded storage ``ab`` with its band
widths, as ``docs/migration.md`` writes it), and every other argument (``b``, ``x0``,
``M``, tolerances, callbacks, keywords jaxdia may not know) is passed through as SciPy's
test wrote it, so that jaxdia decides. The results come back as SciPy returns them:
NumPy arrays, and for the Krylov solvers SciPy's integer ``info`` read from jaxdia's
:class:`jaxdia.SolveInfo` (0: converged; the iteration limit when it ran out; -1 when the
method stopped early without converging, a breakdown, where SciPy returns a negative
code). A factor (``splu``, ``factorized``) or an ODE solution comes back wrapped so that
what it returns is NumPy too.

:func:`load` executes a SciPy test module afresh under a name of its own while the
functions it imports are replaced by these adapters, so that everything the module builds
at import (its lists of solvers, its test cases and their ids) holds the adapters: a
test that compares ``case.solver is gmres`` still finds its solver. The functions SciPy's
tests use to compute expected values (``scipy.linalg.eigh``, ``scipy.sparse.linalg.expm``,
solvers outside the scope) stay SciPy's.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import jax
import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.sparse
import scipy.sparse.linalg

import jaxdia

# -- the matrix argument -------------------------------------------------------------------


def matrix(A: Any) -> Any:
    """``A`` as a ``DiaMatrix`` when it is a matrix (a ``scipy.sparse`` one or a 2-D NumPy
    array); anything else (a ``LinearOperator``, a function, None) as it is."""
    if scipy.sparse.issparse(A):
        return jaxdia.DiaMatrix.from_scipy(A)
    if isinstance(A, np.ndarray) and A.ndim == 2:
        return jaxdia.DiaMatrix.from_dense(np.asarray(A))
    return A


def banded(l_and_u: Any, ab: Any) -> jaxdia.DiaMatrix:
    """``scipy.linalg.solve_banded``'s ``(l, u)`` and ``ab`` as a DiaMatrix: ``ab``'s rows
    are the diagonals ``u, u - 1, ..., -l`` in DIA layout already."""
    lower, upper = l_and_u
    ab = np.asarray(ab)
    n = ab.shape[-1]
    return jaxdia.DiaMatrix(ab, range(upper, -lower - 1, -1), (n, n))


def hermitian_banded(ab: Any, lower: bool) -> jaxdia.DiaMatrix:
    """``scipy.linalg.solveh_banded``'s ``ab`` as a DiaMatrix: upper form, row ``r`` holds
    offset ``u - r``; lower form, offset ``-r``."""
    ab = np.asarray(ab)
    rows, n = ab.shape[-2:]
    offsets = range(0, -rows, -1) if lower else range(rows - 1, -1, -1)
    return jaxdia.DiaMatrix(ab, offsets, (n, n))


# -- results -------------------------------------------------------------------------------


def host(value: Any) -> Any:
    """JAX arrays in ``value`` (a tuple of them too) as writable NumPy arrays."""
    if isinstance(value, jax.Array):
        return np.array(value)
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(host(v) for v in value)
    return value


class HostResults:
    """An object (a factor, an ODE solution) whose attributes and whose methods' results
    come back as NumPy."""

    def __init__(self, wrapped: Any):
        self._wrapped = wrapped

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._wrapped, name)
        if callable(value) and not isinstance(value, jax.Array):
            return functools.wraps(value)(lambda *a, **k: host(value(*a, **k)))
        return host(value)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return host(self._wrapped(*args, **kwargs))


def scipy_info(info: jaxdia.SolveInfo, limit: int) -> int:
    """SciPy's ``info`` for jaxdia's report of one system: 0 when converged, ``limit``
    (the iteration count SciPy reports) when the iterations ran out, -1 when the method
    stopped early without converging (a breakdown)."""
    if bool(np.all(info.converged)):
        return 0
    return limit if int(np.max(info.iterations)) >= limit else -1


def _size(b: Any) -> int:
    return int(np.shape(b)[0])


# -- the adapters --------------------------------------------------------------------------


def _krylov(solver: Callable[..., Any], name: str) -> Callable[..., Any]:
    def adapter(A: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, int]:
        x, info = solver(matrix(A), b, *args, **kwargs)
        maxiter = kwargs.get("maxiter")
        return host(x), scipy_info(info, 10 * _size(b) if maxiter is None else int(maxiter))

    adapter.__name__ = adapter.__qualname__ = name
    return adapter


def _gmres_iterations(info: jaxdia.SolveInfo, maxiter: int) -> jaxdia.SolveInfo:
    """gmres reports its Arnoldi steps; SciPy's ``info`` counts restart cycles (or, with
    the legacy callback, the steps): not converged is ``maxiter`` either way."""
    return info._replace(iterations=np.full(np.shape(info.iterations), maxiter))


def gmres(A: Any, b: Any, *args: Any, **kwargs: Any) -> tuple[np.ndarray, int]:
    x, info = jaxdia.gmres(matrix(A), b, *args, **kwargs)
    maxiter = kwargs.get("maxiter")
    limit = 10 * _size(b) if maxiter is None else int(maxiter)
    return host(x), scipy_info(_gmres_iterations(info, limit), limit)


cg = _krylov(jaxdia.cg, "cg")
bicgstab = _krylov(jaxdia.bicgstab, "bicgstab")


def eigsh(A: Any, *args: Any, **kwargs: Any) -> Any:
    return host(jaxdia.eigsh(matrix(A), *args, **kwargs))


def expm_multiply(A: Any, B: Any, *args: Any, **kwargs: Any) -> np.ndarray:
    return host(jaxdia.expm_multiply(matrix(A), B, *args, **kwargs))


def solve_banded(l_and_u: Any, ab: Any, b: Any, *args: Any, **kwargs: Any) -> np.ndarray:
    return host(jaxdia.solve_banded(banded(l_and_u, ab), b, *args, **kwargs))


def solveh_banded(ab: Any, b: Any, *args: Any, lower: bool = False, **kwargs: Any) -> Any:
    A = hermitian_banded(ab, lower)
    return host(jaxdia.solveh_banded(A, b, *args, lower=lower, **kwargs))


def spsolve(A: Any, b: Any, *args: Any, **kwargs: Any) -> np.ndarray:
    return host(jaxdia.solve_banded(matrix(A), b, *args, **kwargs))


def splu(A: Any, *args: Any, **kwargs: Any) -> HostResults:
    return HostResults(jaxdia.lu_factor(matrix(A), *args, **kwargs))


def factorized(A: Any, *args: Any, **kwargs: Any) -> HostResults:
    return HostResults(jaxdia.factorized(matrix(A), *args, **kwargs))


#: SciPy's solve_ivp, for the methods jaxdia does not implement (the scope is BDF).
_scipy_solve_ivp = scipy.integrate.solve_ivp


def solve_ivp(fun: Any, t_span: Any, y0: Any, method: Any = "RK45", *args: Any, **kwargs: Any):
    if method != "BDF" and method is not scipy.integrate.BDF:
        return _scipy_solve_ivp(fun, t_span, y0, method, *args, **kwargs)
    return HostResults(jaxdia.solve_ivp(fun, t_span, y0, method, *args, **kwargs))


# -- loading a SciPy test module with the adapters -----------------------------------------


@contextmanager
def replaced(replacements: dict[tuple[str, str], Any]) -> Iterator[None]:
    """Module attributes ``{(module, name): value}`` replaced while the block runs."""
    saved = []
    try:
        for (module_name, name), value in replacements.items():
            module = importlib.import_module(module_name)
            saved.append((module, name, getattr(module, name)))
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


def load(module_name: str, replacements: dict[tuple[str, str], Any]) -> types.ModuleType:
    """SciPy's test module ``module_name``, executed afresh (as
    ``scipy_conformance.<its name>``) with ``replacements`` in place while it imports."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None or spec.loader is None:
        raise ImportError(f"SciPy's test module {module_name} is not installed")
    name = "scipy_conformance." + module_name
    copy = importlib.util.spec_from_file_location(name, spec.origin)
    assert copy is not None and copy.loader is not None
    module = importlib.util.module_from_spec(copy)
    module.__package__ = module_name.rpartition(".")[0]
    sys.modules[name] = module
    with replaced(replacements):
        copy.loader.exec_module(module)
    return module


def public(module: types.ModuleType) -> dict[str, Any]:
    """What a test file re-exports of a loaded module for pytest to collect: its tests,
    test classes and fixtures (everything but dunder names)."""
    return {k: v for k, v in vars(module).items() if not k.startswith("__")}
