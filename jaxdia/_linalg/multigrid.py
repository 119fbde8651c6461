"""The multigrid preconditioner: :func:`multigrid` and :class:`Multigrid`.

:func:`multigrid` checks its arguments, chooses the coarsening and builds the hierarchy
(:mod:`jaxdia._linalg.multigrid_hierarchy`: with NumPy on the host for a concrete
matrix, else as one compiled call) or, for a sharded matrix, the sharded one
(:mod:`jaxdia._linalg.sharded_multigrid`); :class:`Multigrid` applies its V-cycle.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .. import _dispatch
from .._checks import as_array, broadcast_batch, is_int, is_traced, static_int
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from .._pytree import Immutable
from .._scipy_operator import ScipyOperator
from .._shard import ShardedDiaMatrix
from .._typing import ArrayLike, DTypeLike, Grid
from .banded import Factor
from .multigrid_hierarchy import (
    MAX_COARSE,
    Hierarchy,
    Plan,
    auto_plan,
    coarse_factor,
    coarse_grid,
    full_plan,
    host_setup,
    setup,
    vcycle,
)
from .sharded_multigrid import GATHER_BELOW, ShardedMultigrid, build, sharded_operand
from .smoothers import SMOOTHERS, check_diagonal
from .stencil import StaticGrid, as_grid, check_stencil

_Tree = TypeVar("_Tree")


def _flat_batch(data: Array) -> Array:
    return data.reshape(-1, *data.shape[-2:])


def _unflatten(tree: _Tree, batch: tuple[int, ...]) -> _Tree:
    return jax.tree.map(lambda leaf: leaf.reshape(*batch, *leaf.shape[1:]), tree)


# -- multigrid -------------------------------------------------------------------------------


@jax.tree_util.register_pytree_with_keys_class
class Multigrid(Immutable, ScipyOperator):
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

    # __weakref__: a preconditioner is a function, which jax.jit(M) refers to weakly.
    __slots__ = ("_hierarchy", "__weakref__")
    _leaves = ("_hierarchy",)
    _name = "Multigrid"
    _hierarchy: Hierarchy

    def __init__(self, hierarchy: Hierarchy):
        self._assign(hierarchy)

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

    def __call__(self, v: ArrayLike) -> Array:
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

    def _columns(self, x: Array | np.ndarray, adjoint: bool) -> Array:
        if adjoint:
            raise NotImplementedError(
                "Multigrid.rmatvec: the adjoint of a V-cycle is not computed (for a "
                "Hermitian A the cycle is Hermitian: use matvec; otherwise build "
                "jaxdia.multigrid(A.H, grid)). SciPy's cg, bicgstab, gmres and minres call "
                "only M.matvec"
            )
        return self(x) if x.ndim == 1 else self(x.T).T

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
def _apply(hierarchy: Hierarchy, v: Array, *, batch: tuple[int, ...]) -> Array:
    """The V-cycle on ``v`` of shape ``(*vbatch, n)`` with the hierarchy's batch
    broadcast to ``batch``, as one compiled call. A real hierarchy's cycle has real
    coefficients: a complex ``v`` runs as its real and imaginary parts, side by side in
    one batch (one cycle in the program, not two)."""
    dtype = hierarchy.operators[-1].data.dtype
    n = v.shape[-1]
    split_complex = jnp.iscomplexobj(v) and not jnp.issubdtype(dtype, jnp.complexfloating)
    v = jnp.broadcast_to(v, (*batch, n)).reshape(-1, n)
    cycle: Callable[[Hierarchy, Array], Array] = vcycle
    if split_complex:
        v = jnp.stack([v.real, v.imag], axis=1)
        cycle = jax.vmap(vcycle, in_axes=(None, 0))  # (h, (2, n)) -> (2, n)
    v = v.astype(dtype)
    own = hierarchy.operators[-1].data.shape[:-2]
    if not own and v.shape[0] == 1:
        # One vector stays one: vmap over a batch of one would carry (n, 1, 1) arrays
        # through the products' batching, which TPU tiles one row per element.
        out = cycle(hierarchy, v[0])[None]
    elif not own:
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


#: The dtypes of a hierarchy (the smoothers divide by the diagonal, the coarsest level is
#: factored: 16-bit floats would lose the cycle's accuracy).
_HIERARCHY_DTYPES = tuple(
    np.dtype(t) for t in (np.float32, np.float64, np.complex64, np.complex128)
)


#: The smoothers of a hierarchy on one device: the polynomial ones, and ILU(0) steps.
MULTIGRID_SMOOTHERS = (*SMOOTHERS, "ilu")


def _as_plan(
    coarsening: object,
    A: DiaMatrix | ShardedDiaMatrix,
    host: np.ndarray | None,
    grid: tuple[int, ...],
    max_coarse: int | None,
    max_levels: int,
) -> tuple[tuple[int, ...], ...]:
    if isinstance(coarsening, str):
        if coarsening == "full":
            return full_plan(grid, max_coarse, max_levels)
        if coarsening == "auto":
            if host is None:
                raise TypeError(
                    "multigrid: coarsening='auto' chooses the coarsening from A's values, "
                    "which are traced here (inside jit, vmap or grad). Build the "
                    "preconditioner once outside, M = jaxdia.multigrid(A, grid, "
                    "coarsening='auto'), and pass coarsening=M.coarsening inside."
                )
            return auto_plan(host, A.offsets, grid, max_coarse, max_levels)
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
        level_grid = coarse_grid(level_grid, axes)
    return tuple(plan)


@functools.partial(jax.jit, static_argnames=("offsets", "grid", "plan", "smoother", "sweeps"))
def _setup(data: Array, *, offsets, grid, plan, smoother, sweeps) -> Hierarchy:
    """The hierarchies of a batch ``(B, n_diags, n)`` as one compiled call, without the
    finest operator (``A`` itself, which the caller puts back: returning it from the
    compiled call would copy it)."""
    n = data.shape[-1]

    def one(values):
        hierarchy = setup(DiaParts(values, offsets, (n, n)), grid, plan, smoother, sweeps)
        return hierarchy._replace(operators=(None, *hierarchy.operators[1:]))

    return jax.vmap(one)(data)


def _host_setup_pays(A: DiaMatrix) -> bool:
    """Whether ``multigrid`` builds a concrete ``A``'s hierarchy with NumPy on the host
    (see :func:`_host_hierarchy`); :func:`jaxdia._dispatch.host_setup_pays` decides."""
    return _dispatch.host_setup_pays(A.data.size)


def _host_hierarchy(
    host: np.ndarray,
    batch: tuple[int, ...],
    offsets: tuple[int, ...],
    grid: StaticGrid,
    plan: Plan,
    smoother: str,
    sweeps: int,
) -> Hierarchy:
    """:func:`_setup`'s hierarchy of a concrete flat batch ``host`` ``(B, n_diags, n)``
    (NumPy) for the polynomial smoothers, its leaves shaped by ``batch``, built with NumPy
    (:func:`jaxdia._linalg.multigrid_hierarchy.host_setup`): the compiled setup's program grows
    with the levels (its compilation dominates the setup of a large grid), the host's work is a few
    dozen array operations per level. Only the coarsest level's factorization is
    compiled (a small program); the arrays go to the device in one transfer."""
    members = [host_setup(values, offsets, grid, plan) for values in host]

    def stacked(arrays: list[np.ndarray]) -> np.ndarray:
        return np.stack(arrays).reshape((*batch, *np.shape(arrays[0])))

    levels = range(len(plan))
    operators = tuple(
        members[0][0][level].with_data(stacked([m[0][level].data for m in members]))
        for level in levels
    )
    inverses = tuple(stacked([m[1][level] for m in members]) for level in levels)
    bounds = tuple(stacked([m[2][level] for m in members]) for level in levels)
    operators, inverses, bounds = jax.device_put((operators, inverses, bounds))
    if plan:
        coarsest, coarsest_offsets = operators[-1].data, operators[-1].offsets
    else:
        coarsest, coarsest_offsets = host.reshape((*batch, *host.shape[1:])), offsets
    coarse_lu = _coarse_factors(coarsest, offsets=coarsest_offsets, batch=batch)
    grids = [grid]
    for axes in plan:
        grids.append(coarse_grid(grids[-1], axes))
    return Hierarchy._make(
        (None, *operators), inverses, bounds, coarse_lu, (), tuple(grids), plan, smoother, sweeps
    )


@functools.partial(jax.jit, static_argnames=("offsets", "batch"))
def _coarse_factors(
    data: Array, *, offsets: tuple[int, ...], batch: tuple[int, ...]
) -> Factor | Array:
    """The coarsest level's solvers (:func:`jaxdia._linalg.multigrid_hierarchy.coarse_factor`) of
    a batch ``(*batch, n_diags, n)``, as one compiled call."""
    n = data.shape[-1]
    flat = data.reshape(-1, *data.shape[-2:])
    factors = jax.vmap(lambda values: coarse_factor(DiaParts(values, offsets, (n, n))))(flat)
    return _unflatten(factors, batch)


def multigrid(
    A: DiaMatrix | ShardedDiaMatrix,
    grid: int | Grid,
    *,
    smoother: str | None = None,
    sweeps: int = 2,
    coarsening: str | Sequence[int | Sequence[int]] = "full",
    max_coarse: int | None = None,
    max_levels: int | None = None,
    dtype: DTypeLike | None = None,
    gather_below: int = GATHER_BELOW,
    deep_halo: bool = False,
) -> Multigrid | ShardedMultigrid:
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
    solved directly by a banded LU factorized once, here. For a symmetric positive
    definite ``A`` the V-cycle is symmetric positive definite, so it is a valid
    preconditioner for conjugate gradients (with the polynomial smoothers; the ``"ilu"``
    one makes it nonsymmetric, a preconditioner for :func:`jaxdia.bicgstab`).

    Complex matrices (a Hermitian stencil, a complex-shifted Laplacian ``L + s I``,
    Crank-Nicolson's ``I + i dt/2 H``) get the same hierarchy in complex arithmetic,
    smoothed by damped Jacobi: the eigenvalues of ``D^-1 A`` (whose diagonal is 1) lie
    in Gershgorin's disk ``|lambda - 1| <= r``, ``r`` the largest off-diagonal row sum
    of ``D^-1 A``, and the weight ``1.6 / (1 + r)`` makes each sweep a contraction on
    that disk for diagonally dominant rows (``r < 1``: any Crank-Nicolson step, any
    shift with a positive imaginary part and a nonnegative real one). The Chebyshev
    smoother damps a real interval, no bound off the real axis (its V-cycles diverged on
    ``L + (-2 + 3i) I`` in the tests), so it is refused for complex ``A``. The cycle of
    a complex symmetric ``A`` (``A^T = A``) is complex symmetric, not Hermitian: use it
    with :func:`jaxdia.bicgstab` (iteration counts in benchmarks/README.md), with
    :func:`jaxdia.cg` only for a Hermitian positive definite ``A``.

    ``A`` may be a :class:`jaxdia.ShardedDiaMatrix` (or an unbatched DiaMatrix whose
    ``data`` columns are split over one mesh axis, which is sharded with
    :func:`jaxdia.shard`): ``M`` is then a :class:`jaxdia.ShardedMultigrid` on its
    sharded vectors. The rows are split in C order, so each device holds whole planes of
    the slowest axis (``grid[0]`` must be a multiple of the device count ``P``). The
    finest level is sharded; a coarser level stays sharded while it has at least 2
    planes and ``gather_below`` unknowns per device, is not the coarsest, and the level
    above it coarsened into it with its shards aligned (an even number of planes per
    device whenever axis 0 is coarsened: with ``grid[0] = P 2^k`` the first ``k``
    levels can be sharded). Its smoothing, transfers and Galerkin operator then exchange
    halos with the neighbouring devices only. The first level that fails is gathered
    once, in the setup (from a last sharded level with an odd number of planes per
    device, by restricting the coarse planes each device owns); from it on the
    hierarchy is built and applied on every device (replicated, the coarsest solve
    included), so a V-cycle has one all-gather, of that level's residual. The same
    iterations as on one device, to rounding. Its
    values never come to the host, so the checks that read them (wrapped entries) are
    skipped, the zero-diagonal check is a reduction on the devices, and
    ``coarsening="auto"`` is not available (pass the axes, e.g. a single-device
    ``M.coarsening``).

    ``M`` plugs in as ``M=`` of :func:`jaxdia.cg`, :func:`jaxdia.bicgstab` and
    ``jax.scipy.sparse.linalg.cg``/``gmres``/``bicgstab``. For ``lineax``, wrap it as an
    operator: ``lineax.FunctionLinearOperator(M, jax.ShapeDtypeStruct((n,), dtype),
    lineax.positive_semidefinite_tag)`` and pass ``options={"preconditioner": ...}`` to
    ``lineax.linear_solve`` (with ``lineax.CG`` or ``lineax.GMRES``).

    For a concrete ``A`` (outside ``jit``) the setup runs with NumPy on the host, where
    it costs a few dozen array operations per level and nothing to compile but the
    coarsest level's factorization (on GPU and TPU for up to 2^24 stored values; a larger
    grid sets up faster on the device); under ``jit`` (``grid`` and the options are
    static) and ``vmap`` it is one compiled call, as for ``smoother="ilu"``. A batched
    ``A`` (matrices sharing offsets) gives a batched hierarchy. Differentiate the solve,
    not the preconditioner: ``jax.grad`` through ``jaxdia.cg(A, b,
    M=jaxdia.multigrid(A, grid))`` with respect to ``A.data`` and ``b`` is the gradient
    of the exact solution (implicit differentiation), which never differentiates through
    ``M``.

    Args:
      A: a square DiaMatrix of float32, float64, complex64 or complex128, possibly
        batched; or a real ShardedDiaMatrix (or DiaMatrix with sharded columns,
        unbatched).
      grid: the grid's points per axis; ``prod(grid)`` must equal ``A.shape[0]``.
      smoother: ``"chebyshev"`` (the Chebyshev polynomial in ``D^-1 A`` smallest on the
        upper 5/6 of its spectrum, bounded by Gershgorin's theorem; real ``A`` only) or
        ``"jacobi"`` (damped Jacobi, weight ``1.6 / rho`` for that bound ``rho``), or
        ``"ilu"`` (steps ``x += (L U)^-1 (b - A x)`` with each level's ILU(0), as
        :func:`jaxdia.ilu0` factors it with a grid: the smoother that keeps multigrid
        converging where convection dominates, at the cost of two triangular solves per
        step; one device only; a zero pivot is not reported, it makes ``M(v)`` NaN).
        None: ``"chebyshev"`` for a real ``A``, ``"jacobi"`` for a complex one.
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
        None (the default): a grid of at most 500 points is solved directly; a larger
        one is coarsened at least once, and then, on CPU, until a level of at most
        4096 unknowns is cheap to factorize (``n b^2 <= 2^25`` for its band width
        ``b``: up to 64 x 64 on a 2-D grid, 11 x 11 x 11 on a 3-D one, 4096 points in
        1-D), on GPU and TPU (a dense inverse there) until at most 500. Fewer levels
        compile faster and cost no iterations (benchmarks/README.md).
      max_levels: the most levels, the finest included (None: no limit).
      dtype: the precision of the hierarchy and the cycle, float32 or float64 (complex64
        or complex128 for a complex ``A``; default ``A``'s). ``jnp.float32`` for a
        float64 ``A`` halves the memory traffic of the
        setup and of every cycle (the finest level keeps a float32 copy of ``A``); ``M``
        is then exact to about ``1e-7`` relative, which conjugate gradients in float64
        tolerates to tolerances far below that (the same iterations at 1e-8 in the
        benchmarks, a few more at 1e-10), and linear and symmetric up to that rounding.
      gather_below: for a sharded ``A``: a level with fewer unknowns per device is
        gathered (with the levels below it) onto every device.
      deep_halo: for a sharded ``A``: each smoothing of a sharded level exchanges its
        input's halo ``sweeps`` deep once and runs its products locally (one
        collective-permute each way instead of ``sweeps``; see
        :func:`jaxdia.chebyshev`'s ``deep_halo``).

    Returns:
      A :class:`jaxdia.Multigrid` (a :class:`jaxdia.ShardedMultigrid` for a sharded
      ``A``), callable on vectors: it computes in ``dtype`` and
      returns the promoted dtype of ``v`` and ``dtype``.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix or ShardedDiaMatrix, its dtype is not one
        of the four above (a sharded ``A``: not real), ``dtype`` is not one of its kind,
        or ``coarsening="auto"`` gets a traced or sharded ``A``.
      ValueError: if ``A`` is not square, ``prod(grid)`` differs from its size, an
        offset does not fit a stencil on ``grid`` (the message names it), it stores no
        main diagonal, an option is out of range, the Chebyshev smoother is asked for a
        complex ``A``, or the coarsest level would exceed 4096 unknowns; for a sharded
        ``A``, if ``grid[0]`` is not a multiple of the device count or the hierarchy
        has one level (nothing to coarsen). For a concrete
        ``A`` also: a zero on the diagonal, or a nonzero entry on a stencil diagonal that
        couples points which are no neighbours (periodic boundaries, or a grid of the
        wrong shape).

    Example:
      >>> import jax.numpy as jnp, numpy as np, scipy.sparse as sp, jaxdia
      >>> n = 64
      >>> T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).astype("float32"))  # 2-D, C order
      >>> M = jaxdia.multigrid(A, (n, n))
      >>> [level.shape[0] for level in M.levels]  # the coarsest (32 x 32) is cheap to factor
      [4096, 1024]
      >>> x, info = jaxdia.cg(A, jnp.ones(n * n), M=M, rtol=1e-4)
      >>> bool(info.converged), int(info.iterations) < 10
      (True, True)
    """
    sharded = sharded_operand(A)
    A = as_square_matrix(A, "multigrid") if sharded is None else sharded
    if sharded is not None and A.dtype.kind == "c":
        raise TypeError(
            f"multigrid: a sharded A must be float32 or float64, got {A.dtype.name} "
            "(complex hierarchies run on one device)"
        )
    if A.dtype not in _HIERARCHY_DTYPES:
        raise TypeError(
            f"multigrid: A must be float32, float64, complex64 or complex128, got "
            f"{A.dtype.name} (convert 16-bit matrices with A.astype(jnp.float32))"
        )
    kind = "complex" if A.dtype.kind == "c" else "float"
    if dtype is not None and (
        np.dtype(dtype) not in _HIERARCHY_DTYPES or np.dtype(dtype).kind != A.dtype.kind
    ):
        raise TypeError(
            f"multigrid: dtype must be a {kind} dtype of 32 or 64 bits for A of dtype "
            f"{A.dtype.name}, got {np.dtype(dtype).name}"
        )
    grid = as_grid(grid, A.shape[0])
    if smoother is None:
        smoother = "jacobi" if A.dtype.kind == "c" else "chebyshev"
    if smoother not in MULTIGRID_SMOOTHERS:
        raise ValueError(
            f"multigrid: smoother must be one of {MULTIGRID_SMOOTHERS}, got {smoother!r}"
        )
    if smoother == "ilu" and sharded is not None:
        raise TypeError(
            "multigrid: smoother='ilu' is for a matrix on one device (its triangular "
            "solves are not sharded); use smoother='jacobi' or 'chebyshev' for a sharded A"
        )
    if smoother == "chebyshev" and A.dtype.kind == "c":
        raise ValueError(
            "multigrid: the Chebyshev smoother damps a real interval of the spectrum of "
            "D^-1 A; a complex A's lies off the real axis, where that polynomial is no "
            "bound (its V-cycles can diverge): use smoother='jacobi' (the default for "
            "complex A), or A.real for a real matrix stored as complex"
        )
    sweeps = static_int(sweeps, "multigrid: sweeps")
    if max_coarse is None:
        max_coarse = _dispatch.default_max_coarse()
    if max_coarse is not None:
        max_coarse = static_int(max_coarse, "multigrid: max_coarse")
    levels = 10**9 if max_levels is None else static_int(max_levels, "multigrid: max_levels")
    gather_below = static_int(gather_below, "multigrid: gather_below")
    coarse_ok = max_coarse is None or 1 <= max_coarse <= MAX_COARSE
    if sweeps < 1 or not coarse_ok or levels < 1 or gather_below < 1:
        raise ValueError(
            f"multigrid: need sweeps >= 1, 1 <= max_coarse <= {MAX_COARSE}, max_levels >= 1 "
            f"and gather_below >= 1, got sweeps={sweeps}, max_coarse={max_coarse}, "
            f"max_levels={max_levels}, gather_below={gather_below}"
        )
    # The concrete data on the host, once, for the checks and coarsening="auto" (a
    # sharded matrix's data stays on its devices).
    host = None
    if isinstance(A, DiaMatrix) and not is_traced(A.data):
        host = np.asarray(A.data).reshape(-1, *A.data.shape[-2:])
    check_stencil(A, grid, host)
    check_diagonal("multigrid", A, host)
    if sharded is not None and isinstance(coarsening, str) and coarsening == "auto":
        raise TypeError(
            "multigrid: coarsening='auto' reads A's values on the host, which a sharded "
            "matrix keeps on its devices; pass the axes to coarsen (e.g. coarsening="
            "M.coarsening of a multigrid built on one device for a smaller grid)"
        )
    plan = _as_plan(coarsening, A, host, grid, max_coarse, levels)
    coarsest = grid
    for axes in plan:
        coarsest = coarse_grid(coarsest, axes)
    if math.prod(coarsest) > MAX_COARSE:
        raise ValueError(
            f"multigrid: the coarsest level would be grid {coarsest} "
            f"({math.prod(coarsest)} unknowns); its direct solve is a banded LU, so at most "
            f"{MAX_COARSE}: allow more levels (max_levels, coarsening)"
        )
    if sharded is not None:
        return build(sharded, grid, plan, smoother, sweeps, dtype, gather_below, deep_halo)
    if deep_halo:
        raise TypeError(
            "multigrid: deep_halo=True is for a sharded A (a ShardedDiaMatrix, or a DiaMatrix "
            "whose data columns are sharded)"
        )
    assert isinstance(A, DiaMatrix)
    batch = A.batch_shape
    if dtype is not None and np.dtype(dtype) != A.dtype:
        A = A.astype(dtype)
    if smoother != "ilu" and host is not None and _host_setup_pays(A):
        if np.dtype(A.dtype) != host.dtype:
            host = host.astype(A.dtype)
        hierarchy = _host_hierarchy(host, batch, A.offsets, grid, plan, smoother, sweeps)
    else:
        hierarchy = _setup(
            _flat_batch(A.data),
            offsets=A.offsets,
            grid=grid,
            plan=plan,
            smoother=smoother,
            sweeps=sweeps,
        )
        hierarchy = _unflatten(hierarchy, batch)
    hierarchy = hierarchy._replace(operators=(A._parts, *hierarchy.operators[1:]))
    return Multigrid(hierarchy)
