"""Restarted GMRES that reports: :func:`gmres`.

:func:`gmres_cycles` is the loop: restart cycles of at most ``restart`` Arnoldi steps,
each step orthogonalized by Gram-Schmidt, a second pass only where the first cancelled
most of the vector (:data:`REORTHOGONALIZE`): on CPU classical over the basis vectors so
far, both passes in one BLAS host call (:func:`_orthogonalize_by_blas`); on GPUs and TPUs
by XLA, classical within blocks of :data:`BLOCK` basis vectors (one product each),
modified across them. The step is folded into the least-squares problem by Givens
rotations (kept as one matrix: a column is rotated by one product, not a loop over the
step's rotations); the last entry of the rotated right-hand side estimates the residual
norm. A cycle ends for a system when that
estimate meets the target, when the Krylov space stops growing (a "happy breakdown":
the exact solution of the cycle lies in it), or after ``restart`` steps; then ``x`` is
updated and the residual ``b - A x`` recomputed, and that true residual, never the
estimate, decides whether the system has converged. A cycle whose estimate was met but
whose true residual was not (rounding, an inaccurate preconditioner) is followed by
another. A cycle that does not reduce the true residual stops the system (the next
cycle would start from the same ``x`` and repeat it exactly) and keeps its previous
``x``.

Like :mod:`.krylov`'s loops it solves a batch of systems at once (leading dims of
``b``): the systems take their Arnoldi steps in lockstep, each with its own basis,
rotations and counts, and each stops on its own.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax import Array, lax

from .. import _dispatch
from .._checks import static_int
from .._kernels import lapack
from .._typing import ArrayLike, OperatorLike, Scalar
from .krylov import MatVec, Report, SolveInfo, start_from, threshold
from .operands import callback_of, solve_operands
from .operators import on_host, vector_product

#: SciPy's kinds of gmres callback: the iterate after each restart cycle, or the residual
#: estimate over ``|b|`` after each Arnoldi step (``legacy``: with ``maxiter`` counting
#: those steps).
CALLBACK_TYPES = ("x", "pr_norm", "legacy")

SIDES = ("right", "left")

#: Basis vectors per block of a Gram-Schmidt pass: a step reads only the blocks that
#: hold its ``j + 1`` vectors (the whole basis would be ``restart + 1``, about twice as
#: many on average), at one loop iteration per block.
BLOCK = 4

#: A second Gram-Schmidt pass runs when the first leaves less than this fraction of the
#: vector's norm: a pass amplifies its rounding by at most ``1 / REORTHOGONALIZE``.
REORTHOGONALIZE = 0.3


def _norm(v: Array) -> Array:
    return jnp.sqrt(jnp.sum((v.conj() * v).real, axis=-1))


def _project(V: Array, w: Array) -> Array:
    """``V^H w`` per system (``V``: ``(*batch, rows, n)``)."""
    return jnp.einsum("...in,...n->...i", V, w.conj(), precision=lax.Precision.HIGHEST).conj()


def _combine(V: Array, h: Array) -> Array:
    """``sum_i h_i V_i`` per system."""
    return jnp.einsum("...i,...in->...n", h, V, precision=lax.Precision.HIGHEST)


def _gram_schmidt(V: Array, w: Array, j: Array) -> tuple[Array, Array]:
    """One pass of block Gram-Schmidt: ``w`` less its components along rows ``0..j``
    of ``V``, and those components (``(*batch, rows of V)``, zero beyond ``j``);
    classical within a block of :data:`BLOCK` rows (one product each way), modified
    across blocks. Rows of ``V`` beyond ``j``'s block are not read."""
    h = jnp.zeros((*w.shape[:-1], V.shape[-2]), w.dtype)

    def one_block(i, carry):
        w, h = carry
        start = i * BLOCK
        rows = lax.dynamic_slice_in_dim(V, start, BLOCK, axis=-2)
        coefficients = jnp.where(start + jnp.arange(BLOCK) <= j, _project(rows, w), 0)
        w = w - _combine(rows, coefficients)
        return w, lax.dynamic_update_slice_in_dim(h, coefficients, start, axis=-1)

    return lax.fori_loop(0, j // BLOCK + 1, one_block, (w, h))


def _orthogonalize(V: Array, w: Array, j: Array, size: Array) -> tuple[Array, Array, Array]:
    """``w`` (of norm ``size``) orthogonalized against rows ``0..j`` of ``V``, its
    coefficients on them (zero beyond ``j``) and its new norm. One pass of
    :func:`_gram_schmidt`, and a second only where the first left less than
    :data:`REORTHOGONALIZE` of ``w``'s norm (the criterion of Daniel, Gragg, Kaufman and
    Stewart, whose 1 / sqrt(2) ARPACK uses; Rutishauser's was 1 / 10): a pass leaves
    components of the order of its rounding times ``|w| / |w'|`` along the basis, so
    without much cancellation one pass is orthogonal to rounding, and with it the second
    pass makes it so ("twice is enough"). 0.3 lets the convection-diffusion operators
    of ``benchmarks/bench_gmres.py`` (``|w'| / |w|`` 0.38-0.55 at every step, so 1 /
    sqrt(2) would reorthogonalize every step) take one pass, while nearly dependent
    Krylov vectors (clustered spectra, near breakdowns) still get two:
    ``tests/test_gmres.py`` checks the basis stays orthogonal to rounding on both. The
    second pass runs for the whole batch when any system needs it (for every system
    under ``vmap``, where the condition is per system). The new norm is computed from
    the vector, not as ``sqrt(|w|^2 - |h|^2)``: that one's error enters the next basis
    vector's norm, and grew from 1e-16 to 1e-9 in twelve steps on a tridiagonal
    operator."""
    w, h = _gram_schmidt(V, w, j)
    after = _norm(w)

    def again(w, h, after):
        w, correction = _gram_schmidt(V, w, j)
        return w, h + correction, _norm(w)

    cancelled = after < REORTHOGONALIZE * size
    return lax.cond(jnp.any(cancelled), again, lambda *carry: carry, w, h, after)


def _orthogonalize_by_blas(V: Array, w: Array, j: Array, size: Array) -> tuple[Array, Array, Array]:
    """:func:`_orthogonalize` on CPU: one host call per step
    (:func:`jaxdia._kernels.lapack.gram_schmidt`) whose passes are classical Gram-Schmidt
    over rows ``0..j`` (two BLAS ``?gemv``, reading the basis where it lies), with the same
    criterion for the second pass, judged per system."""
    batch = w.shape[:-1]
    j = jnp.broadcast_to(jnp.asarray(j, jnp.int32), batch)
    floor = jnp.broadcast_to(REORTHOGONALIZE * size, batch).astype(size.dtype)
    return lapack.gram_schmidt(V, w, j, floor)


def _rotated(rotations: Array, j: Array, c: Array, s: Array) -> Array:
    """``rotations`` (the product of a cycle's Givens rotations so far, ``(*batch, m + 1,
    m + 1)``) with the rotation ``(c, s)`` of entries ``(j, j + 1)`` applied after them:
    rows ``j`` and ``j + 1`` mixed, in one fused update rather than a loop over ``j``."""
    row_j = lax.dynamic_index_in_dim(rotations, j, axis=-2, keepdims=False)
    row_next = lax.dynamic_index_in_dim(rotations, j + 1, axis=-2, keepdims=False)
    c, s = c[..., None], s[..., None]
    new_j = c * row_j + s * row_next
    new_next = -s.conj() * row_j + c * row_next
    index = jnp.arange(rotations.shape[-2])[:, None]
    return jnp.where(
        index == j,
        new_j[..., None, :],
        jnp.where(index == j + 1, new_next[..., None, :], rotations),
    )


def gmres_cycles(
    matvec: MatVec,
    b: Array,
    x0: Array | None,
    M: MatVec,
    limit: Array,
    maxiter: ArrayLike,
    *,
    restart: int,
    side: str,
    step_limit: ArrayLike | None = None,
    report_x: Report | None = None,
    report_residual: Report | None = None,
):
    """Restarted GMRES(``restart``) preconditioned by ``M`` on ``side``, from ``x0``
    (None: zeros), until ``|b - A x| <= limit`` (per system, on the recomputed residual),
    ``maxiter`` cycles or ``step_limit`` Arnoldi steps (None: no limit). Returns ``(x,
    iterations, residual)``: the Arnoldi steps taken per system, and ``|b - A x|``
    (recomputed from ``x`` at the end of each cycle).

    ``side="right"`` runs Arnoldi on ``A M`` (its estimate is of ``|b - A x|`` itself);
    ``"left"`` on ``M A``, whose estimate is of ``|M (b - A x)|``: a cycle then aims to
    reduce it by the factor the true residual needs, ``limit / |b - A x|``.

    ``report_x`` gets ``x`` after each cycle, ``report_residual`` the estimate over
    ``|b|`` after each step (SciPy's ``callback_type="x"`` and ``"pr_norm"``).
    """
    m = restart
    batch, n = b.shape[:-1], b.shape[-1]
    dtype = b.dtype
    tiny = jnp.finfo(dtype).eps
    r = b if x0 is None else b - matvec(x0)
    # Zeros with b's sharding, as krylov's loops make them.
    zeros = jnp.where(False, b, jnp.zeros((), dtype))
    x = zeros if x0 is None else x0
    rnorm = _norm(r)
    cycles = jnp.zeros(batch, jnp.int32)
    steps = jnp.zeros(batch, jnp.int32)

    def within(mask: Array, steps: Array) -> Array:
        """``mask`` where ``steps`` Arnoldi steps leave room for another
        (``step_limit``)."""
        return mask if step_limit is None else mask & (steps < step_limit)

    active = within((rnorm > limit) & (cycles < maxiter), steps)
    # rows to a whole number of blocks (those beyond m + 1 stay zero)
    V = jnp.broadcast_to(zeros[..., None, :], (*batch, -(-(m + 1) // BLOCK) * BLOCK, n))

    if _dispatch.gram_schmidt_by_blas(dtype):
        orthogonalize = _orthogonalize_by_blas
    else:
        orthogonalize = _orthogonalize

    if side == "right":

        def arnoldi(v):
            return matvec(M(v))
    else:

        def arnoldi(v):
            return M(matvec(v))

    def cycle(state):
        x, r, rnorm, V, cycles, steps, active = state
        start = r if side == "right" else M(r)
        beta = _norm(start)
        going = within(active & (beta > 0) & jnp.isfinite(beta), steps)
        target = limit if side == "right" else beta * limit / jnp.where(going, rnorm, 1)
        V = V.at[..., 0, :].set(jnp.where(going[..., None], start / _where0(beta)[..., None], 0))
        g = jnp.zeros((*batch, m + 1), dtype).at[..., 0].set(beta.astype(dtype))
        # The cycle's Givens rotations as one matrix: a column is rotated by one product.
        rotations = jnp.broadcast_to(jnp.eye(m + 1, dtype=dtype), (*batch, m + 1, m + 1))
        R = jnp.zeros((*batch, m, m), dtype)
        k = jnp.zeros(batch, jnp.int32)

        def step_cond(inner):
            j, going = inner[0], inner[-1]
            return (j < m) & jnp.any(going)

        def step(inner):
            j, V, v, R, g, rotations, k, going = inner
            w = arnoldi(v)
            size = _norm(w)
            w, h, after = orthogonalize(V, w, j, size)
            h = h[..., : m + 1]
            # w lies in the basis to rounding: the Krylov space is invariant, and the
            # cycle's solution exact in it (or A M singular on it: see ``ok`` below).
            happy = after <= tiny * size
            after = jnp.where(happy, 0, after)
            column = jnp.einsum(
                "...ik,...k->...i",
                rotations,
                h.at[..., j + 1].set(after.astype(dtype)),
                precision=lax.Precision.HIGHEST,
            )
            a = column[..., j]
            rho = jnp.sqrt(jnp.abs(a) ** 2 + after**2)
            # rho at the rounding level of the column (|column| = size): column j adds
            # nothing that rounding did not (A M singular on the space, e.g. a singular M):
            # left out. Kept, it would put 1 / rho into the least-squares solution.
            ok = going & (rho > (j + 1) * tiny * size) & jnp.isfinite(rho)
            safe_rho = jnp.where(ok, rho, 1)
            magnitude = jnp.abs(a)
            phase = jnp.where(magnitude > 0, a / jnp.where(magnitude > 0, magnitude, 1), 1)
            c_j = magnitude / safe_rho
            s_j = phase * after / safe_rho
            column = column.at[..., j].set(phase * rho).at[..., j + 1].set(0)
            g_j = g[..., j]
            g_new = g.at[..., j].set(c_j * g_j).at[..., j + 1].set(-s_j.conj() * g_j)
            okv = ok[..., None]
            R = R.at[..., :, j].set(jnp.where(okv, column[..., :m], R[..., :, j]))
            g = jnp.where(okv, g_new, g)
            rotations = jnp.where(okv[..., None], _rotated(rotations, j, c_j, s_j), rotations)
            v = w / jnp.where(happy | ~ok, 1, after)[..., None]
            grows = okv & ~happy[..., None]
            V = V.at[..., j + 1, :].set(jnp.where(grows, v, V[..., j + 1, :]))
            v = jnp.where(grows, v, 0)
            k = k + ok
            estimate = jnp.abs(g[..., j + 1])
            if report_residual is not None:
                report_residual(estimate / _where0(_norm(b)), True)
            going = ok & ~happy & (estimate > target) & jnp.isfinite(estimate)
            going = within(going, steps + k)
            return j + 1, V, v, R, g, rotations, k, going

        # The step's vector rides in the loop, not read back from V.
        inner = (jnp.int32(0), V, V[..., 0, :], R, g, rotations, k, going)
        _, V, _, R, g, _, k, _ = lax.while_loop(step_cond, step, inner)

        def solution(count):
            """``x`` moved by the least-squares solution on the first ``count`` columns
            of each system's basis, and its residual ``b - A x``."""
            used = jnp.arange(m) < count[..., None]
            unit = jnp.where(used, 0, jnp.ones((), dtype))[..., None] * jnp.eye(m, dtype=dtype)
            y = jax.scipy.linalg.solve_triangular(
                jnp.where(used[..., None, :], R, 0) + unit,
                jnp.where(used, g[..., :m], 0)[..., None],
                lower=False,
            )[..., 0]
            update = _combine(V[..., :m, :], y)
            if side == "right":
                update = M(update)
            x_new = x + update
            r_new = b - matvec(x_new)
            return x_new, r_new, _norm(r_new)

        # The solution on all k columns, and where that does not reduce the true
        # residual, on fewer: rounding amplified by the basis can make the last pivots
        # noise (A M singular on the space, e.g. a singular M, or the Krylov basis of a
        # long cycle in single precision), which the least-squares solution divides by.
        # The first prefix that reduces the residual is kept (in exact arithmetic every
        # prefix does, or none: stagnation); a cycle that reduces it costs no more.
        def searching(search):
            count, *_, found = search
            return jnp.any(active & ~found & (count > 0))

        def shorter(search):
            count, x_new, r_new, rnorm_new, found = search
            trying = active & ~found & (count > 0)
            count = jnp.where(trying, count - 1, count)
            x_try, r_try, rnorm_try = solution(count)
            x_new = jnp.where(trying[..., None], x_try, x_new)
            r_new = jnp.where(trying[..., None], r_try, r_new)
            rnorm_new = jnp.where(trying, rnorm_try, rnorm_new)
            return count, x_new, r_new, rnorm_new, found | (trying & (rnorm_try < rnorm))

        search = (k + 1, x, r, rnorm, jnp.zeros(batch, bool))
        _, x_new, r_new, rnorm_new, better = lax.while_loop(searching, shorter, search)
        # Not reduced (or not finite) by any: the next cycle would repeat this one; stop.
        x = jnp.where(better[..., None], x_new, x)
        r = jnp.where(better[..., None], r_new, r)
        rnorm = jnp.where(better, rnorm_new, rnorm)
        cycles = cycles + active
        steps = steps + jnp.where(active, k, 0)
        active = within(better & (rnorm > limit) & (cycles < maxiter), steps)
        if report_x is not None:
            report_x(x, True)
        return x, r, rnorm, V, cycles, steps, active

    state = (x, r, rnorm, V, cycles, steps, active)
    x, _, rnorm, *_, steps, _ = lax.while_loop(lambda state: jnp.any(state[-1]), cycle, state)
    return x, steps, rnorm


def _where0(value: Array) -> Array:
    """``value`` with its zeros (and non-finite entries) replaced by 1, to divide by."""
    return jnp.where((value != 0) & jnp.isfinite(value), value, 1)


@functools.partial(
    jax.jit,
    static_argnames=("restart", "side", "batch", "dtype", "x0_is_Mb", "callback", "legacy"),
)
def _run_gmres(
    A, b, x0, M, rtol, atol, maxiter, *, restart, side, batch, dtype, x0_is_Mb, callback, legacy
):
    """The solve as one compiled call (``maxiter`` an argument: changing it compiles
    nothing), differentiable by ``lax.custom_linear_solve`` as :mod:`.krylov`'s.
    ``callback`` (a :class:`~.operands.Callback` of the iterate or of the residual
    estimate) sees the solve, not the transposed one; ``legacy``: ``maxiter`` counts
    Arnoldi steps (SciPy's legacy callback)."""
    n = b.shape[-1]
    b = jnp.broadcast_to(b.astype(dtype), (*batch, n))
    x0 = None if x0 is None else jnp.broadcast_to(x0.astype(dtype), b.shape)
    matvec = vector_product(A)
    precondition = (lambda v: v) if M is None else M
    reports = {}
    if callback is not None:
        reports["report_x" if callback.kind == "x" else "report_residual"] = callback.report

    def solver(reports):
        def solve(matvec, rhs):
            limit = threshold(rhs, rtol, atol)
            start = precondition(rhs).astype(rhs.dtype) if x0_is_Mb else x0
            x, steps, residual = gmres_cycles(
                matvec,
                rhs,
                start_from(start, rhs),
                precondition,
                limit,
                maxiter,
                restart=restart,
                side=side,
                step_limit=maxiter if legacy else None,
                **reports,
            )
            return x.astype(rhs.dtype), (steps, limit, residual)

        return solve

    # The residual of the returned x is the last cycle's, recomputed there from x.
    x, (steps, limit, residual) = lax.custom_linear_solve(
        matvec, b, solver(reports), None if on_host(A) else solver({}), has_aux=True
    )
    converged = (residual <= limit) & jnp.isfinite(residual)
    return x, SolveInfo(steps, residual, converged)


def gmres(
    A: OperatorLike,
    b: ArrayLike,
    x0: ArrayLike | str | None = None,
    *,
    rtol: Scalar = 1e-5,
    atol: Scalar = 0.0,
    restart: int | None = 20,
    maxiter: int | None = None,
    M: OperatorLike | None = None,
    callback: Callable[[Any], object] | None = None,
    callback_type: str | None = None,
    side: str = "right",
) -> tuple[Array, SolveInfo]:
    """Solves ``A x = b`` by restarted, preconditioned GMRES, and says how it went.

    The method of ``scipy.sparse.linalg.gmres``: cycles of at most ``restart`` Arnoldi
    steps (each one product with ``A`` and one application of ``M``) that minimise the
    residual over the Krylov space, then restart from the new ``x``. It stops when
    ``|b - A x| <= max(rtol * |b|, atol)`` (SciPy's rule) and returns ``(x, info)`` as
    :func:`jaxdia.cg` does. That residual is recomputed from ``x`` at the end of every
    cycle and decides convergence: the estimate the iteration keeps (``|g|`` of its
    least-squares problem) only ends a cycle, so a cycle whose estimate met the
    tolerance while rounding or an inaccurate ``M`` kept the true residual above it is
    followed by another, and ``info.converged`` is never the estimate's word.
    ``jax.scipy.sparse.linalg.gmres`` returns no report (its ``info`` is a placeholder)
    and stops when ``|M (b - A x)|`` falls below ``tol * |b|``: on upwinded
    convection-diffusion with ILU(0) it returned true residuals 100x above the
    tolerance, with Jacobi 1e4x.

    ``M`` is applied on the right by default (Arnoldi on ``A M``, ``x = x0 + M V y``): its
    estimate is of the unpreconditioned residual that the stopping rule reads, so a cycle
    ends where the tolerance is met. ``side="left"`` is SciPy's: Arnoldi on ``M A``,
    minimising ``|M (b - A x)|``; each cycle then aims to reduce that by the factor the
    true residual needs, and the true residual still decides. The two reach the same
    tolerance on ``|b - A x|``; their iterates and residual estimates differ.

    A cycle that does not reduce the true residual (GMRES(m) can stagnate, e.g. on a
    singular or strongly indefinite ``A``) stops the system with ``converged`` False:
    the next cycle would start from the same ``x`` and repeat it. A breakdown (the
    exact solution lies in the Krylov space, e.g. when ``n <= restart``) ends the cycle
    without NaN. Orthogonalization is block Gram-Schmidt (classical within blocks of
    four basis vectors, modified across them), with a second pass where the first
    cancelled more than 70 % of the vector's norm, which keeps the basis orthogonal to
    the working precision (SciPy runs one pass of modified Gram-Schmidt, whose basis
    loses its orthogonality as the Krylov vectors become nearly dependent). ``restart``
    is capped at ``n``, as SciPy does.

    Batches (leading dims of ``A`` and/or ``b``), ``jit``, ``vmap``, implicit
    differentiation in ``b`` and ``A.data``, every operator SciPy takes as ``A`` and
    ``M``, ``x0="Mb"`` and integer matrices work as for :func:`jaxdia.cg`; a
    :class:`jaxdia.ShardedDiaMatrix` is not supported yet. A ``callback`` is called as
    SciPy's ``callback_type`` says: ``"x"``, with ``x`` after each restart cycle;
    ``"pr_norm"``, with the residual estimate over ``|b|`` after each Arnoldi step (a
    float; the estimate of what the cycle minimises: ``|b - A x|`` for ``side="right"``,
    ``|M (b - A x)|`` for ``"left"``, SciPy's); ``"legacy"``, as ``"pr_norm"`` with
    ``maxiter`` counting Arnoldi steps instead of cycles. A ``callback`` without a
    ``callback_type`` is ``"legacy"``, with SciPy's ``DeprecationWarning`` (SciPy has
    announced that its default will change).

    Args:
      A: a square DiaMatrix (possibly batched), a function ``v -> A v``, or any operator
        SciPy takes (as for :func:`jaxdia.cg`).
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      x0: the initial guess (default zeros), or ``"Mb"``: ``M @ b``.
      rtol, atol: relative and absolute tolerances on ``|b - A x|``.
      restart: the most Arnoldi steps per cycle (SciPy's default, 20; None: 20); the
        basis holds ``restart + 1`` vectors per system.
      maxiter: the most restart cycles (SciPy's meaning; default ``10 * n``), an
        argument of the compiled solve (changing it compiles nothing).
      M: the preconditioner, an operator as ``A`` (:func:`jaxdia.ilu0`,
        :func:`jaxdia.jacobi`, ...; None: none).
      callback: called with each iterate or residual estimate (``callback_type``), in
        order, under ``jit`` too (an ordered host callback); not for the transposed solve
        a gradient runs.
      callback_type: ``"x"``, ``"pr_norm"`` or ``"legacy"`` (None: ``"legacy"``).
      side: ``"right"`` (default) or ``"left"`` (SciPy's).

    Returns:
      ``(x, info)``: as :func:`jaxdia.cg`, with ``info.iterations`` the Arnoldi steps
      taken over all cycles (the products with ``A``, less the one per cycle that
      recomputes the residual).

    Raises:
      TypeError: as :func:`jaxdia.cg` (a ShardedDiaMatrix too), or if ``restart`` is not
        an int.
      ValueError: as :func:`jaxdia.cg`, or if ``restart < 1``, or ``side`` or
        ``callback_type`` is unknown.

    Example:
      >>> import jax.numpy as jnp, jaxdia
      >>> A = jaxdia.diags([-1.4, 2.5, -0.6], offsets=[-1, 0, 1], shape=(200, 200))
      >>> x, info = jaxdia.gmres(A, jnp.ones(200), M=jaxdia.jacobi(A), rtol=1e-5)
      >>> bool(info.converged), bool(jnp.linalg.norm(A @ x - 1) <= 1e-5 * jnp.sqrt(200.0))
      (True, True)
      >>> _, short = jaxdia.gmres(A, jnp.ones(200), rtol=1e-5, restart=2, maxiter=3)
      >>> bool(short.converged), int(short.iterations)
      (False, 6)
    """
    if side not in SIDES:
        raise ValueError(f"gmres: side must be one of {SIDES}, got {side!r}")
    if callback_type is not None and callback_type not in CALLBACK_TYPES:
        raise ValueError(
            f"gmres: callback_type must be one of {CALLBACK_TYPES} (or None), got {callback_type!r}"
        )
    if callback is not None and callback_type is None:
        warnings.warn(
            "jaxdia.gmres called without specifying `callback_type`: it is then 'legacy', as "
            "in SciPy (the callback gets the residual estimate after each Arnoldi step, and "
            "maxiter counts those steps), whose default will change. Specify it, e.g. "
            "gmres(..., callback_type='pr_norm'), or 'legacy' to keep this behavior.",
            DeprecationWarning,
            stacklevel=2,
        )
        callback_type = "legacy"
    restart = static_int(20 if restart is None else restart, "gmres: restart")
    if restart < 1:
        raise ValueError(f"gmres: restart must be >= 1, got {restart}")
    if hasattr(A, "padded_size"):
        raise TypeError(
            "gmres: A must be a jaxdia.DiaMatrix or a function v -> A v; a "
            "jaxdia.ShardedDiaMatrix is not supported yet (use jaxdia.cg or jaxdia.bicgstab)"
        )
    operands = solve_operands("gmres", A, b, M, x0, rtol, atol, maxiter)
    n = operands.b.shape[-1]
    return _run_gmres(
        operands.A,
        *operands.vectors_in_dtype(),
        operands.M,
        operands.rtol,
        operands.atol,
        operands.maxiter,
        restart=max(1, min(restart, n)),
        side=side,
        batch=operands.batch,
        dtype=operands.dtype,
        x0_is_Mb=operands.x0_is_Mb,
        callback=callback_of(callback, "gmres", "x" if callback_type == "x" else "residual"),
        legacy=callback is not None and callback_type == "legacy",
    )
