"""Incomplete factorizations as preconditioners: :func:`ilu0` (:class:`IncompleteLU`) and
:func:`ic0` (:class:`IncompleteCholesky`).

The factors keep ``A``'s diagonals (ILU(0), IC(0)); the array-level work is in
:mod:`jaxdia._linalg.ilu`. Here: the arguments' checks, the ordering (``order=``: reversing grid
axes, so that the factor follows the flow of a convection-dominated problem) and the
preconditioner objects, pytrees that are callable on JAX arrays and speak SciPy's
``LinearOperator`` protocol.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._checks import as_array, broadcast_batch, is_int, is_traced, static_int
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from .._pytree import Immutable, built_by
from .._typing import ArrayLike, DTypeLike, Grid
from . import ilu as _ilu
from .stencil import (
    as_grid,
    cells_of,
    check_stencil,
    displacements,
    flat_offset,
    live,
    wavefront_weights,
)

METHODS = {"auto": "auto", "exact": "exact", "chow-patel": "sweeps"}
SOLVES = ("auto", "scan", "wavefront")
_DTYPES = tuple(np.dtype(d) for d in (np.float32, np.float64, np.complex64, np.complex128))


# -- the preconditioners ----------------------------------------------------------------------


class _Incomplete(Immutable):
    """What :class:`IncompleteLU` and :class:`IncompleteCholesky` share."""

    __slots__ = ("_factor", "_order", "_method", "_sweeps")
    _leaves = ("_factor",)
    _static = ("_order", "_method", "_sweeps")
    _name: ClassVar[str] = ""
    _factor: _ilu.IncompleteFactor
    _order: tuple[int, ...]
    _method: str
    _sweeps: int

    @property
    def grid(self) -> tuple[int, ...] | None:
        """The grid given (None: none)."""
        return self._factor.grid

    @property
    def order(self) -> tuple[int, ...]:
        """The grid axes whose ordering the factor reverses (``()``: the natural ordering);
        pass it as ``order=`` to factor the same way again, e.g. under ``jit`` after
        ``order="auto"`` chose it."""
        return self._order

    @property
    def method(self) -> str:
        """The factorization asked for: ``"auto"``, ``"exact"`` or ``"chow-patel"``."""
        return self._method

    @property
    def sweeps(self) -> int:
        """The Chow–Patel sweeps (where they are used)."""
        return self._sweeps

    @property
    def shape(self) -> tuple[int, int]:
        n = self._factor.inverse_diagonal.shape[-1]
        return (n, n)

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._factor.dtype)

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return self._factor.batch_shape

    def __repr__(self) -> str:
        batch = f", batch_shape={self.batch_shape}" if self.batch_shape else ""
        return (
            f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype.name}, "
            f"grid={self.grid}, method={self.method!r}{batch})"
        )

    def __call__(self, v: ArrayLike) -> Array:
        return self._apply(v, adjoint=False)

    def _apply(self, v: ArrayLike, adjoint: bool) -> Array:
        v = as_array(v, f"{self._name}: v")
        n = self.shape[0]
        if v.ndim == 0 or v.shape[-1] != n:
            raise ValueError(
                f"{self._name}: v must have shape ({n},) or (..., {n}) for a factor of {n} "
                f"unknowns, got shape {v.shape}"
            )
        batch = broadcast_batch(f"{self._name}: the factor and v", self.batch_shape, v.shape[:-1])
        return _apply(self._factor, v, order=self._order, batch=batch, adjoint=adjoint)

    def _host(self, x: ArrayLike, adjoint: bool, name: str) -> np.ndarray:
        """SciPy's protocol: ``x`` of shape ``(n,)`` or ``(n, k)``, a NumPy result."""
        x = np.asarray(x)
        n = self.shape[0]
        if self.batch_shape:
            raise ValueError(
                f"{self._name}.{name}: SciPy's LinearOperator is one matrix; this factor has "
                f"batch shape {self.batch_shape}"
            )
        if x.ndim > 2 or x.ndim == 0 or x.shape[0] != n:
            raise ValueError(
                f"{self._name}.{name}: x must have shape ({n},) or ({n}, k), got shape {x.shape}"
            )
        y = self._apply(jnp.asarray(x.T), adjoint)
        return np.array(y).T  # writable, as SciPy's solvers need

    def matvec(self, x: ArrayLike) -> np.ndarray:
        """``M @ x`` as SciPy's ``LinearOperator.matvec``: NumPy in, NumPy out.

        With :meth:`rmatvec`, :meth:`matmat`, :meth:`rmatmat`, ``shape`` and ``dtype``
        this is SciPy's ``LinearOperator`` protocol: pass ``M`` as ``M=`` to
        ``scipy.sparse.linalg``'s solvers (``aslinearoperator(M)`` for those that call
        ``M`` on blocks, such as ``lobpcg``).
        """
        return self._host(x, False, "matvec")

    def rmatvec(self, x: ArrayLike) -> np.ndarray:
        """``M^H @ x`` as SciPy's ``LinearOperator.rmatvec``."""
        return self._host(x, True, "rmatvec")

    def matmat(self, X: ArrayLike) -> np.ndarray:
        """``M @ X`` for a 2-D ``X`` (its columns), as SciPy's ``LinearOperator.matmat``."""
        return self._host(_two_dimensional(X, self._name, "matmat"), False, "matmat")

    def rmatmat(self, X: ArrayLike) -> np.ndarray:
        """``M^H @ X`` for a 2-D ``X``, as SciPy's ``LinearOperator.rmatmat``."""
        return self._host(_two_dimensional(X, self._name, "rmatmat"), True, "rmatmat")


