"""A few eigenpairs of a Hermitian DiaMatrix: :func:`eigsh`, by thick-restart Lanczos.

The method is thick-restart Lanczos (Wu & Simon 2000; for a Hermitian operator it is
Stewart's Krylov-Schur) with full reorthogonalization, in fixed-size buffers:

* a basis ``V`` of ``ncv + 1`` vectors and the projected matrix ``T = V^H op V``
  (``ncv x ncv``), filled one column per step by classical Gram-Schmidt applied twice
  against every basis vector (unused rows of ``V`` are zero, so masks are not needed);
* after ``ncv`` steps the Ritz pairs of ``T`` are ranked by ``which``; the ``k`` wanted
  ones are converged when ARPACK's test holds, ``|beta s_i| <= tol max(eps^(2/3),
  |theta_i|)``; otherwise the best ``k + min(nconv, (ncv - k) // 2)`` Ritz vectors are
  kept (ARPACK's count, ``nconv`` the converged wanted ones; ``k + (ncv - k) // 2`` for
  ``SM``) with the residual vector,
  ``T`` becomes their Ritz values with the exact arrow ``beta s_last``, and the Lanczos
  steps continue from there;
* an invariant subspace (``beta ~ 0``) is left by a random vector orthogonal to ``V``.

Everything is a ``lax.while_loop`` over restarts around a ``lax.fori_loop`` over steps,
so a solve runs under ``jit`` and ``vmap`` (a batch runs until its slowest member has
converged). Shift-invert applies ``(A - sigma I)^{-1}`` through a banded solve; small
problems (``n <= DENSE_UP_TO``, or ``ncv > n / 2``) take ``jnp.linalg.eigh`` of the dense
matrix.

Differentiation: the eigenvalues are a ``jax.custom_jvp``, ``d lambda = Re(v^H dA v)``
restricted to the stored diagonals (the derivative of a simple eigenvalue of the
Hermitian part of ``A``); the eigenvectors' tangent is NaN (not computed), and the
convergence report has zero tangents.
"""

from __future__ import annotations

import math
import warnings
from functools import partial
from typing import Any, Literal, NamedTuple, TypeAlias, overload

import jax
import jax.core
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .. import _dispatch
from .._checks import as_array, reject_unsupported, scalar, spans_processes, static_int
from .._convert import dia_to_dense
from .._geometry import accumulation_dtype, in_bounds
from .._kernels import lapack
from .._kernels.primitives import sddmm, spmm
from .._matrix import DiaMatrix, as_square_matrix
from .._ops import add, conj, shifted, transpose
from .._parts import DiaParts
from .._products import matvec as dia_matvec
from .._typing import ArrayLike, DTypeLike, Scalar
from .banded import factor, solve
from .plan import Use, choose

#: ``which`` values: largest/smallest magnitude, largest/smallest algebraic, both ends.
WHICH = ("LM", "SM", "LA", "SA", "BE")

#: Matrices up to this size are solved densely (``jnp.linalg.eigh``): exact, and faster
#: than the Krylov loop's per-step cost at this size.
DENSE_UP_TO = 128


class EigshInfo(NamedTuple):
    """How :func:`jaxdia.eigsh` ended (a pytree; batched like the eigenvalues).

    Attributes:
      converged: whether all ``k`` wanted eigenpairs passed the convergence test
        (always true for the dense path).
      nconv: how many of them passed it.
      iterations: restarts of the Lanczos loop (0 for the dense path).
      matvecs: applications of the operator (``A`` or ``(A - sigma I)^{-1}``).
      residuals: ``||A v_i - lambda_i v_i||`` of each returned pair, in the order of
        the eigenvalues.
    """

    converged: Array
    nconv: Array
    iterations: Array
    matvecs: Array
    residuals: Array


class Config(NamedTuple):
    """The static part of a solve."""

    offsets: tuple[int, ...]
    n: int
    k: int
    ncv: int
    which: str
    shift_invert: bool
    dense: bool
    maxiter: int


# -- ranking ---------------------------------------------------------------------------------


