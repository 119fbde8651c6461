"""The Lanczos iteration of :func:`jaxdia.eigsh`: :func:`lanczos`, thick-restart Lanczos
for an operator that is Hermitian in an inner product ``<x, y>_B = x^H B y``.

The method is thick-restart Lanczos (Wu & Simon 2000; for a Hermitian operator it is
Stewart's Krylov-Schur) with full reorthogonalization, in fixed-size buffers:

* a basis ``V`` of ``ncv + 1`` vectors and the projected matrix ``T = V^H B op V``
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
converged).

With ``B = I`` (a standard problem, and shift-invert without ``M``) the inner product is
the Euclidean one, and on CPU each step's Gram-Schmidt is one BLAS host call. With a
``B`` (ARPACK's ``bmat = "G"``: the generalized problems of :mod:`.eigsh_modes`) the loop
also keeps ``P = B V``: the coefficients of a pass are ``P^H w`` (no product with ``B``),
and ``B w`` is computed once per step, after the first pass, for the ``B``-norm (a second
pass updates it as ``B w - P h``: its coefficients are rounding-sized). The operator
then takes ``(v, B v)``: ARPACK's shift-invert modes apply ``(A - sigma M)^-1`` to the
stored ``B v`` instead of multiplying again. The start vector is ``op v0`` (ARPACK's
``dgetv0``: in the range of ``op`` where ``B`` is singular).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .. import _dispatch
from .._kernels import lapack
from .._typing import DTypeLike

#: ``which`` values: largest/smallest magnitude, largest/smallest algebraic, both ends.
WHICH = ("LM", "SM", "LA", "SA", "BE")

_HIGHEST = lax.Precision.HIGHEST


class Loop(NamedTuple):
    """The static sizes of a Lanczos run: ``k`` wanted pairs of an ``n x n`` operator,
    ranked by ``which``, with ``ncv`` basis vectors and at most ``maxiter`` restarts."""

    n: int
    k: int
    ncv: int
    which: str
    maxiter: int


class Ritz(NamedTuple):
    """What :func:`lanczos` returns: the ``k`` wanted Ritz values ``theta`` (most wanted
    first), their Ritz vectors as the rows of ``Y``, which of them ``passed`` the
    convergence test, the restarts (``iterations``) and the applications of the
    operator (``matvecs``)."""

    theta: Array
    Y: Array
    passed: Array
    iterations: Array
    matvecs: Array


def rank(theta: Array, which: str) -> Array:
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


# -- Gram-Schmidt --------------------------------------------------------------------------


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
        correction = jnp.matmul(jnp.conj(V), w, precision=_HIGHEST)
        w = w - jnp.matmul(correction, V, precision=_HIGHEST)
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


def b_norm(w: Array, Bw: Array) -> Array:
    """``sqrt(w^H B w)`` from ``w`` and ``B w`` (zero where rounding, or a semidefinite
    ``B``, makes ``w^H B w`` negative)."""
    return jnp.sqrt(jnp.maximum(jnp.real(jnp.vdot(w, Bw)), 0))


def _b_orthogonalize(
    V: Array, P: Array, w: Array, B: Callable[[Array], Array]
) -> tuple[Array, Array, Array, Array]:
    """``(w', B w', h, ||w'||_B)``: :func:`_orthogonalize` in the ``B`` inner product, for
    a ``B``-orthonormal ``V`` (or zero rows) with ``P = B V``: ``h = P^H w``, one product
    with ``B`` after the first pass, and a second pass (DGKS's test) that updates ``B w'``
    from ``P``."""

    def project(w):
        h = jnp.matmul(jnp.conj(P), w, precision=_HIGHEST)
        return w - jnp.matmul(h, V, precision=_HIGHEST), h

    w1, h1 = project(w)
    Bw1 = B(w1)
    norm1 = b_norm(w1, Bw1)

    def second(_):
        w2, h2 = project(w1)
        Bw2 = Bw1 - jnp.matmul(h2, P, precision=_HIGHEST)
        return w2, Bw2, h1 + h2, b_norm(w2, Bw2)

    return lax.cond(norm1 < jnp.linalg.norm(h1), second, lambda _: (w1, Bw1, h1, norm1), None)


def pseudo_random(n: int, seed: Array, dtype: DTypeLike) -> Array:
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


# -- the loop ------------------------------------------------------------------------------


def lanczos(
    op: Callable[..., Array],
    v0: Array,
    loop: Loop,
    tol: Array,
    B: Callable[[Array], Array] | None = None,
) -> Ritz:
    """The ``k`` wanted Ritz pairs of ``op`` (see :class:`Ritz`), Hermitian in the
    Euclidean inner product (``B`` None: ``op`` takes ``v``) or in ``B``'s (``op`` takes
    ``(v, B v)``; the Ritz vectors are ``B``-orthonormal). ``v0`` zero: a pseudo-random
    start.

    ``T`` holds what the Lanczos relation ``op V = V T + beta v e^T`` says, not the
    Gram-Schmidt coefficients: ``alpha_j = Re(v_j^H B op v_j)`` on the diagonal,
    ``beta_j = ||w_j||_B`` beside it, and after a restart the kept Ritz values with the
    exact arrow ``beta s_last`` (recomputed coefficients would carry ``eps ||op||`` of
    rounding, and the residual estimates could then never pass the test). The other
    coefficients only orthogonalize.
    """
    n, k, ncv = loop.n, loop.k, loop.ncv
    dtype = v0.dtype
    real = jnp.finfo(dtype).dtype
    eps = float(jnp.finfo(dtype).eps)
    tol = jnp.where(tol > 0, tol, eps).astype(real)
    generalized = B is not None

    norm0 = jnp.linalg.norm(v0)
    start = jnp.where(norm0 > 0, v0, pseudo_random(n, jnp.int32(0), dtype))
    orthogonalize = (
        _orthogonalize_by_blas if _dispatch.gram_schmidt_by_blas(dtype) else _orthogonalize
    )
    basis = jnp.zeros((ncv + 1, n), dtype)
    if B is None:
        V = basis.at[0].set(start / jnp.linalg.norm(start))
    else:  # V and P = B V, side by side
        start = op(start, B(start))
        B_start = B(start)
        norm = b_norm(start, B_start)
        V = jnp.stack([basis.at[0].set(start / norm), basis.at[0].set(B_start / norm)])
    rows = np.arange(ncv)

    def step(j, state):
        V, H, beta, first, iteration = state
        # An invariant subspace (w lost to rounding) goes on in a new direction
        # orthogonal to V: a second try with a pseudo-random vector, in the same loop,
        # so that one orthogonalization is compiled. ``h`` is the first try's.
        fresh = pseudo_random(n, 1 + iteration * (ncv + 1) + j, dtype)

        def attempt(state):
            tries, w, _, h, _ = state
            if B is not None:
                w, Bw, coefficients, norm = _b_orthogonalize(V[0], V[1], w[0], B)
                w = jnp.stack([w, Bw])
            else:
                w, coefficients, norm = orthogonalize(V, w, j)
            h = jnp.where(tries == 0, coefficients, h)
            lost = (tries == 0) & (norm <= 10 * eps * jnp.linalg.norm(coefficients))
            fresh_w = jnp.stack([fresh, fresh]) if generalized else fresh
            return tries + 1, jnp.where(lost, fresh_w, w), norm, h, lost

        if generalized:
            v = lax.dynamic_index_in_dim(V, j, axis=1, keepdims=False)
            w = op(v[0], v[1])
            w = jnp.stack([w, w])  # the second row: B w, made by the orthogonalization
        else:
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
        V = lax.dynamic_update_index_in_dim(V, w / norm, j + 1, axis=int(generalized))
        return V, H, beta, first, iteration

    def ritz(H, beta):
        """The Ritz values and vectors of ``T``, most wanted first, and which of the
        ``k`` wanted ones pass the convergence test. ``T`` is Hermitian and ``H`` holds
        its upper triangle (the lower one is zero), which LAPACK reads as it is."""
        theta, S = jnp.linalg.eigh(H, UPLO="U", symmetrize_input=False)
        order = rank(theta, loop.which)
        theta, S = theta[order], S[:, order]
        residual = jnp.abs(beta) * jnp.abs(S[ncv - 1, :k])
        bound = tol * jnp.maximum(eps ** (2 / 3), jnp.abs(theta[:k]))
        return theta, S, residual <= bound

    def more(state):
        *_, done, _ = state
        return ~done

    def restart(state):
        V, H, beta, first, iteration, matvecs, _, _ = state
        V, H, beta, _, _ = lax.fori_loop(first, ncv, step, (V, H, beta, first, iteration))
        matvecs = matvecs + ncv - first
        theta, S, passed = ritz(H, beta)
        nconv = jnp.sum(passed, dtype=np.int32)
        # A NaN or inf in T (from NaN entries, or an exactly singular A - sigma I) stays:
        # stop at once instead of restarting maxiter times.
        broken = ~(jnp.all(jnp.isfinite(H)) & jnp.isfinite(beta))
        done = (nconv >= k) | (iteration + 1 >= loop.maxiter) | broken

        # ARPACK's choice: the wanted vectors, plus one more per converged one (at most
        # half of the rest), which keeps converged directions from stalling the others.
        # Interior eigenvalues (SM without a shift) converge slowly unless half of the
        # rest is kept from the start (5-10x fewer products in the tests' problems).
        extra = (ncv - k) // 2 if loop.which == "SM" else jnp.minimum(nconv, (ncv - k) // 2)
        kept_count = jnp.minimum(k + extra, ncv - 1)

        # The thick restart, one product: the kept Ritz vectors (most wanted first) become
        # the first rows of V and the residual vector V[ncv] the next one. After the last
        # restart too: V's first k rows are then the wanted Ritz vectors.
        kept = rows < kept_count
        combination = jnp.where(kept, jnp.pad(S, ((0, 1), (0, 0))), 0)
        residual_row = (rows == kept_count) & (np.arange(ncv + 1)[:, None] == ncv)
        combination = jnp.where(residual_row, 1, combination)
        combination = jnp.pad(combination, ((0, 0), (0, 1)))
        V = jnp.matmul(combination.T, V, precision=_HIGHEST)
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
        return V, H, beta, first, iteration + 1, matvecs, done, (theta[:k], passed)

    H = jnp.zeros((ncv, ncv), dtype)
    zero = jnp.int32(0)
    # The last restart's wanted Ritz values ride along (the loop stops after restarting).
    state = (
        V,
        H,
        jnp.zeros((), real),
        zero,
        zero,
        jnp.int32(int(generalized)),  # the start's op v0
        jnp.bool_(False),
        (jnp.zeros((k,), real), jnp.zeros((k,), bool)),
    )
    V, _, _, _, iterations, matvecs, _, (theta, passed) = lax.while_loop(more, restart, state)
    Y = V[0, :k] if generalized else V[:k]
    return Ritz(theta, Y, passed, iterations, matvecs)