def _two_dimensional(X: ArrayLike, name: str, method: str) -> np.ndarray:
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name}.{method}: X must be 2-D, got shape {X.shape}")
    return X


@jax.tree_util.register_pytree_with_keys_class
@built_by("ilu0")
class IncompleteLU(_Incomplete):
    """An ILU(0) preconditioner, the one :func:`jaxdia.ilu0` returns.

    ``M(v)`` is ``(L U)^-1 v``: two triangular solves with the factors ``L`` (unit lower
    triangular) and ``U`` (upper triangular), which keep ``A``'s diagonals. ``v`` has shape
    ``(n,)`` or ``(..., n)`` (a stack of vectors, or one per matrix of a batch: leading
    dims broadcast with ``batch_shape``); the result has the promoted dtype of ``v`` and
    the factor, and comes in ``v``'s ordering whatever ``order`` the factor uses. ``M`` is
    a pytree (its arrays are leaves; offsets, grid and order are static), so it can be an
    argument of a jitted function or a ``lax`` loop carry, or mapped over by ``jax.vmap``;
    ``M(v)`` is linear in ``v`` and differentiable (the factor is a constant).

    ``M.matvec``, ``rmatvec``, ``matmat``, ``rmatmat``, ``shape`` and ``dtype`` are SciPy's
    ``LinearOperator`` protocol (NumPy in and out).

    Attributes (read-only):
      L, U: the factors as DiaMatrix (of the reordered matrix ``P A P^T`` when ``order``
        reverses axes).
      grid, order, method, sweeps: as given to :func:`jaxdia.ilu0` (``order`` the axes
        reversed).
      shape, dtype, batch_shape: the factor's.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.5, 2.0, -0.5], offsets=[-1, 0, 1], shape=(6, 6))
      >>> M = jaxdia.ilu0(A)
      >>> M.L.offsets, M.U.offsets  # a tridiagonal matrix: ILU(0) is its exact LU
      ((-1, 0), (0, 1))
      >>> bool(jnp.allclose(A @ M(jnp.ones(6)), 1.0, atol=1e-5))
      True
    """

    __slots__ = ()
    _name = "IncompleteLU"

    @property
    def L(self) -> DiaMatrix:
        """The unit lower triangular factor, a DiaMatrix."""
        factor = self._factor
        ones = jnp.ones_like(factor.inverse_diagonal)[..., None, :]
        offsets = (*factor.lower_offsets, 0)
        rows = jnp.concatenate([factor.lower, ones], axis=-2)
        return _matrix(rows, offsets)

    @property
    def U(self) -> DiaMatrix:
        """The upper triangular factor, a DiaMatrix (its diagonal holds the pivots)."""
        factor = self._factor
        assert factor.upper is not None
        offsets = (0, *factor.upper_offsets)
        rows = jnp.concatenate([(1 / factor.inverse_diagonal)[..., None, :], factor.upper], -2)
        return _matrix(rows, offsets)