def _rank(theta: Array, which: str) -> Array:
    """Indices of ``theta`` from the most wanted to the least (``BE`` alternates between
    the largest and the smallest, starting with the largest, as ARPACK's ``BE``)."""
    if which == "LA":
        return jnp.argsort(-theta, stable=True)
    if which == "SA":
        return jnp.argsort(theta, stable=True)
    if which == "LM":
        return jnp.argsort(-jnp.abs(theta), stable=True)
    if which == "SM":
        return jnp.argsort(jnp.abs(theta), stable=True)
    ascending = jnp.argsort(theta, stable=True)
    m = theta.shape[0]
    positions = np.empty(m, np.int32)
    positions[0::2] = np.arange(m - 1, m - 1 - len(positions[0::2]), -1)
    positions[1::2] = np.arange(len(positions[1::2]))
    return ascending[positions]


# -- the Lanczos loop --------------------------------------------------------------------------


def _orthogonalize(V: Array, w: Array, j: Array) -> tuple[Array, Array, Array]:
    """``(w', h, ||w'||)``: ``w`` minus its projection on the rows of ``V`` (orthonormal,
    or zero), and the coefficients ``h = V^* w``. Classical Gram-Schmidt, repeated when it
    cancelled most of ``w`` (ARPACK's DGKS test ``||w'|| < ||w|| / sqrt(2)``, which for an
    orthonormal ``V`` is ``||w'|| < ||h||``): the basis stays orthogonal to rounding with
    two passes at most. The passes are a ``while_loop``, so one is compiled. (``j``, the
    last row of ``V`` that is not zero, is for :func:`_orthogonalize_by_blas`.)"""
    del j

    def one_pass(state):
        w, h, _, passes = state
        correction = jnp.matmul(jnp.conj(V), w, precision=lax.Precision.HIGHEST)
        w = w - jnp.matmul(correction, V, precision=lax.Precision.HIGHEST)
        return w, h + correction, jnp.linalg.norm(w), passes + 1

    def again(state):
        _, h, norm, passes = state
        return (passes == 0) | ((passes == 1) & (norm < jnp.linalg.norm(h)))

    h = jnp.zeros(V.shape[:1], jnp.result_type(V.dtype, w.dtype))
    norm = jnp.zeros((), jnp.finfo(h.dtype).dtype)
    w, h, norm, _ = lax.while_loop(again, one_pass, (w, h, norm, jnp.int32(0)))
    return w, h, norm


def _orthogonalize_by_blas(V: Array, w: Array, j: Array) -> tuple[Array, Array, Array]:
    """:func:`_orthogonalize` on CPU: one host call
    (:func:`jaxdia._kernels.lapack.gram_schmidt`, as ``gmres``'s) whose classical passes
    run over rows ``0..j`` (two BLAS ``?gemv`` each), the second where the first left
    less than ``||w|| / sqrt(2)``: the same DGKS test, on the norm before the pass
    rather than the coefficients' (equal for an orthonormal ``V``). A compiled program
    holds a custom call where the loop of passes held a dozen fused loops."""
    real = jnp.finfo(w.dtype).dtype
    floor = (jnp.linalg.norm(w) / math.sqrt(2)).astype(real)
    return lapack.gram_schmidt(V, w, jnp.asarray(j, jnp.int32), floor)


def _pseudo_random(n: int, seed: Array, dtype: DTypeLike) -> Array:
    """A deterministic vector with entries spread over ``[-1, 1)`` (an integer hash of the
    index and ``seed``): a starting vector, or a new direction out of an invariant
    subspace. Cheaper to compile than ``jax.random``'s Threefry, and reproducible."""
    index = lax.iota(np.uint32, 2 * n) + seed.astype(np.uint32) * np.uint32(0x9E3779B9)
    h = index * np.uint32(0x85EBCA6B)
    h = h ^ (h >> 13)
    h = h * np.uint32(0xC2B2AE35)
    h = h ^ (h >> 16)
    real = jnp.finfo(dtype).dtype
    values = (h >> 8).astype(real) / real.type(2**23) - 1
    if jnp.issubdtype(dtype, jnp.complexfloating):
        return (values[:n] + 1j * values[n:]).astype(dtype)
    return values[:n].astype(dtype)


