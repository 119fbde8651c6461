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

import jax
import jax.numpy as jnp
from jax import Array, lax

from .. import _dispatch
from .._checks import static_int
from .._kernels import lapack
from .._matrix import DiaMatrix
from .._typing import ArrayLike, Operator, Scalar
from .krylov import MatVec, SolveInfo, residual_norm, solve_operands, threshold, vector_product

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
):
    """Restarted GMRES(``restart``) preconditioned by ``M`` on ``side``, from ``x0``
    (None: zeros), until ``|b - A x| <= limit`` (per system, on the recomputed residual)
    or ``maxiter`` cycles. Returns ``(x, iterations)``, the Arnoldi steps taken per
    system.

    ``side="right"`` runs Arnoldi on ``A M`` (its estimate is of ``|b - A x|`` itself);
    ``"left"`` on ``M A``, whose estimate is of ``|M (b - A x)|``: a cycle then aims to
    reduce it by the factor the true residual needs, ``limit / |b - A x|``.
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
    active = (rnorm > limit) & (cycles < maxiter)
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
        going = active & (beta > 0) & jnp.isfinite(beta)
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
            # rho = 0: column j adds nothing (A M singular on the space): left out.
            ok = going & (rho > 0) & jnp.isfinite(rho)
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
            going = ok & ~happy & (estimate > target) & jnp.isfinite(estimate)
            return j + 1, V, v, R, g, rotations, k, going

        # The step's vector rides in the loop, not read back from V.
        inner = (jnp.int32(0), V, V[..., 0, :], R, g, rotations, k, going)
        _, V, _, R, g, _, k, _ = lax.while_loop(step_cond, step, inner)
        # The least-squares solution on the first k columns of each system's basis.
        used = jnp.arange(m) < k[..., None]
        R = jnp.where(used[..., None, :], R, 0) + jnp.where(used, 0, jnp.ones((), dtype))[
            ..., None
        ] * jnp.eye(m, dtype=dtype)
        y = jax.scipy.linalg.solve_triangular(
            R, jnp.where(used, g[..., :m], 0)[..., None], lower=False
        )[..., 0]
        update = _combine(V[..., :m, :], y)
        if side == "right":
            update = M(update)
        x_new = x + update
        r_new = b - matvec(x_new)
        rnorm_new = _norm(r_new)
        # Not reduced (or not finite): the next cycle would repeat this one; stop.
        better = active & (rnorm_new < rnorm)
        x = jnp.where(better[..., None], x_new, x)
        r = jnp.where(better[..., None], r_new, r)
        rnorm = jnp.where(better, rnorm_new, rnorm)
        cycles = cycles + active
        steps = steps + jnp.where(active, k, 0)
        active = better & (rnorm > limit) & (cycles < maxiter)
        return x, r, rnorm, V, cycles, steps, active

    state = (x, r, rnorm, V, cycles, steps, active)
    x, *_, steps, _ = lax.while_loop(lambda state: jnp.any(state[-1]), cycle, state)
    return x, steps


def _where0(value: Array) -> Array:
    """``value`` with its zeros (and non-finite entries) replaced by 1, to divide by."""
    return jnp.where((value != 0) & jnp.isfinite(value), value, 1)


@functools.partial(jax.jit, static_argnames=("restart", "side", "batch", "dtype"))
def _run_gmres(A, b, x0, M, rtol, atol, maxiter, *, restart, side, batch, dtype):
    """The solve as one compiled call (``maxiter`` an argument: changing it compiles
    nothing), differentiable by ``lax.custom_linear_solve`` as :mod:`.krylov`'s."""
    n = b.shape[-1]
    b = jnp.broadcast_to(b.astype(dtype), (*batch, n))
    x0 = None if x0 is None else jnp.broadcast_to(x0.astype(dtype), b.shape)
    matvec = vector_product(A)
    precondition = (lambda v: v) if M is None else M

    def solve(matvec, rhs):
        limit = threshold(rhs, rtol, atol)
        x, steps = gmres_cycles(
            matvec, rhs, x0, precondition, limit, maxiter, restart=restart, side=side
        )
        return x.astype(rhs.dtype), (steps, limit)

    x, (steps, limit) = lax.custom_linear_solve(matvec, b, solve, solve, has_aux=True)
    residual = residual_norm(matvec, b, x)
    converged = (residual <= limit) & jnp.isfinite(residual)
    return x, SolveInfo(steps, residual, converged)


def gmres(
    A: DiaMatrix | Operator,
    b: ArrayLike,
    x0: ArrayLike | None = None,
    *,
    rtol: Scalar = 1e-5,
    atol: Scalar = 0.0,
    restart: int = 20,
    maxiter: int | None = None,
    M: Operator | None = None,
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

    ``M`` is applied on the right by default (Arnoldi on ``A M``, ``x = x0 + M V y``), as
    SciPy does: its estimate is of the unpreconditioned residual that the stopping rule
    reads, so a cycle ends where the tolerance is met. ``side="left"`` runs Arnoldi on
    ``M A``, minimising ``|M (b - A x)|``; each cycle then aims to reduce that by the
    factor the true residual needs, and the true residual still decides.

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
    differentiation in ``b`` and ``A.data`` and function operators work as for
    :func:`jaxdia.cg`; a :class:`jaxdia.ShardedDiaMatrix` is not supported yet.

    Args:
      A: a square DiaMatrix (possibly batched) or a function ``v -> A v``.
      b: the right-hand side(s), shape ``(n,)`` or ``(..., n)``.
      x0: the initial guess (default zeros).
      rtol, atol: relative and absolute tolerances on ``|b - A x|``.
      restart: the most Arnoldi steps per cycle (SciPy's default, 20); the basis holds
        ``restart + 1`` vectors per system.
      maxiter: the most restart cycles (SciPy's meaning; default ``10 * n``), an
        argument of the compiled solve (changing it compiles nothing).
      M: the preconditioner, a function ``v -> M v`` (:func:`jaxdia.ilu0`,
        :func:`jaxdia.jacobi`, ...; None: none).
      side: ``"right"`` (default, SciPy's) or ``"left"``.

    Returns:
      ``(x, info)``: as :func:`jaxdia.cg`, with ``info.iterations`` the Arnoldi steps
      taken over all cycles (the products with ``A``, less the one per cycle that
      recomputes the residual).

    Raises:
      TypeError: if ``A`` is neither a DiaMatrix nor a function (a ShardedDiaMatrix
        too), ``M`` is not callable, or ``restart`` is not an int.
      ValueError: if ``A`` is not square, the shapes do not fit, a tolerance or
        ``maxiter`` is negative, ``restart < 1``, or ``side`` is unknown.

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
    restart = static_int(restart, "gmres: restart")
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
        operands.b,
        operands.x0,
        operands.M,
        operands.rtol,
        operands.atol,
        operands.maxiter,
        restart=max(1, min(restart, n)),
        side=side,
        batch=operands.batch,
        dtype=operands.dtype,
    )