@jax.tree_util.register_pytree_with_keys_class
@built_by("ic0")
class IncompleteCholesky(_Incomplete):
    """An IC(0) preconditioner, the one :func:`jaxdia.ic0` returns.

    ``M(v)`` is ``(L L^H)^-1 v``, ``L`` lower triangular on ``A``'s diagonals below the
    main one: Hermitian positive definite, as conjugate gradients needs. Everything else
    (shapes, dtypes, ordering, pytree, SciPy's protocol) is as for
    :class:`jaxdia.IncompleteLU`.

    Attributes (read-only):
      L: the factor as a DiaMatrix (its diagonal real and positive).
      grid, order, method, sweeps, shape, dtype, batch_shape: as for
        :class:`jaxdia.IncompleteLU`.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(5, 5))
      >>> M = jaxdia.ic0(A)
      >>> M.L.offsets
      (-1, 0)
      >>> bool(jnp.allclose(M.L @ M.L.H @ M(jnp.ones(5)), 1.0, atol=1e-5))
      True
    """

    __slots__ = ()
    _name = "IncompleteCholesky"

    @property
    def L(self) -> DiaMatrix:
        """The lower triangular factor, a DiaMatrix."""
        factor = self._factor
        offsets = (*factor.lower_offsets, 0)
        pivots = (1 / factor.inverse_diagonal)[..., None, :]
        return _matrix(jnp.concatenate([factor.lower, pivots], axis=-2), offsets)


def _matrix(rows: Array, offsets: tuple[int, ...]) -> DiaMatrix:
    n = rows.shape[-1]
    return DiaMatrix._wrap(DiaParts(_ilu.diagonals(rows, offsets), offsets, (n, n)))


@functools.partial(jax.jit, static_argnames=("order", "batch", "adjoint"))
def _apply(
    factor: _ilu.IncompleteFactor,
    v: Array,
    *,
    order: tuple[int, ...],
    batch: tuple[int, ...],
    adjoint: bool,
) -> Array:
    """The solves for ``v`` ``(*vbatch, n)``, broadcast to ``batch``, as one compiled call;
    ``v`` reordered (and the result back) when the factor reverses axes."""
    n = v.shape[-1]
    dtype = jnp.result_type(factor.dtype, v.dtype)
    if not jnp.issubdtype(dtype, jnp.inexact):
        dtype = factor.dtype
    v = jnp.broadcast_to(v, (*batch, n))
    if factor.batch_shape and factor.batch_shape != batch:
        factor = jax.tree.map(
            lambda leaf: jnp.broadcast_to(leaf, (*batch, *leaf.shape[len(factor.batch_shape) :])),
            factor,
        )
    grid = factor.grid

    def reorder(x):
        if not order:
            return x
        assert grid is not None
        return jnp.flip(x.reshape(*batch, *grid), [len(batch) + a for a in order]).reshape(x.shape)

    def solve(x):
        return _ilu.apply(factor, x.astype(factor.dtype), adjoint)

    v = reorder(v)
    if jnp.iscomplexobj(v) and not jnp.iscomplexobj(factor.inverse_diagonal):
        # A real factor: the real and imaginary parts, one after the other.
        x = lax.complex(solve(v.real), solve(v.imag))
    else:
        x = solve(v)
    return reorder(x).astype(dtype)


# -- orderings --------------------------------------------------------------------------------


def _reversed(parts: DiaParts, grid: tuple[int, ...], axes: tuple[int, ...]) -> DiaParts:
    """``P A P^T`` for the permutation ``P`` that reverses ``axes`` of ``grid``: each
    stencil cell ``d`` becomes the cell with ``d_a`` negated on those axes (its offset
    changes accordingly), its values reversed along them."""
    n = parts.shape[0]
    dim = len(grid)

    def flipped(d):
        return tuple(-step if axis in axes else step for axis, step in enumerate(d))

    cells = {
        d for d in displacements(dim) if live(d, grid) and flat_offset(d, grid) in parts.offsets
    }
    offsets = tuple(sorted({flat_offset(flipped(d), grid) for d in cells}))

    def one(data):
        values = cells_of(DiaParts(data, parts.offsets, parts.shape), grid)
        rows = {o: jnp.zeros((n,), data.dtype) for o in offsets}
        for d, cell in values.items():
            o = flat_offset(flipped(d), grid)
            rows[o] = rows[o] + jnp.flip(cell, axes).reshape(-1)
        return _ilu.diagonals(jnp.stack([rows[o] for o in offsets]), offsets)

    flat = parts.data.reshape(-1, *parts.data.shape[-2:])
    data = jax.vmap(one)(flat).reshape(*parts.batch_shape, len(offsets), n)
    return DiaParts(data, offsets, parts.shape)