def _lanczos(op, v0: Array, config: Config, tol: Array):
    """``(theta, Y, converged, nconv, iterations, matvecs)``: the ``k`` wanted Ritz values
    of ``op`` (most wanted first) and their Ritz vectors as rows of ``Y``.

    ``T`` holds what the Lanczos relation ``op V = V T + beta v e^T`` says, not the
    Gram-Schmidt coefficients: ``alpha_j = Re(v_j^H op v_j)`` on the diagonal,
    ``beta_j = ||w_j||`` beside it, and after a restart the kept Ritz values with the
    exact arrow ``beta s_last`` (recomputed coefficients would carry ``eps ||op||`` of
    rounding, and the residual estimates could then never pass the test). The other
    coefficients only orthogonalize.
    """
    n, k, ncv = config.n, config.k, config.ncv
    dtype = v0.dtype
    real = jnp.finfo(dtype).dtype
    eps = float(jnp.finfo(dtype).eps)
    tol = jnp.where(tol > 0, tol, eps).astype(real)

    norm0 = jnp.linalg.norm(v0)
    start = jnp.where(norm0 > 0, v0, _pseudo_random(n, jnp.int32(0), dtype))
    start = start / jnp.linalg.norm(start)
    orthogonalize = (
        _orthogonalize_by_blas if _dispatch.gram_schmidt_by_blas(dtype) else _orthogonalize
    )
    rows = np.arange(ncv)

    def step(j, state):
        V, H, beta, first, iteration = state
        # An invariant subspace (w lost to rounding) goes on in a new direction
        # orthogonal to V: a second try with a pseudo-random vector, in the same loop,
        # so that one orthogonalization is compiled. ``h`` is the first try's.
        fresh = _pseudo_random(n, 1 + iteration * (ncv + 1) + j, dtype)

        def attempt(state):
            tries, w, _, h, _ = state
            w, coefficients, norm = orthogonalize(V, w, j)
            h = jnp.where(tries == 0, coefficients, h)
            lost = (tries == 0) & (norm <= 10 * eps * jnp.linalg.norm(coefficients))
            return tries + 1, jnp.where(lost, fresh, w), norm, h, lost

        w = op(lax.dynamic_index_in_dim(V, j, keepdims=False))
        start = (jnp.int32(0), w, jnp.zeros((), real), jnp.zeros((ncv + 1,), dtype), False)
        tries, w, norm, h, _ = lax.while_loop(
            lambda state: (state[0] == 0) | state[4], attempt, start
        )
        # Column j of T: alpha_j on the diagonal and, above it, the previous step's beta
        # (after a restart, the arrow): one column read and written in place.
        column = lax.dynamic_index_in_dim(H, j, axis=1, keepdims=False)
        column = jnp.where(rows == j, jnp.real(h[j]).astype(dtype), column)
        column = jnp.where((rows == j - 1) & (j > first), beta.astype(dtype), column)
        H = lax.dynamic_update_index_in_dim(H, column, j, axis=1)
        beta = jnp.where(tries > 1, 0, norm)
        V = lax.dynamic_update_index_in_dim(V, w / norm, j + 1, axis=0)
        return V, H, beta, first, iteration

    def ritz(H, beta):
        """The Ritz values and vectors of ``T``, most wanted first, and how many of the
        ``k`` wanted ones pass the convergence test. ``T`` is Hermitian and ``H`` holds
        its upper triangle (the lower one is zero), which LAPACK reads as it is."""
        theta, S = jnp.linalg.eigh(H, UPLO="U", symmetrize_input=False)
        order = _rank(theta, config.which)
        theta, S = theta[order], S[:, order]
        residual = jnp.abs(beta) * jnp.abs(S[ncv - 1, :k])
        bound = tol * jnp.maximum(eps ** (2 / 3), jnp.abs(theta[:k]))
        nconv = jnp.sum(residual <= bound, dtype=np.int32)
        return theta, S, nconv

    def more(state):
        *_, done, _ = state
        return ~done

    def restart(state):
        V, H, beta, first, iteration, matvecs, _, _ = state
        V, H, beta, _, _ = lax.fori_loop(first, ncv, step, (V, H, beta, first, iteration))
        matvecs = matvecs + ncv - first
        theta, S, nconv = ritz(H, beta)
        # A NaN or inf in T (from NaN entries, or an exactly singular A - sigma I) stays:
        # stop at once instead of restarting maxiter times.
        broken = ~(jnp.all(jnp.isfinite(H)) & jnp.isfinite(beta))
        done = (nconv >= k) | (iteration + 1 >= config.maxiter) | broken

        # ARPACK's choice: the wanted vectors, plus one more per converged one (at most
        # half of the rest), which keeps converged directions from stalling the others.
        # Interior eigenvalues (SM without a shift) converge slowly unless half of the
        # rest is kept from the start (5-10x fewer products in the tests' problems).
        extra = (ncv - k) // 2 if config.which == "SM" else jnp.minimum(nconv, (ncv - k) // 2)
        kept_count = jnp.minimum(k + extra, ncv - 1)

        # The thick restart, one product: the kept Ritz vectors (most wanted first) become
        # the first rows of V and the residual vector V[ncv] the next one. After the last
        # restart too: V's first k rows are then the wanted Ritz vectors.
        kept = rows < kept_count
        combination = jnp.where(kept, jnp.pad(S, ((0, 1), (0, 0))), 0)
        residual_row = (rows == kept_count) & (np.arange(ncv + 1)[:, None] == ncv)
        combination = jnp.where(residual_row, 1, combination)
        combination = jnp.pad(combination, ((0, 0), (0, 1)))
        V = jnp.matmul(combination.T, V, precision=lax.Precision.HIGHEST)
        # T: the kept Ritz values, and the arrow beta s_last in column kept_count.
        arrow = jnp.where(kept, beta * jnp.conj(S[ncv - 1]), 0).astype(dtype)
        diagonal = jnp.where(kept, theta, 0).astype(dtype)
        column = rows[None, :]
        H = jnp.where(
            rows[:, None] == column,
            diagonal[:, None],
            jnp.where(column == kept_count, arrow[:, None], 0),
        ).astype(dtype)
        first = jnp.where(done, first, kept_count)
        return V, H, beta, first, iteration + 1, matvecs, done, (theta[:k], nconv)

    V = jnp.zeros((ncv + 1, n), dtype).at[0].set(start)
    H = jnp.zeros((ncv, ncv), dtype)
    zero = jnp.int32(0)
    # The last restart's wanted Ritz values ride along (the loop stops after restarting).
    state = (
        V,
        H,
        jnp.zeros((), real),
        zero,
        zero,
        zero,
        jnp.bool_(False),
        (jnp.zeros((k,), real), zero),
    )
    V, _, _, _, iterations, matvecs, _, (theta, nconv) = lax.while_loop(more, restart, state)
    return theta, V[:k], nconv >= k, nconv, iterations, matvecs


