"""Preconditioners for a DiaMatrix, and Krylov solvers that report convergence.

* :func:`multigrid`: a geometric multigrid V-cycle for a stencil matrix on a structured
  grid (:class:`Multigrid`);
* :func:`chebyshev`: a Chebyshev polynomial in ``D^-1 A``, products only
  (:class:`Chebyshev`);
* :func:`cg` and :func:`bicgstab`: preconditioned Krylov solves returning ``(x, info)``
  with a :class:`SolveInfo` (iterations, final residual, whether it converged).

The array-level work is in :mod:`jaxdia._multigrid` and :mod:`jaxdia._krylov`.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from . import _krylov, _multigrid
from ._checks import (
    as_array,
    broadcast_batch,
    check_nonzero_diagonal,
    is_int,
    is_traced,
    static_int,
)
from ._linalg import is_operator, square, square_operator
from ._matrix import DiaMatrix
from ._parts import DiaParts

#: The largest coarsest level: its direct solve is a banded LU, whose band is the
#: coarsest grid's last axis (2-D) or last two axes (3-D) wide, so its cost grows faster
#: than the level (``n b^2`` to factor, ``n b`` per cycle for band ``b``).
MAX_COARSE = 4096


def _check_diagonal(function: str, A: DiaMatrix) -> None:
    """A ValueError naming the zeros of a concrete diagonal (the smoothers divide by it)."""
    if 0 not in A.offsets:
        raise ValueError(
            f"{function}: A stores no main diagonal (offsets {A.offsets}); its smoother "
            "divides by the diagonal, which must be nonzero"
        )
    check_nonzero_diagonal(A.data[..., A.offsets.index(0), :], function, "")


def _flat_batch(data: Array) -> Array:
    return data.reshape(-1, *data.shape[-2:])


def _unflatten(tree: Any, batch: tuple[int, ...]) -> Any:
    return jax.tree.map(lambda leaf: leaf.reshape(*batch, *leaf.shape[1:]), tree)


def _vector_product(A: Any) -> Callable[[Array], Array]:
    """``v -> A @ v`` for vectors stacked on leading dims (``(*batch, n)``): ``A`` a
    DiaMatrix (or another operator with ``@``), or a function."""

    def matvec(v: Array) -> Array:
        if callable(A) and not isinstance(A, DiaMatrix):
            result: Any = A(v)
            return result
        product: Any = A @ (v if v.ndim == 1 else v[..., None])
        return product if v.ndim == 1 else product[..., 0]

    return matvec


# -- multigrid -------------------------------------------------------------------------------


@jax.tree_util.register_pytree_node_class
class Multigrid:
    """A geometric multigrid V-cycle, the preconditioner :func:`jaxdia.multigrid` returns.

    ``M(v)`` applies one V-cycle for ``A x = v`` from ``x = 0``: an approximation of
    ``A^-1 v``, linear in ``v`` (and symmetric positive definite for a symmetric positive
    definite ``A``). ``v`` has shape ``(n,)``, or ``(..., n)`` (a stack of vectors, or
    one per matrix of a batch: leading dims broadcast with ``batch_shape``). ``M`` is a
    pytree (its arrays are leaves; grids, coarsening and smoother are static), so it can
    be an argument of a jitted function, a ``lax`` loop carry, or mapped over by
    ``jax.vmap``.

    Attributes (read-only):
      levels: the operator of each level as a DiaMatrix, finest (``A`` itself, or its
        copy in the hierarchy's ``dtype``) first.
      grids: the grid of each level.
      coarsening: the axes coarsened from each level to the next; pass it as
        ``coarsening=`` to build the same hierarchy again (e.g. under ``jit``, after
        ``coarsening="auto"`` chose it).
      smoother, sweeps: the smoother and its number of products per smoothing.
      batch_shape: the leading batch dims of the matrices it was built for.
      shape, dtype: the finest level's shape and the hierarchy's dtype.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> T = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(31, 31))
      >>> M = jaxdia.multigrid(T, (31,), max_coarse=3)
      >>> M.grids, M.coarsening
      (((31,), (15,), (7,), (3,)), ((0,), (0,), (0,)))
      >>> [level.offsets for level in M.levels][-1]
      (-1, 0, 1)
      >>> M(jnp.ones(31)).shape  # one V-cycle for T x = 1
      (31,)
    """

    def __init__(self, hierarchy: _multigrid.Hierarchy):
        self._hierarchy = hierarchy

    def tree_flatten(self) -> tuple[tuple[_multigrid.Hierarchy], None]:
        return (self._hierarchy,), None

    @classmethod
    def tree_unflatten(cls, aux: None, children: tuple[Any, ...]) -> Multigrid:
        del aux
        return cls(children[0])

    @property
    def levels(self) -> tuple[DiaMatrix, ...]:
        return tuple(DiaMatrix._wrap(parts) for parts in self._hierarchy.operators)

    @property
    def grids(self) -> tuple[tuple[int, ...], ...]:
        return self._hierarchy.grids

    @property
    def coarsening(self) -> tuple[tuple[int, ...], ...]:
        return self._hierarchy.plan

    @property
    def smoother(self) -> str:
        return self._hierarchy.smoother

    @property
    def sweeps(self) -> int:
        return self._hierarchy.sweeps

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self._hierarchy.operators[-1].data.shape[:-2])

    @property
    def shape(self) -> tuple[int, int]:
        return self._hierarchy.operators[0].shape

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._hierarchy.operators[-1].data.dtype)

    def __call__(self, v: Any) -> Array:
        v = as_array(v, "Multigrid: v")
        n = self.shape[0]
        if v.ndim == 0 or v.shape[-1] != n:
            raise ValueError(
                f"Multigrid: v must have shape ({n},) or (..., {n}) for a hierarchy of "
                f"{n} unknowns, got shape {v.shape}"
            )
        batch = broadcast_batch("Multigrid: the hierarchy and v", self.batch_shape, v.shape[:-1])
        dtype = jnp.result_type(self.dtype, v.dtype)
        if not jnp.issubdtype(dtype, jnp.inexact):
            dtype = self.dtype
        return _apply(self._hierarchy, v, batch=batch).astype(dtype)

    def __repr__(self) -> str:
        levels = self.levels
        lines = [
            f"Multigrid: {len(levels)} levels, {self.smoother} smoother ({self.sweeps} "
            f"sweeps), dtype {self.dtype.name}"
            + (f", batch shape {self.batch_shape}" if self.batch_shape else ""),
            f"  {'level':>5}  {'grid':<18}{'unknowns':>10}{'diagonals':>11}  coarsened",
        ]
        for index, (level, grid) in enumerate(zip(levels, self.grids)):
            if index < len(self.coarsening):
                axes = ", ".join(str(a) for a in self.coarsening[index])
                action = f"axes ({axes})"
            else:
                action = "direct solve"
            lines.append(
                f"  {index:>5}  {str(grid):<18}{level.shape[0]:>10,}{len(level.offsets):>11}"
                f"  {action}"
            )
        complexity = sum(level.nnz for level in levels) / max(levels[0].nnz, 1)
        lines.append(f"  operator complexity {complexity:.2f}")
        return "\n".join(lines)


@functools.partial(jax.jit, static_argnames=("batch",))
def _apply(hierarchy: _multigrid.Hierarchy, v: Array, *, batch: tuple[int, ...]) -> Array:
    """The V-cycle on ``v`` of shape ``(*vbatch, n)`` with the hierarchy's batch
    broadcast to ``batch``, as one compiled call. The cycle has real coefficients: a
    complex ``v`` runs as its real and imaginary parts, side by side in one batch (one
    cycle in the program, not two)."""
    dtype = hierarchy.operators[-1].data.dtype
    n = v.shape[-1]
    split_complex = jnp.iscomplexobj(v)
    v = jnp.broadcast_to(v, (*batch, n)).reshape(-1, n)
    cycle: Callable[[Any, Array], Array] = _multigrid.vcycle
    if split_complex:
        v = jnp.stack([v.real, v.imag], axis=1)
        cycle = jax.vmap(_multigrid.vcycle, in_axes=(None, 0))  # (h, (2, n)) -> (2, n)
    v = v.astype(dtype)
    own = hierarchy.operators[-1].data.shape[:-2]
    if not own:
        out = jax.vmap(lambda u: cycle(hierarchy, u))(v)
    else:
        if own != batch:
            hierarchy = jax.tree.map(
                lambda leaf: jnp.broadcast_to(leaf, (*batch, *leaf.shape[len(own) :])), hierarchy
            )
        flat = jax.tree.map(lambda leaf: leaf.reshape(-1, *leaf.shape[len(batch) :]), hierarchy)
        out = jax.vmap(cycle)(flat, v)
    if split_complex:
        out = lax.complex(out[:, 0], out[:, 1])
    return out.reshape(*batch, n)


def _as_grid(grid: Any, n: int, function: str = "multigrid") -> tuple[int, ...]:
    """``grid`` checked: 1 to 3 positive ints whose product is ``n`` (``function`` names
    the caller in the messages)."""
    if isinstance(grid, (str, bytes)) or not isinstance(grid, Sequence):
        if is_int(grid):
            grid = (grid,)
        else:
            raise TypeError(
                f"{function}: grid must be a tuple of 1 to 3 ints (the grid's points per axis), "
                f"got {type(grid).__name__}: {grid!r}"
            )
    grid = tuple(static_int(size, f"{function}: grid", "a tuple of ints") for size in grid)
    if not 1 <= len(grid) <= 3 or any(size < 1 for size in grid):
        raise ValueError(
            f"{function}: grid must be 1 to 3 positive ints (2-D: (n1, n2), 3-D: (n1, n2, n3)), "
            f"got {grid}"
        )
    if math.prod(grid) != n:
        raise ValueError(
            f"{function}: grid {grid} has {math.prod(grid)} points, but A has shape ({n}, {n}): "
            "the unknowns must be the grid's points, in C order (as np.ravel lays them out)"
        )
    return grid


def _check_stencil(
    A: DiaMatrix,
    grid: tuple[int, ...],
    host: np.ndarray | None,
    function: str = "multigrid",
    alternative: str = "use jaxdia.chebyshev",
) -> None:
    """Raises if ``A``'s offsets, or (``host``: its concrete data, flat batch) its
    entries, are no stencil on ``grid`` (``function`` names the caller, ``alternative``
    what to do for a matrix that is no stencil)."""
    misfits = _multigrid.stencil_misfits(A.offsets, grid)
    if misfits:
        strides = _multigrid.strides(grid)
        terms = " + ".join(
            f"d{axis + 1}" + (f" * {stride}" if stride != 1 else "")
            for axis, stride in enumerate(strides)
        )
        fitting = sorted(_multigrid.stencil_offsets(grid))
        raise ValueError(
            f"{function}: A's offset {misfits[0]} does not fit a stencil on grid {grid}"
            + (f" (nor do {misfits[1:]})" if len(misfits) > 1 else "")
            + f": the neighbours of a grid point lie at offsets {terms} with each d in "
            f"{{-1, 0, 1}}, i.e. {fitting}. Check the grid's shape and order (C order, as "
            f"np.ravel), or {alternative} for matrices that are no stencil"
        )
    if host is None:
        return
    for member, values in enumerate(host):
        wrapped = _multigrid.wrapped_entries(values, A.offsets, grid)
        if wrapped:
            i, j, value = wrapped[0]
            where = f" (batch member {member})" if len(host) > 1 else ""
            raise ValueError(
                f"{function}: A[{i}, {j}] = {value}{where} couples grid points "
                f"{_point(i, grid)} and {_point(j, grid)}, which are no "
                f"neighbours on grid {grid}, so A is no stencil on it (periodic boundaries, "
                "or the wrong grid shape?)"
            )


def _point(index: int, grid: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(index, grid))


def _as_plan(
    coarsening: Any,
    A: DiaMatrix,
    host: np.ndarray | None,
    grid: tuple[int, ...],
    max_coarse: int,
    max_levels: int,
) -> tuple[tuple[int, ...], ...]:
    if isinstance(coarsening, str):
        if coarsening == "full":
            return _multigrid.full_plan(grid, max_coarse, max_levels)
        if coarsening == "auto":
            if host is None:
                raise TypeError(
                    "multigrid: coarsening='auto' chooses the coarsening from A's values, "
                    "which are traced here (inside jit, vmap or grad). Build the "
                    "preconditioner once outside, M = jaxdia.multigrid(A, grid, "
                    "coarsening='auto'), and pass coarsening=M.coarsening inside."
                )
            return _multigrid.auto_plan(host, A.offsets, grid, max_coarse, max_levels)
        raise ValueError(
            f"multigrid: coarsening must be 'full', 'auto' or a sequence of axes tuples, got "
            f"{coarsening!r}"
        )
    if not isinstance(coarsening, Sequence):
        raise TypeError(
            "multigrid: coarsening must be 'full', 'auto' or a sequence of axes tuples (one "
            f"per coarsening step), got {type(coarsening).__name__}"
        )
    plan = []
    level_grid = grid
    for level, axes in enumerate(coarsening):
        if is_int(axes):
            axes = (axes,)
        if not isinstance(axes, Sequence) or not all(is_int(a) for a in axes):
            raise TypeError(
                f"multigrid: coarsening[{level}] must be a tuple of axes (ints), got {axes!r}"
            )
        axes = tuple(sorted(int(a) for a in axes))
        bad = [a for a in axes if not 0 <= a < len(grid)]
        if not axes or bad or len(set(axes)) != len(axes):
            raise ValueError(
                f"multigrid: coarsening[{level}] = {axes} must be distinct axes of the "
                f"{len(grid)}-D grid (0 to {len(grid) - 1}), at least one"
            )
        small = [a for a in axes if level_grid[a] < 2]
        if small:
            raise ValueError(
                f"multigrid: coarsening[{level}] coarsens axis {small[0]} of grid {level_grid}, "
                "which has fewer than 2 points"
            )
        plan.append(axes)
        level_grid = _multigrid.coarse_grid(level_grid, axes)
    return tuple(plan)


@functools.partial(jax.jit, static_argnames=("offsets", "grid", "plan", "smoother", "sweeps"))
def _setup(data: Array, *, offsets, grid, plan, smoother, sweeps) -> _multigrid.Hierarchy:
    """The hierarchies of a batch ``(B, n_diags, n)`` as one compiled call, without the
    finest operator (``A`` itself, which the caller puts back: returning it from the
    compiled call would copy it)."""
    n = data.shape[-1]

    def one(values):
        hierarchy = _multigrid.setup(
            DiaParts(values, offsets, (n, n)), grid, plan, smoother, sweeps
        )
        hierarchy.operators = (None, *hierarchy.operators[1:])
        return hierarchy

    return jax.vmap(one)(data)


def multigrid(
    A: DiaMatrix,
    grid: Any,
    *,
    smoother: str = "chebyshev",
    sweeps: int = 2,
    coarsening: Any = "full",
    max_coarse: int = 500,
    max_levels: int | None = None,
    dtype: Any = None,
) -> Multigrid:
    """A geometric multigrid V-cycle preconditioner for a stencil matrix on a grid.

    ``A`` must be a stencil on ``grid`` (``(n1,)``, ``(n1, n2)`` or ``(n1, n2, n3)``):
    its unknowns are the grid's points in C order (as ``np.ravel`` lays them out, and as
    ``pyamg.gallery.poisson`` and ``stencil_grid`` number them), and each row couples a
    point only to itself and its neighbours (``|i_a - j_a| <= 1`` on every axis: 3-, 5-,
    7-, 9- or 27-point stencils), with Dirichlet boundaries eliminated. Coefficients may
    vary from point to point.

    The hierarchy halves the grid along the coarsened axes (an axis of ``n`` points keeps
    ``n // 2``, odd and even ``n`` alike); interpolation is (bi/tri)linear, restriction its
    transpose, and each coarse operator the Galerkin product ``R A P``, a DiaMatrix of at
    most 3, 9 or 27 diagonals (``M.levels``). The smoother runs ``sweeps`` products with
    the level's matrix before and after the coarse correction; the coarsest level is
    solved directly by a dense LU factorized once, here. For a symmetric positive definite
    ``A`` the V-cycle is symmetric positive definite, so it is a valid preconditioner for
    conjugate gradients (with the polynomial smoothers; the ``"ilu"`` one makes it
    nonsymmetric, a preconditioner for :func:`jaxdia.bicgstab`).

    ``M`` plugs in as ``M=`` of :func:`jaxdia.cg`, :func:`jaxdia.bicgstab` and
    ``jax.scipy.sparse.linalg.cg``/``gmres``/``bicgstab``. For ``lineax``, wrap it as an
    operator: ``lineax.FunctionLinearOperator(M, jax.ShapeDtypeStruct((n,), dtype),
    lineax.positive_semidefinite_tag)`` and pass ``options={"preconditioner": ...}`` to
    ``lineax.linear_solve`` (with ``lineax.CG`` or ``lineax.GMRES``).

    The setup is one compiled call, and works under ``jit`` (``grid`` and the options
    are static) and ``vmap``; a batched ``A`` (matrices sharing offsets) gives a batched
    hierarchy. Differentiate the solve, not the preconditioner:
    ``jax.grad`` through ``jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid))`` with respect to
    ``A.data`` and ``b`` is the gradient of the exact solution (implicit
    differentiation), which never differentiates through ``M``.

    Args:
      A: a square DiaMatrix of float32 or float64, possibly batched.
      grid: the grid's points per axis; ``prod(grid)`` must equal ``A.shape[0]``.
      smoother: ``"chebyshev"`` (the Chebyshev polynomial in ``D^-1 A`` smallest on the
        upper 5/6 of its spectrum, bounded by Gershgorin's theorem), ``"jacobi"``
        (damped Jacobi, weight ``1.6 / rho`` for that bound ``rho``) or ``"ilu"`` (steps
        ``x += (L U)^-1 (b - A x)`` with each level's ILU(0), as :func:`jaxdia.ilu0`
        factors it with a grid: the smoother that keeps multigrid converging where
        convection dominates, at the cost of two triangular solves per step; a zero
        pivot is not reported, it makes ``M(v)`` NaN).
      sweeps: products with ``A`` per smoothing (the polynomial's degree; ILU steps for
        ``"ilu"``, of which 1 is usually the fastest), before and after the coarse
        correction.
      coarsening: ``"full"`` halves every axis at every level. ``"auto"`` halves only the
        axes whose coupling is at least half the strongest one's (semi-coarsening, for
        anisotropic problems); it reads ``A``'s values, so it needs a concrete ``A``
        (outside ``jit``); ``M.coarsening`` then records the choice. Or a sequence with
        the axes to halve at each level, e.g. ``[(1,), (1,), (0, 1)]``: the levels stop
        there.
      max_coarse: stop coarsening at this many unknowns or fewer (``"full"`` and
        ``"auto"``); at most 4096, the coarsest level is factorized (a banded LU).
      max_levels: the most levels, the finest included (None: no limit).
      dtype: the precision of the hierarchy and the cycle, float32 or float64 (default
        ``A``'s). ``jnp.float32`` for a float64 ``A`` halves the memory traffic of the
        setup and of every cycle (the finest level keeps a float32 copy of ``A``); ``M``
        is then exact to about ``1e-7`` relative, which conjugate gradients in float64
        tolerates to tolerances far below that (the same iterations at 1e-8 in the
        benchmarks, a few more at 1e-10), and linear and symmetric up to that rounding.

    Returns:
      A :class:`jaxdia.Multigrid`, callable on vectors: it computes in ``dtype`` and
      returns the promoted dtype of ``v`` and ``dtype``.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix, its dtype or ``dtype`` is not
        float32/float64, or ``coarsening="auto"`` gets a traced ``A``.
      ValueError: if ``A`` is not square, ``prod(grid)`` differs from its size, an
        offset does not fit a stencil on ``grid`` (the message names it), it stores no
        main diagonal, an option is out of range, or the coarsest level would exceed 4096
        unknowns. For a concrete ``A`` also: a zero on the diagonal, or a nonzero entry
        on a stencil diagonal that couples points which are no neighbours (periodic
        boundaries, or a grid of the wrong shape).

    Example:
      >>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> n = 64
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).astype("float32"))  # 2-D, C order
      >>> M = jaxdia.multigrid(A, (n, n))
      >>> [level.shape[0] for level in M.levels]
      [4096, 1024, 256]
      >>> x, info = jaxdia.cg(A, jnp.ones(n * n), M=M, rtol=1e-4)
      >>> bool(info.converged), int(info.iterations) < 10
      (True, True)
    """
    A = square(A, "multigrid")
    if A.dtype not in (np.float32, np.float64):
        raise TypeError(
            f"multigrid: A must be float32 or float64, got {A.dtype.name} (convert with "
            "A.astype(jnp.float32))"
        )
    if dtype is not None and np.dtype(dtype) not in (np.float32, np.float64):
        raise TypeError(f"multigrid: dtype must be float32 or float64, got {np.dtype(dtype).name}")
    grid = _as_grid(grid, A.shape[0])
    if smoother not in _multigrid.SMOOTHERS:
        raise ValueError(
            f"multigrid: smoother must be one of {_multigrid.SMOOTHERS}, got {smoother!r}"
        )
    sweeps = static_int(sweeps, "multigrid: sweeps")
    max_coarse = static_int(max_coarse, "multigrid: max_coarse")
    levels = 10**9 if max_levels is None else static_int(max_levels, "multigrid: max_levels")
    if sweeps < 1 or not 1 <= max_coarse <= MAX_COARSE or levels < 1:
        raise ValueError(
            f"multigrid: need sweeps >= 1, 1 <= max_coarse <= {MAX_COARSE} and max_levels >= 1, "
            f"got sweeps={sweeps}, max_coarse={max_coarse}, max_levels={max_levels}"
        )
    # The concrete data on the host, once, for the checks and coarsening="auto".
    host = None if is_traced(A.data) else np.asarray(A.data).reshape(-1, *A.data.shape[-2:])
    _check_stencil(A, grid, host)
    _check_diagonal("multigrid", A)
    plan = _as_plan(coarsening, A, host, grid, max_coarse, levels)
    coarsest = grid
    for axes in plan:
        coarsest = _multigrid.coarse_grid(coarsest, axes)
    if math.prod(coarsest) > MAX_COARSE:
        raise ValueError(
            f"multigrid: the coarsest level would be grid {coarsest} "
            f"({math.prod(coarsest)} unknowns); its direct solve is a banded LU, so at most "
            f"{MAX_COARSE}: allow more levels (max_levels, coarsening)"
        )
    batch = A.batch_shape
    if dtype is not None and np.dtype(dtype) != A.dtype:
        A = A.astype(dtype)
    hierarchy = _setup(
        _flat_batch(A.data),
        offsets=A.offsets,
        grid=grid,
        plan=plan,
        smoother=smoother,
        sweeps=sweeps,
    )
    hierarchy = _unflatten(hierarchy, batch)
    hierarchy.operators = (A._parts, *hierarchy.operators[1:])
    return Multigrid(hierarchy)


# -- Chebyshev polynomial preconditioner ------------------------------------------------


def default_lower(degree: int) -> float:
    """The lower end of the default interval, as a fraction of the upper bound: about
    where the Chebyshev polynomial of ``degree`` starts to pay in conjugate gradients
    (tuned on 2-D Poisson; see benchmarks/README.md)."""
    return 1.0 / degree**2


@jax.tree_util.register_pytree_node_class
class Chebyshev:
    """A Chebyshev polynomial preconditioner, the one :func:`jaxdia.chebyshev` returns.

    ``M(v) = p(D^-1 A) D^-1 v``: ``degree`` steps of Chebyshev iteration for ``A x = v``
    from ``x = 0``, damping the spectrum of ``D^-1 A`` on ``[lower, upper]``
    (``degree - 1`` products with ``A``), computed in ``operator``'s dtype and returned in
    the promoted dtype of ``v`` and the bounds. It uses nothing but ``operator @ v``, the
    inverse diagonal and the two bounds, so any operator with ``@`` (and a pytree, to
    pass through transformations) can be wrapped: ``jaxdia.Chebyshev(operator,
    inverse_diagonal, lower, upper, degree)`` (``inverse_diagonal`` None: no scaling). For
    a DiaMatrix the product is written so that XLA fuses each step into one loop.

    Attributes:
      operator: the matrix (or operator) the polynomial is in.
      inverse_diagonal: ``1 / diag(A)``, shape ``(*batch_shape, n)``, or None.
      lower, upper: the interval damped, shape ``batch_shape``.
      degree: the polynomial's degree (static).

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> M = jaxdia.chebyshev(A, degree=4)
      >>> M.degree, M(jnp.ones(50)).shape
      (4, (50,))
    """

    def __init__(self, operator: Any, inverse_diagonal: Any, lower: Any, upper: Any, degree: int):
        self.operator = operator
        self.inverse_diagonal = inverse_diagonal
        self.lower = lower
        self.upper = upper
        self.degree = degree

    def tree_flatten(self) -> tuple[tuple[Any, ...], int]:
        return (self.operator, self.inverse_diagonal, self.lower, self.upper), self.degree

    @classmethod
    def tree_unflatten(cls, degree: int, children: tuple[Any, ...]) -> Chebyshev:
        operator, inverse_diagonal, lower, upper = children
        return cls(operator, inverse_diagonal, lower, upper, degree)

    def __call__(self, v: Any) -> Array:
        v = as_array(v, "Chebyshev: v")
        inverse = self.inverse_diagonal
        lower, upper = jnp.asarray(self.lower), jnp.asarray(self.upper)
        result = jnp.result_type(v.dtype, lower.dtype)
        if not jnp.issubdtype(result, jnp.inexact):
            result = jnp.result_type(float)
        operator = self.operator
        if isinstance(operator, DiaMatrix):
            # In the matrix's precision (jaxdia.chebyshev(..., dtype=) may have narrowed it).
            work = np.dtype(operator.dtype)
            if jnp.issubdtype(result, jnp.complexfloating):
                work = np.dtype(jnp.result_type(work, jnp.complex64))
            matvec = _multigrid.fusible_product(operator._parts)
        else:
            work = result
            matvec = _vector_product(operator)

        def scale(r):
            return r if inverse is None else inverse.astype(work) * r

        x, _ = _multigrid.chebyshev_steps(
            matvec,
            scale,
            v.astype(work),
            None,
            lower.astype(work)[..., None],
            upper.astype(work)[..., None],
            self.degree,
            residual=False,
            # Unrolled, XLA would recompute the fused product in each consumer.
            unroll=False if isinstance(operator, DiaMatrix) else None,
        )
        return x.astype(result)


def chebyshev(
    A: DiaMatrix, degree: int = 16, *, bounds: Any = None, dtype: Any = None
) -> Chebyshev:
    """A Chebyshev polynomial preconditioner for a Hermitian positive definite ``A``.

    ``M(v)`` is ``degree`` steps of Chebyshev iteration on ``D^-1 A x = D^-1 v`` from
    zero (``D`` the diagonal): a fixed polynomial in ``A``, so ``M`` is linear, and
    Hermitian positive definite when the bounds hold (valid for conjugate gradients). It
    costs ``degree - 1`` products with ``A`` and a few vector updates, fused into one
    loop per step, and nothing else: no triangular solves and no setup beyond the
    diagonal, so it runs unchanged wherever ``A @ v`` runs (GPU, TPU, a sharded matrix).
    Each conjugate-gradient iteration then does the work of about ``degree`` iterations
    of Jacobi-preconditioned CG (the product count stays about the same) with far fewer
    inner products and vector passes; for a structured grid, :func:`jaxdia.multigrid`
    needs far fewer products.

    ``bounds`` default to ``[rho / degree^2, rho]`` with ``rho`` Gershgorin's bound on the
    spectrum of ``D^-1 A`` (its largest absolute row sum, from the stored diagonals):
    the polynomial damps the upper part of the spectrum, which dominates for
    discretized PDEs, and conjugate gradients handles the eigenvalues below.

    ``dtype=jnp.float32`` for a float64 ``A`` applies the polynomial in single precision
    (the matrix is converted once, here): half the memory traffic, for a preconditioner
    that is exact to about ``1e-7`` relative, which conjugate gradients tolerates down to
    tolerances far below that (the same iterations at 1e-8, a few more at 1e-10 in the
    tests; the solve itself stays in float64). ``M`` is then linear and symmetric only up
    to that rounding.

    Args:
      A: a square DiaMatrix (float or complex), possibly batched; or a
        :class:`jaxdia.ShardedDiaMatrix` (any operator with ``@``, ``shape``,
        ``diagonal()`` and ``abs()``): ``M`` then works on its sharded vectors, each step
        one sharded product (its halo exchange) and no inner product.
      degree: the polynomial's degree, >= 1 (1 is the Jacobi preconditioner scaled by a
        constant). Higher degrees mean fewer conjugate-gradient iterations at about the
        same number of products.
      bounds: ``(lower, upper)`` with ``0 < lower < upper``: the part of the spectrum of
        ``D^-1 A`` to damp (scalars, or arrays of ``A.batch_shape``). ``upper`` must bound
        the spectrum, or ``M`` may be indefinite.
      dtype: the precision the polynomial is applied in (default ``A.dtype``): a float
        (or complex for complex ``A``) dtype no wider than ``A``'s (a DiaMatrix only).

    Returns:
      A :class:`jaxdia.Chebyshev`, callable on vectors ``(n,)`` (``(*batch_shape, n)``).

    Raises:
      TypeError: if ``A`` is not a DiaMatrix or an operator, or ``dtype`` is not a
        float/complex type (or is given for an operator).
      ValueError: if ``A`` is not square, stores no main diagonal, ``degree < 1``,
        concrete ``bounds`` are not ``0 < lower < upper``, or (for a concrete ``A``) its
        diagonal holds a zero.

    Example:
      >>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> n = 32
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).astype("float32"))
      >>> b = jnp.ones(n * n)
      >>> _, plain = jaxdia.cg(A, b, M=jaxdia.jacobi(A), rtol=1e-4)
      >>> _, poly = jaxdia.cg(A, b, M=jaxdia.chebyshev(A, degree=8), rtol=1e-4)
      >>> bool(poly.converged), int(poly.iterations) < int(plain.iterations) // 4
      (True, True)
    """
    degree = static_int(degree, "chebyshev: degree")
    if degree < 1:
        raise ValueError(f"chebyshev: degree must be >= 1, got {degree}")
    if not isinstance(A, DiaMatrix) and is_operator(A):
        return _operator_chebyshev(A, degree, bounds, dtype)
    A = square(A, "chebyshev")
    if dtype is not None:
        dtype = np.dtype(dtype)
        if not jnp.issubdtype(dtype, jnp.inexact) or (
            jnp.issubdtype(A.dtype, jnp.complexfloating)
            != jnp.issubdtype(dtype, jnp.complexfloating)
        ):
            kind = "complex" if jnp.issubdtype(A.dtype, jnp.complexfloating) else "float"
            raise TypeError(
                f"chebyshev: dtype must be a {kind} dtype for A of dtype {A.dtype.name}, got "
                f"{dtype.name}"
            )
    _check_diagonal("chebyshev", A)
    batch = A.batch_shape
    inverse, rho = _bounds(_flat_batch(A.data), offsets=A.offsets, shape=A.shape)
    inverse, rho = inverse.reshape(*batch, -1), rho.reshape(batch)
    lower, upper = _chebyshev_bounds(bounds, rho, degree)
    operator = A
    if dtype is not None and dtype != A.dtype:
        operator, inverse = A.astype(dtype), inverse.astype(dtype)
    return Chebyshev(operator, inverse, lower, upper, degree)


def _chebyshev_bounds(bounds: Any, rho: Array, degree: int) -> tuple[Array, Array]:
    """``(lower, upper)``: the given ``bounds`` checked, or ``[rho / degree^2, rho]``."""
    if bounds is None:
        return rho * default_lower(degree), rho
    if isinstance(bounds, (str, bytes)) or not isinstance(bounds, Sequence) or len(bounds) != 2:
        raise TypeError(f"chebyshev: bounds must be a pair (lower, upper), got {bounds!r}")
    lower, upper = (
        jnp.broadcast_to(jnp.asarray(as_array(b, "chebyshev: bounds"), rho.dtype), rho.shape)
        for b in bounds
    )
    concrete = not (is_traced(lower) or is_traced(upper))
    if concrete and not bool(jnp.all((lower > 0) & (lower < upper))):
        raise ValueError(f"chebyshev: bounds must satisfy 0 < lower < upper, got {tuple(bounds)}")
    return lower, upper


def _operator_chebyshev(A: Any, degree: int, bounds: Any, dtype: Any) -> Chebyshev:
    """:func:`chebyshev` for an operator with ``@``, ``shape``, ``diagonal()`` and
    ``abs()`` (a :class:`jaxdia.ShardedDiaMatrix`): Gershgorin's bound from
    ``abs(A) @ ones``, everything in the vectors' layout (``diagonal()``'s)."""
    square_operator(A, "chebyshev")
    if dtype is not None:
        raise TypeError(
            f"chebyshev: dtype= converts a DiaMatrix; {type(A).__name__} is used in its own "
            "dtype (convert it before sharding)"
        )
    diagonal = A.diagonal()
    inverse, rho = _multigrid.smoothing_data(diagonal, abs(A) @ jnp.ones_like(diagonal))
    lower, upper = _chebyshev_bounds(bounds, rho, degree)
    return Chebyshev(A, inverse, lower, upper, degree)


@functools.partial(jax.jit, static_argnames=("offsets", "shape"))
def _bounds(data: Array, *, offsets, shape) -> tuple[Array, Array]:
    """``(1 / diag, Gershgorin bound of D^-1 A)`` of a batch ``(B, n_diags, n)``."""
    return jax.vmap(lambda d: _multigrid.gershgorin(DiaParts(d, offsets, shape)))(data)


# -- Krylov solvers that report -----------------------------------------------------------


class SolveInfo(NamedTuple):
    """What :func:`jaxdia.cg` and :func:`jaxdia.bicgstab` report (a pytree, one entry per
    system of a batch).

    Attributes:
      iterations: the iterations run (int32).
      residual_norm: ``|b - A x|`` of the returned ``x``, recomputed with one more product
        (not the recursively updated residual the iteration tracks).
      converged: whether ``residual_norm <= max(rtol * |b|, atol)``. False when
        ``maxiter`` ran out, when the method broke down, or when rounding kept the true
        residual above the tolerance that the recursive one met.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(100, 100))
      >>> x, info = jaxdia.cg(A, jnp.ones(100), maxiter=5)
      >>> int(info.iterations), bool(info.converged)
      (5, False)
    """

    iterations: Array
    residual_norm: Array
    converged: Array


def _static_callable(f: Any) -> Any:
    """``f`` as a jit argument: pytrees (DiaMatrix, Multigrid, Partial, ...) as they are,
    a plain function as a ``Partial`` (the function itself is static)."""
    if f is None:
        return None
    if jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(f)):
        return jax.tree_util.Partial(f)
    return f


def _solve_args(function: str, A: Any, b: Any, M: Any, x0: Any, maxiter: Any):
    if isinstance(A, DiaMatrix):
        A = square(A, function)
        n, batch, dtype = A.shape[0], A.batch_shape, A.dtype
    elif callable(A):
        n, batch, dtype = None, (), None
    else:
        raise TypeError(
            f"{function}: A must be a jaxdia.DiaMatrix or a function v -> A v, got "
            f"{type(A).__name__}"
        )
    b = as_array(b, f"{function}: b")
    if b.ndim == 0 or (n is not None and b.shape[-1] != n):
        raise ValueError(
            f"{function}: b must have shape ({n if n is not None else 'n'},) or (..., n), got "
            f"shape {b.shape}"
        )
    n = b.shape[-1]
    batch = broadcast_batch(f"{function}: A and b", batch, b.shape[:-1])
    if x0 is not None:
        x0 = as_array(x0, f"{function}: x0")
        if x0.ndim == 0 or x0.shape[-1] != n:
            raise ValueError(f"{function}: x0 must have shape ({n},) or (..., {n}), got {x0.shape}")
        batch = broadcast_batch(f"{function}: A, b and x0", batch, x0.shape[:-1])
    if M is not None and not callable(M):
        raise TypeError(
            f"{function}: M must be a preconditioner function v -> M v (e.g. jaxdia.multigrid, "
            f"jaxdia.chebyshev, jaxdia.jacobi), got {type(M).__name__}"
        )
    if maxiter is None:
        maxiter = np.int32(min(10 * n, np.iinfo(np.int32).max))
    elif is_traced(maxiter):  # a traced count is fine: it is an argument of the loop
        maxiter = jnp.asarray(maxiter, np.int32)
    else:
        maxiter = static_int(maxiter, f"{function}: maxiter")
        if maxiter < 0:
            raise ValueError(f"{function}: maxiter must be >= 0, got {maxiter}")
        maxiter = np.int32(min(maxiter, np.iinfo(np.int32).max))
    result = jnp.result_type(*(t for t in (dtype, b.dtype) if t is not None))
    if not jnp.issubdtype(result, jnp.inexact):
        result = jnp.result_type(float)
    return A, b, M, x0, maxiter, batch, np.dtype(result)


@functools.partial(jax.jit, static_argnames=("method", "batch", "dtype"))
def _run_krylov(A, b, x0, M, rtol, atol, maxiter, *, method, batch, dtype):
    """The solve as one compiled call; ``maxiter`` is an argument, so that changing it
    does not compile again."""
    n = b.shape[-1]
    b = jnp.broadcast_to(b.astype(dtype), (*batch, n))
    x0 = None if x0 is None else jnp.broadcast_to(x0.astype(dtype), b.shape)
    matvec = _vector_product(A)
    precondition = (lambda v: v) if M is None else M
    loop = _krylov.cg if method == "cg" else _krylov.bicgstab

    def solve(matvec, rhs):
        limit = _krylov.threshold(rhs, rtol, atol)
        x, iterations = loop(matvec, rhs, x0, precondition, limit, maxiter)
        return x.astype(rhs.dtype), iterations

    x, iterations = lax.custom_linear_solve(
        matvec, b, solve, solve, symmetric=method == "cg", has_aux=True
    )
    residual = _krylov.residual_norm(matvec, b, x)
    converged = residual <= _krylov.threshold(b, rtol, atol)
    return x, SolveInfo(iterations, residual, converged)


def _tolerance(value: Any, name: str) -> Any:
    if is_traced(value):
        return value
    number = float(as_array(value, name))
    if not number >= 0:
        raise ValueError(f"{name} must be >= 0, got {value!r}")
    return number


def cg(
    A: Any,
    b: Any,
    *,
    M: Any = None,
    x0: Any = None,
    rtol: Any = 1e-5,
    atol: Any = 0.0,
    maxiter: int | None = None,
) -> tuple[Array, SolveInfo]:
    """Solves ``A x = b`` by preconditioned conjugate gradients, and says how it went.

    ``A`` must be Hermitian positive definite, and so must ``M``
    (:func:`jaxdia.multigrid` of a symmetric positive definite stencil,
    :func:`jaxdia.chebyshev`, :func:`jaxdia.jacobi`). The iteration is
    ``jax.scipy.sparse.linalg.cg``'s, stopping when ``|b - A x| <= max(rtol * |b|,
    atol)`` (SciPy's rule; JAX calls ``rtol`` ``tol``) or after ``maxiter`` iterations,
    and returns ``(x, info)``: ``info.iterations``, ``info.residual_norm`` (recomputed
    from ``x``) and ``info.converged``, so non-convergence is visible without computing
    the residual by hand.

    It runs as one compiled call (under ``jit`` it is inlined), works under ``vmap``, and
    is differentiable in ``b`` and ``A.data`` by implicit differentiation
    (``lax.custom_linear_solve``, as JAX's solvers): a gradient costs one more solve with
    the same ``M`` and never differentiates through the iterations or the preconditioner.
    A batched ``A`` and/or ``b`` (leading dims) solves independent systems at once, each
    with its own iterations, stopping on its own.

    Args:
      A: a square DiaMatrix (possibly batched), or a function ``v -> A v`` on arrays of
        ``b``'s shape.
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      M: the preconditioner, a function ``v -> M v`` on arrays of ``b``'s shape (None:
        none).
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); an argument of the compiled
        solve (changing it compiles nothing), which may be traced.

    Returns:
      ``(x, info)``: the solution, of the broadcast batch shape and ``b``'s last dim, in
      the promoted dtype of ``A`` and ``b``; and a :class:`jaxdia.SolveInfo` whose fields
      have the batch shape.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix nor a function, or ``M`` is not
        callable.
      ValueError: if ``A`` is not square, the shapes do not fit, or a tolerance or
        ``maxiter`` is negative.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.cg(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-6)
      >>> bool(info.converged), bool(info.residual_norm < 1e-6 * jnp.sqrt(50.0))
      (True, True)
    """
    return _solve("cg", A, b, M, x0, rtol, atol, maxiter)


def bicgstab(
    A: Any,
    b: Any,
    *,
    M: Any = None,
    x0: Any = None,
    rtol: Any = 1e-5,
    atol: Any = 0.0,
    maxiter: int | None = None,
) -> tuple[Array, SolveInfo]:
    """Solves ``A x = b`` by preconditioned BiCGStab, for nonsymmetric ``A``, and says how
    it went.

    The iteration is ``jax.scipy.sparse.linalg.bicgstab``'s (van der Vorst's BiCGStab,
    with right preconditioning by ``M``); everything else (stopping rule, ``info``,
    batches, compilation, implicit differentiation) is as for :func:`jaxdia.cg`. A
    breakdown (a zero inner product) stops the system and leaves ``info.converged``
    False, where JAX's returns NaN. The gradient solves with ``A^T`` using the same
    ``M``, as JAX's does.

    Args:
      A: a square DiaMatrix (possibly batched), or a function ``v -> A v``.
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      M: the preconditioner, a function ``v -> M v`` (None: none).
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on the residual norm.
      maxiter: the most iterations (default ``10 * n``); each costs two products with
        ``A`` and two applications of ``M``.

    Returns:
      ``(x, info)`` as :func:`jaxdia.cg`.

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix nor a function, or ``M`` is not
        callable.
      ValueError: if ``A`` is not square, the shapes do not fit, or a tolerance or
        ``maxiter`` is negative.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.2, 2.5, -0.8], offsets=[-1, 0, 1], shape=(50, 50))
      >>> x, info = jaxdia.bicgstab(A, jnp.ones(50), M=jaxdia.jacobi(A), rtol=1e-5)
      >>> bool(info.converged)  # float32 (x64 off): 1e-5 is well above its rounding
      True
    """
    return _solve("bicgstab", A, b, M, x0, rtol, atol, maxiter)


def _solve(method, A, b, M, x0, rtol, atol, maxiter):
    A, b, M, x0, maxiter, batch, dtype = _solve_args(method, A, b, M, x0, maxiter)
    rtol = _tolerance(rtol, f"{method}: rtol")
    atol = _tolerance(atol, f"{method}: atol")
    return _run_krylov(
        _static_callable(A),
        b,
        x0,
        _static_callable(M),
        rtol,
        atol,
        maxiter,
        method=method,
        batch=batch,
        dtype=dtype,
    )