def _downwind(host: np.ndarray, offsets: tuple[int, ...], grid: tuple[int, ...]) -> tuple:
    """The axes along which ``A`` couples each point more strongly to its following
    neighbours than to its preceding ones (sums of ``|A[i, j]|`` over the grid and the
    batch, ``host`` ``(batch, K, n)``): reversed, they put the strong couplings into ``L``,
    the ordering of the flow for an upwinded convection term."""
    n = math.prod(grid)
    before = np.zeros(len(grid))
    after = np.zeros(len(grid))
    for values in host:
        cells = cells_of(DiaParts(values, offsets, (n, n)), grid, np)
        for d, cell in cells.items():
            total = np.abs(cell).astype(np.float64).sum()
            for axis, step in enumerate(d):
                if step == -1:
                    before[axis] += total
                elif step == 1:
                    after[axis] += total
    # Equal sums (a symmetric A) differ by rounding only: keep the natural ordering.
    return tuple(axis for axis in range(len(grid)) if after[axis] > before[axis] * (1 + 1e-9))


def _as_order(
    function: str,
    order: object,
    grid: tuple[int, ...] | None,
    host: np.ndarray | None,
    offsets: tuple[int, ...],
) -> tuple[int, ...]:
    if isinstance(order, str):
        if order == "natural":
            return ()
        if order != "auto":
            raise ValueError(
                f"{function}: order must be 'natural', 'auto' or a sequence of grid axes to "
                f"reverse, got {order!r}"
            )
        if grid is None:
            raise ValueError(
                f"{function}: order='auto' reverses axes of the grid, which needs grid= (the "
                "grid's points per axis)"
            )
        if host is None:
            raise TypeError(
                f"{function}: order='auto' chooses the ordering from A's values, which are "
                "traced here (inside jit, vmap or grad). Build the preconditioner once outside, "
                f"M = jaxdia.{function}(A, grid, order='auto'), and pass order=M.order inside."
            )
        return _downwind(host, offsets, grid)
    if isinstance(order, (bytes, int)) or not isinstance(order, Sequence):
        raise TypeError(
            f"{function}: order must be 'natural', 'auto' or a sequence of grid axes to "
            f"reverse, got {type(order).__name__}: {order!r}"
        )
    axes = tuple(sorted(int(a) for a in order if is_int(a)))
    if len(axes) != len(order):
        raise TypeError(f"{function}: order must hold grid axes (ints), got {order!r}")
    if not axes:
        return ()
    if grid is None:
        raise ValueError(f"{function}: order={tuple(order)} reverses grid axes: pass grid=")
    if len(set(axes)) != len(axes) or not all(0 <= a < len(grid) for a in axes):
        raise ValueError(
            f"{function}: order must hold distinct axes of the {len(grid)}-D grid (0 to "
            f"{len(grid) - 1}), got {tuple(order)}"
        )
    return axes


# -- construction -----------------------------------------------------------------------------


@functools.partial(
    jax.jit, static_argnames=("offsets", "grid", "order", "kind", "method", "sweeps", "solves")
)
def _setup(data, shift, *, offsets, grid, order, kind, method, sweeps, solves):
    n = data.shape[-1]
    parts = DiaParts(data, offsets, (n, n))
    if order:
        parts = _reversed(parts, grid, order)
    weights = None if grid is None else wavefront_weights(parts.offsets, grid)
    return _ilu.factorize(
        parts,
        kind=kind,
        method=method,
        sweeps=sweeps,
        shift_by=shift,
        grid=grid,
        weights=weights,
        solves=solves,
    )