# -- one matrix ------------------------------------------------------------------------------


def _shift_invert(A: DiaParts, sigma: Array):
    """``x -> (A - sigma I)^{-1} x`` as the plan has it (``Use.SOLVES``): ``A - sigma I``
    factored once (banded LU), each application one solve with the stored factor; a
    tridiagonal one solved afresh each time by a one-shot solve."""
    B = shifted(A, sigma)
    plan = choose(B.offsets, B.shape[0], use=Use.SOLVES)
    if not plan.stored:  # no arrays: made where it is used, not carried by the loops
        return lambda x: solve(B, factor(B, plan), x, function="eigsh")
    stored = factor(B, plan)
    return lambda x: solve(B, stored, x, function="eigsh")


def _one(config: Config, data: Array, v0: Array, sigma: Array, tol: Array):
    """``(w ascending, V as columns, EigshInfo)`` of one matrix."""
    A = DiaParts(data, config.offsets, (config.n, config.n))
    k = config.k
    if config.dense:
        evals, evecs = jnp.linalg.eigh(dia_to_dense(data, config.offsets, A.shape))
        keys = 1 / (evals - sigma) if config.shift_invert else evals
        wanted = _rank(keys, config.which)[:k]
        lam, Y = evals[wanted], evecs[:, wanted].T
        converged, nconv = jnp.bool_(True), jnp.int32(k)
        iterations = matvecs = jnp.int32(0)
    else:
        op = _shift_invert(A, sigma) if config.shift_invert else dia_matvec(A)
        theta, Y, converged, nconv, iterations, matvecs = _lanczos(op, v0, config, tol)
        lam = sigma + 1 / theta if config.shift_invert else theta
        lam = jnp.real(lam)
    order = jnp.argsort(lam)
    lam, Y = lam[order], Y[order]
    V = Y.T  # eigenvectors as columns, as SciPy returns them
    residual = spmm(data, V, offsets=config.offsets, shape=A.shape) - V * lam.astype(V.dtype)
    residuals = jnp.linalg.norm(residual, axis=0)
    if not config.dense:
        accurate = _accurate(A, lam, residuals, sigma, tol, config.shift_invert)
        converged = converged & jnp.all(accurate)
        nconv = jnp.minimum(nconv, jnp.sum(accurate, dtype=nconv.dtype))
    info = EigshInfo(converged, nconv, iterations, matvecs, residuals)
    return lam.astype(jnp.finfo(data.dtype).dtype), V, info