def _check_pivots(function, kind, pivots, grid, order) -> None:
    """A ValueError naming the first row (in ``A``'s ordering) whose pivot breaks down."""
    host = np.asarray(pivots).reshape(-1, pivots.shape[-1])
    bad = ~np.isfinite(host) | (host == 0)
    if kind == "ic":
        bad |= ~(np.real(host) > 0)
    if not bad.any():
        return
    member, row = (int(i) for i in np.argwhere(bad)[0])
    value = host[member, row].item()
    if order:
        assert grid is not None
        point = list(np.unravel_index(row, grid))
        for axis in order:
            point[axis] = grid[axis] - 1 - point[axis]
        row = int(np.ravel_multi_index(point, grid))
    where = f" (grid point {tuple(int(i) for i in np.unravel_index(row, grid))})" if grid else ""
    where += f", batch member {member}" if host.shape[0] > 1 else ""
    what = (
        "A is not positive definite, or IC(0) breaks down for it (it need not exist unless A "
        "is an M-matrix)"
        if kind == "ic"
        else "ILU(0) breaks down there"
    )
    raise ValueError(
        f"{function}: pivot {value} at row {row}{where}: {what}. Factor A + shift * diag(A) "
        f"instead (e.g. shift=0.1), or try another order="
    )


def _build(
    function: str,
    kind: str,
    A: DiaMatrix,
    grid: int | Grid | None,
    order: str | Sequence[int],
    method: str,
    sweeps: int,
    shift: ArrayLike,
    solves: str,
    dtype: DTypeLike | None,
) -> tuple[_ilu.IncompleteFactor, tuple[int, ...], str, int]:
    A = as_square_matrix(A, function)
    if A.dtype not in _DTYPES:
        raise TypeError(
            f"{function}: A must be float32, float64, complex64 or complex128, got "
            f"{A.dtype.name} (convert with A.astype(jnp.float32))"
        )
    if 0 not in A.offsets:
        raise ValueError(
            f"{function}: A stores no main diagonal (offsets {A.offsets}); the factor keeps A's "
            "diagonals, and its pivots lie on the main one"
        )
    n = A.shape[0]
    if grid is not None:
        grid = as_grid(grid, n, function)
    if method not in METHODS:
        raise ValueError(f"{function}: method must be one of {tuple(METHODS)}, got {method!r}")
    sweeps = static_int(sweeps, f"{function}: sweeps")
    if sweeps < 1:
        raise ValueError(f"{function}: sweeps must be >= 1, got {sweeps}")
    if solves not in SOLVES:
        raise ValueError(f"{function}: solves must be one of {SOLVES}, got {solves!r}")
    if solves == "wavefront" and grid is None:
        raise ValueError(
            f"{function}: solves='wavefront' runs over the grid's hyperplanes: pass grid="
        )
    if not is_traced(shift):
        value = float(as_array(shift, f"{function}: shift"))
        if not value >= 0 or not math.isfinite(value):
            raise ValueError(f"{function}: shift must be finite and >= 0, got {shift!r}")
    work = A.dtype
    if dtype is not None:
        dtype = np.dtype(dtype)
        complex_A = jnp.issubdtype(A.dtype, jnp.complexfloating)
        if dtype not in _DTYPES or bool(jnp.issubdtype(dtype, jnp.complexfloating)) != complex_A:
            kinds = "complex64 or complex128" if complex_A else "float32 or float64"
            raise TypeError(
                f"{function}: dtype must be {kinds} for A of dtype {A.dtype.name}, got {dtype.name}"
            )
        work = np.dtype(jnp.promote_types(A.dtype, dtype))
    host = None if is_traced(A.data) else np.asarray(A.data).reshape(-1, *A.data.shape[-2:])
    if grid is not None:
        check_stencil(A, grid, host, function, "pass grid=None")
    axes = _as_order(function, order, grid, host, A.offsets)
    factor, pivots = _setup(
        A.data.astype(work),
        shift,
        offsets=A.offsets,
        grid=grid,
        order=axes,
        kind=kind,
        method=METHODS[method],
        sweeps=sweeps,
        solves=solves,
    )
    if not is_traced(pivots):
        _check_pivots(function, kind, pivots, grid, axes)
    if dtype is not None and dtype != work:
        factor = jax.tree.map(lambda leaf: leaf.astype(dtype), factor)
    return factor, axes, method, sweeps