#: The rounding allowance of the true residual test (:func:`_accurate`), in units of
#: ``sqrt(n) eps ||A||_inf``.
RESIDUAL_ROUNDING = 1e3


def _accurate(A: DiaParts, lam: Array, residuals: Array, sigma: Array, tol: Array, shift_invert):
    """Whether each pair's true residual ``||A v - lambda v||`` passes the test the Krylov
    relation estimated: ``tol |lambda|`` (with a shift, ARPACK's test on ``nu = 1 /
    (lambda - sigma)`` allows ``tol ||A - sigma I||``), plus rounding,
    ``RESIDUAL_ROUNDING sqrt(n) eps ||A||_inf``. The estimate is exact only up to the
    relation's rounding, ``eps ||op||``: where ``A - sigma I`` is nearly singular,
    ``||op||`` is huge and the pairs away from ``sigma`` pass the estimate with true
    residuals many orders of magnitude above it."""
    real = residuals.dtype
    eps = float(jnp.finfo(real).eps)
    tol = jnp.where(tol > 0, tol, eps).astype(real)
    inside = in_bounds(A.offsets, A.shape)
    norm = jnp.max(jnp.sum(jnp.abs(jnp.where(inside, A.data, 0)), axis=0), initial=0.0)
    norm = norm.astype(real)  # ||A||_1 = ||A||_inf for a Hermitian A
    allowed = tol * jnp.abs(lam).astype(real)
    if shift_invert:
        allowed = allowed + tol * (norm + jnp.abs(sigma).astype(real))
    rounding = RESIDUAL_ROUNDING * math.sqrt(A.shape[0]) * eps * norm
    return residuals <= allowed + rounding


@partial(jax.custom_jvp, nondiff_argnums=(0,))
def _solve(config: Config, data, v0, sigma, tol):
    return _one(config, data, v0, sigma, tol)