_SHARED_ARGS = """
    Args:
      A: a square DiaMatrix of float32, float64, complex64 or complex128, possibly batched.
        It must store its main diagonal.
      grid: the grid's points per axis (``(n1,)``, ``(n1, n2)`` or ``(n1, n2, n3)``, the
        unknowns in C order, as for :func:`jaxdia.multigrid`), when ``A`` is a stencil on a
        structured grid: the factor's pattern is then the slots of ``A``'s diagonals that
        couple grid neighbours (a diagonal such as ``n2 - 1`` also holds pairs that wrap
        around a grid line, kept zero), on grids with axes of any size from 1 point; None:
        any banded matrix, the pattern its whole diagonals (``order`` natural, triangular
        solves by scan).
      order: ``"natural"`` (the unknowns' own ordering), a sequence of grid axes to
        reverse, or ``"auto"``: reverse each axis ``a`` along which ``A`` couples points
        more strongly to their following neighbours than to their preceding ones (the sum
        of ``|A[i, j]|`` over the pairs with ``j_a = i_a + 1`` exceeds the sum over
        those with ``j_a = i_a - 1``, over the grid and the batch). For an upwinded
        convection term that is the ordering of the flow, the one in which ILU(0) is
        nearly exact; it reads ``A``'s values, so it needs a concrete ``A``, and
        ``M.order`` records the choice (pass it as ``order=`` under ``jit``). Reversing
        axis ``a`` is the permutation ``P`` mapping grid index ``i_a`` to ``n_a - 1 -
        i_a``; the factor is that of ``P A P^T``, a stencil whose displacements along
        ``a`` are negated (its offsets change accordingly); ``M(v)`` solves with it for
        ``P v`` and returns ``P^T`` of the result: vectors in ``A``'s ordering.
      method: ``"exact"`` (the row-by-row factorization, ``n`` sequential steps),
        ``"chow-patel"`` (``sweeps`` sweeps of Chow and Patel's fine-grained iteration,
        every entry of the factors updated at once) or ``"auto"``: exact on CPU,
        Chow–Patel on GPU and TPU, where ``n`` sequential steps are slow.
      sweeps: the Chow–Patel sweeps (default 2: within 5 % of the exact factorization's
        iteration counts in the benchmarks).
      shift: factor ``A + shift * diag(A)`` instead of ``A`` (a scalar >= 0; Manteuffel's
        shift), for matrices whose factorization breaks down.
      solves: how the triangular solves run: ``"scan"`` (row by row, ``n`` sequential
        steps: the fastest on CPU), ``"wavefront"`` (needs ``grid``: all points of a
        hyperplane ``sum_a w_a i_a = t`` at once, ``2 N - 1`` steps on an ``N x N`` grid
        with a 5-point stencil, ``3 N - 2`` on ``N^3`` with a 7-point one, ``3 N`` and
        ``7 N`` for 9- and 27-point stencils), or ``"auto"``: the scan on CPU, the
        wavefront on GPU and TPU when ``grid`` is given.
      dtype: the precision the factor is stored and applied in (default ``A``'s; e.g.
        float32 for a float64 ``A`` halves the memory traffic of every solve).
"""