@_solve.defjvp
def _solve_jvp(config, primals, tangents):
    data, v0, sigma, tol = primals
    ddata = tangents[0]
    lam, V, info = _solve(config, data, v0, sigma, tol)
    # d lambda_i = Re(v_i^H dA v_i) over the stored slots: sddmm(conj(v_i), v_i) is the
    # slot-wise product conj(v_i[row]) v_i[column].
    weights = jax.vmap(
        lambda v: sddmm(
            jnp.conj(v)[:, None], v[:, None], offsets=config.offsets, shape=(config.n, config.n)
        ),
        in_axes=1,
    )(V)
    dlam = jnp.real(
        jnp.einsum("idj,dj->i", weights, ddata, precision=lax.Precision.HIGHEST)
    ).astype(lam.dtype)
    # Eigenvector derivatives are not computed: NaN, so that a loss reading them says so.
    dV = jnp.full(V.shape, jnp.nan, V.dtype) * jnp.sum(ddata).astype(V.dtype)
    dinfo = jax.tree.map(_zero_tangent, info)
    return (lam, V, info), (dlam, dV, dinfo)


def _zero_tangent(x: Array) -> Array | np.ndarray:
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.zeros_like(x)
    return np.zeros(x.shape, jax.dtypes.float0)


# -- the entry point ---------------------------------------------------------------------------


def check_hermitian(A: DiaParts) -> None:
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
                "eigsh: A must not contain infs or NaNs, but "
                f"A[{j - A.offsets[k]}, {j}] = {host[(*member, k, j)]}{where}"
            )
        defect, scale = _host_hermitian_defect(host.astype(work), A.offsets, A.shape[0])
    if not defect <= 1000 * float(np.finfo(work).eps) * scale:
        kind = "Hermitian" if np.dtype(A.data.dtype).kind == "c" else "symmetric"
        raise ValueError(
            f"eigsh: A must be {kind} (eigsh solves Hermitian problems), but max|A - A^H| = "
            f"{defect:.3g} against max|A| = {scale:.3g}; use A + A.H (or (A + A.H) / 2) if "
            "the asymmetry is rounding"
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


def _positive_int(value: object, name: str) -> int:
    value = static_int(value, f"eigsh: {name}")
    if value <= 0:
        raise ValueError(f"eigsh: {name} must be a positive int, got {value}")
    return value


def _eigenpairs(
    A: DiaParts,
    k: int = 6,
    *,
    sigma: Scalar | None = None,
    which: str = "LM",
    v0: ArrayLike | None = None,
    ncv: int | None = None,
    maxiter: int | None = None,
    tol: Scalar = 0.0,
) -> tuple[Array, Array, EigshInfo]:
    """``(w, V, info)`` for a square ``A`` and the options of :func:`eigsh`, checked."""
    n = A.shape[0]
    k = _positive_int(k, "k")
    if k >= n:
        raise ValueError(
            f"eigsh: k must be smaller than n = {n} (SciPy's rule), got k = {k}; for all "
            "eigenvalues use jnp.linalg.eigh(A.todense())"
        )
    if not isinstance(which, str) or which.upper() not in WHICH:
        raise ValueError(f"eigsh: which must be one of {', '.join(WHICH)}, got {which!r}")
    which = which.upper()
    if ncv is None:
        ncv = min(n, max(2 * k + 1, 20))
    else:
        ncv = static_int(ncv, "eigsh: ncv")
        if not k < ncv <= n:
            raise ValueError(
                f"eigsh: ncv must satisfy k < ncv <= n ({k} < ncv <= {n}), got ncv = {ncv}"
            )
    maxiter = n * 10 if maxiter is None else _positive_int(maxiter, "maxiter")
    tol = scalar(tol, "eigsh: tol", nonnegative=True)
    dtype = A.dtype
    work = accumulation_dtype(dtype)
    shift_invert = sigma is not None
    if shift_invert:
        sigma = scalar(sigma, "eigsh: sigma", hint=" (a Hermitian A has real eigenvalues)")
    else:
        sigma = np.zeros((), np.float32)
    batch = A.batch_shape
    if v0 is None:
        v0 = np.zeros(n, work)
    else:
        v0 = as_array(v0, "eigsh: v0")
        if v0.shape[-1:] != (n,):
            raise ValueError(
                f"eigsh: v0 must have shape ({n},) (or a batch of them), got shape {v0.shape}"
            )
        if np.dtype(v0.dtype).kind == "c" and work.kind != "c":
            raise TypeError(
                f"eigsh: v0 is complex ({v0.dtype}) but A is real ({dtype}); pass a real v0"
            )
        try:
            np.broadcast_shapes(v0.shape[:-1], batch)
        except ValueError:
            raise ValueError(
                f"eigsh: v0's batch shape {v0.shape[:-1]} does not broadcast "
                f"with A's batch shape {batch}"
            ) from None
    if not isinstance(A.data, jax.core.Tracer):
        check_hermitian(A)
    dense = n <= DENSE_UP_TO or 2 * ncv > n
    config = Config(A.offsets, n, k, ncv, which, shift_invert, dense, maxiter)
    return _run(A.data, v0, sigma, tol, config=config, dtype=work)


@partial(jax.jit, static_argnames=("config", "dtype"))
def _run(data, v0, sigma, tol, *, config: Config, dtype):
    """:func:`eigsh` for checked arguments, as one compiled call; a batch is flattened
    and mapped with ``vmap``."""
    batch = data.shape[:-2]
    real = jnp.finfo(dtype).dtype
    data = data.astype(dtype)
    v0 = jnp.broadcast_to(v0.astype(dtype), (*batch, config.n))
    sigma = jnp.asarray(sigma).astype(real)
    tol = jnp.asarray(tol).astype(real)
    if not batch:
        return _solve(config, data, v0, sigma, tol)
    size = math.prod(batch)
    flat = jax.vmap(lambda d, v: _solve(config, d, v, sigma, tol))(
        data.reshape(size, *data.shape[-2:]), v0.reshape(size, config.n)
    )
    return jax.tree.map(lambda x: x.reshape(*batch, *x.shape[1:]), flat)


# -- the public function ------------------------------------------------------------------

#: What :func:`eigsh` returns: ``w``, then ``v`` with ``return_eigenvectors``, then
#: ``info`` with ``return_info`` (one array alone, as SciPy's).
EigshResult: TypeAlias = (
    Array | tuple[Array, Array] | tuple[Array, EigshInfo] | tuple[Array, Array, EigshInfo]
)


@overload
def eigsh(
    A: DiaMatrix,
    k: int = ...,
    M: object = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    return_eigenvectors: Literal[True] = ...,
    Minv: object = ...,
    OPinv: object = ...,
    mode: str = ...,
    *,
    return_info: Literal[False] = ...,
) -> tuple[Array, Array]: ...
@overload
def eigsh(
    A: DiaMatrix,
    k: int = ...,
    M: object = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    *,
    return_eigenvectors: Literal[False],
    Minv: object = ...,
    OPinv: object = ...,
    mode: str = ...,
    return_info: Literal[False] = ...,
) -> Array: ...
@overload
def eigsh(
    A: DiaMatrix,
    k: int = ...,
    M: object = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    return_eigenvectors: Literal[True] = ...,
    Minv: object = ...,
    OPinv: object = ...,
    mode: str = ...,
    *,
    return_info: Literal[True],
) -> tuple[Array, Array, EigshInfo]: ...
@overload
def eigsh(
    A: DiaMatrix,
    k: int = ...,
    M: object = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    *,
    return_eigenvectors: Literal[False],
    Minv: object = ...,
    OPinv: object = ...,
    mode: str = ...,
    return_info: Literal[True],
) -> tuple[Array, EigshInfo]: ...
@overload
def eigsh(
    A: DiaMatrix,
    k: int = ...,
    M: object = ...,
    sigma: Scalar | None = ...,
    which: str = ...,
    v0: ArrayLike | None = ...,
    ncv: int | None = ...,
    maxiter: int | None = ...,
    tol: Scalar = ...,
    return_eigenvectors: bool = ...,
    Minv: object = ...,
    OPinv: object = ...,
    mode: str = ...,
    *,
    return_info: bool = ...,
) -> EigshResult: ...
def eigsh(
    A: DiaMatrix,
    k: int = 6,
    M: object = None,
    sigma: Scalar | None = None,
    which: str = "LM",
    v0: ArrayLike | None = None,
    ncv: int | None = None,
    maxiter: int | None = None,
    tol: Scalar = 0.0,
    return_eigenvectors: bool = True,
    Minv: object = None,
    OPinv: object = None,
    mode: str = "normal",
    *,
    return_info: bool = False,
) -> EigshResult:
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
    member has converged). Shift-invert factors ``A - sigma I`` once (the banded LU of
    :func:`jaxdia.lu_factor`, O(n l (l + u))) and applies ``(A - sigma I)^{-1}`` with
    the stored factor, O(n (l + u)) per step; a tridiagonal ``A - sigma I`` is solved
    afresh each step by ``lax.linalg.tridiagonal_solve`` instead (O(n) either way). A
    ``sigma`` that is an eigenvalue (``A - sigma I`` exactly singular) raises at once
    outside ``jit``; under ``jit`` the loop stops after its first restart with NaN
    eigenvalues and ``converged`` False (as it does for NaN entries).
    Matrices with ``n <= 128``, or ``ncv > n / 2`` (``k`` close to ``n``), are solved
    densely with ``jnp.linalg.eigh``. Any ``1 <= k < n`` works.

    The estimate from the Krylov relation is exact only to its rounding, ``eps ||op||``,
    which a nearly singular ``A - sigma I`` makes huge: so on the Lanczos path a pair
    counts as converged only if its true residual passes the test too, ``||A v - lambda
    v|| <= tol |lambda|`` (with a shift, ``tol (|lambda| + ||A - sigma I||)``, ARPACK's
    test on ``nu``) plus ``1000 sqrt(n) eps ||A||_inf`` of rounding.

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
      ValueError: if ``A`` is not square, or (with concrete data) not Hermitian or not
        finite (NaN or inf entries); if ``k`` is not in ``[1, n)``, ``which`` is
        unknown, ``ncv`` is out of range, or ``v0`` has the wrong shape.
      numpy.linalg.LinAlgError: outside ``jit``, if ``A - sigma I`` is exactly singular
        (SciPy raises "Factor is exactly singular").
      NotImplementedError: for ``M``, ``Minv``, ``OPinv`` or another ``mode``.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> n = 200
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
      >>> w, v = jaxdia.eigsh(A, k=3, which="SA")
      >>> exact = 2 - 2 * jnp.cos(jnp.arange(1, 4) * jnp.pi / (n + 1))
      >>> bool(jnp.allclose(w, exact, atol=1e-4)), v.shape  # float32: converged to ~1e-5
      (True, (200, 3))
      >>> w, info = jaxdia.eigsh(A, k=3, sigma=0.0, return_eigenvectors=False,
      ...                        return_info=True)
      >>> bool(info.converged), bool(jnp.allclose(w, exact, atol=1e-4))
      (True, True)
    """
    A = as_square_matrix(A, "eigsh")
    reject_unsupported("eigsh", "M", M, "generalized eigenproblems need a factorization of M")
    reject_unsupported("eigsh", "Minv", Minv, "only standard problems are solved")
    reject_unsupported("eigsh", "OPinv", OPinv, "shift-invert uses jaxdia's banded solver")
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
    w, v, info = _eigenpairs(
        parts, k, sigma=sigma, which=which, v0=v0, ncv=ncv, maxiter=maxiter, tol=tol
    )
    w, v = w.astype(np.finfo(A.dtype).dtype), v.astype(A.dtype)
    if sigma is not None and not isinstance(w, jax.core.Tracer):
        singular = ~np.all(np.isfinite(np.asarray(w)), axis=-1)
        if singular.any():
            where = (
                f" (matrix {tuple(np.argwhere(singular)[0])} of the batch)" if A.batch_shape else ""
            )
            raise np.linalg.LinAlgError(
                f"eigsh: A - sigma I is exactly singular{where} (sigma = "
                f"{np.asarray(sigma).item()} is an eigenvalue of A to rounding, so "
                "(A - sigma I)^-1 does not exist; SciPy raises 'Factor is exactly "
                "singular'): move sigma off the spectrum"
            )
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