def ilu0(
    A: DiaMatrix,
    grid: int | Grid | None = None,
    *,
    order: str | Sequence[int] = "natural",
    method: str = "auto",
    sweeps: int = _ilu.DEFAULT_SWEEPS,
    shift: ArrayLike = 0.0,
    solves: str = "auto",
    dtype: DTypeLike | None = None,
) -> IncompleteLU:
    """The incomplete LU factorization ILU(0) of ``A``, as a preconditioner.

    ``A ~ L U`` with ``L`` unit lower and ``U`` upper triangular, both keeping ``A``'s
    diagonals (no fill-in): the product matches ``A`` on its diagonals. ``M(v) = (L U)^-1
    v`` costs two triangular solves. Where convection dominates a convection-diffusion
    problem, ILU(0) in the ordering of the flow is close to an exact solve (BiCGStab then
    converges in a few iterations where Jacobi and :func:`jaxdia.multigrid` fail); where
    diffusion dominates, multigrid needs far fewer iterations.

    The factorization is computed once, here, as one compiled call (under ``jit`` too,
    and ``vmap``: a batched ``A`` gives a batched factor). Outside ``jit`` a breakdown (a
    zero or non-finite pivot) raises; under ``jit`` it shows as NaN or inf in ``M(v)``
    (and the Krylov solve reports no convergence). ``M`` plugs in as ``M=`` of
    :func:`jaxdia.bicgstab` and ``jax.scipy.sparse.linalg.gmres``/``bicgstab``, of
    ``scipy.sparse.linalg``'s solvers (``M`` speaks SciPy's ``LinearOperator``
    protocol), and of lineax as ``lineax.FunctionLinearOperator(M,
    jax.ShapeDtypeStruct((n,), dtype))`` in ``options={"preconditioner": ...}``.
    Gradients of a solve with respect to ``A.data`` and ``b`` (implicit differentiation)
    never differentiate the factor: it is built with ``stop_gradient``.
    {args}
    Returns:
      An :class:`jaxdia.IncompleteLU`.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix of a supported dtype, ``dtype`` does not
        fit it, or ``order="auto"`` gets a traced ``A``.
      ValueError: if ``A`` is not square or stores no main diagonal, an option is out of
        range, ``A`` is no stencil on ``grid`` (an offset or, for a concrete ``A``, an
        entry coupling points that are no neighbours), or (for a concrete ``A``) a pivot
        is zero or not finite.

    Example:
      >>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> N, eps = 64, 1e-3  # -eps Laplacian(u) + (1, 0.5) . grad(u), upwinded
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
      >>> B = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(N, N))
      >>> S = eps * (N + 1) ** 2 * sp.kronsum(T, T) + (N + 1) * (
      ...     sp.kron(B, sp.eye(N)) + 0.5 * sp.kron(sp.eye(N), B))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(S).astype(np.float32))
      >>> M = jaxdia.ilu0(A, (N, N), order="auto")
      >>> M.order  # the natural ordering follows this flow already
      ()
      >>> x, info = jaxdia.bicgstab(A, jnp.ones(N * N), M=M, rtol=1e-5)
      >>> bool(info.converged), int(info.iterations) < 10
      (True, True)
    """
    factor, axes, method, sweeps = _build(
        "ilu0", "ilu", A, grid, order, method, sweeps, shift, solves, dtype
    )
    return IncompleteLU._make(factor, axes, method, sweeps)


def ic0(
    A: DiaMatrix,
    grid: int | Grid | None = None,
    *,
    order: str | Sequence[int] = "natural",
    method: str = "auto",
    sweeps: int = _ilu.DEFAULT_SWEEPS,
    shift: ArrayLike = 0.0,
    solves: str = "auto",
    dtype: DTypeLike | None = None,
) -> IncompleteCholesky:
    """The incomplete Cholesky factorization IC(0) of a Hermitian positive definite ``A``,
    as a preconditioner.

    ``A ~ L L^H`` with ``L`` lower triangular on ``A``'s diagonals below and on the main
    one; ``M(v) = (L L^H)^-1 v`` is Hermitian positive definite, a preconditioner for
    :func:`jaxdia.cg`. Only the lower triangle of ``A`` (offsets ``<= 0``) is read, as
    ``scipy.linalg.cho_factor(lower=True)`` does, and the real part of the diagonal. IC(0)
    exists for M-matrices (a discretized diffusion operator); for other positive definite
    matrices it may break down (a pivot that is not positive): outside ``jit`` that
    raises, and ``shift`` makes it exist. Everything else is as for :func:`jaxdia.ilu0`.
    {args}
    Returns:
      An :class:`jaxdia.IncompleteCholesky`.

    Raises:
      TypeError: as for :func:`jaxdia.ilu0`.
      ValueError: as for :func:`jaxdia.ilu0`; for a concrete ``A``, also a pivot that is
        not positive.

    Example:
      >>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> N = 32
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T, format="dia").astype(np.float32))
      >>> x, info = jaxdia.cg(A, jnp.ones(N * N), M=jaxdia.ic0(A, (N, N)), rtol=1e-4)
      >>> bool(info.converged), int(info.iterations) < 20  # Jacobi's CG: over 40
      (True, True)
    """
    factor, axes, method, sweeps = _build(
        "ic0", "ic", A, grid, order, method, sweeps, shift, solves, dtype
    )
    return IncompleteCholesky._make(factor, axes, method, sweeps)


for _function in (ilu0, ic0):  # the arguments they share, written once
    if _function.__doc__:  # None under python -OO
        _function.__doc__ = _function.__doc__.replace("    {args}", _SHARED_ARGS)
