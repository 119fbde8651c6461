"""The Taylor stepping of :func:`jaxdia.expm_multiply`, for any product ``x -> A x``:
SciPy's ``_expm_multiply_simple_core`` (:func:`expm_multiply_simple_core`: ``s``
substeps of a truncated Taylor series that stops early once two consecutive terms are
negligible) and, on a grid of times, algorithm 5.2 with SciPy's cases (``q <= s``: one
step per point; otherwise blocks of points that share their Taylor terms,
:func:`expm_multiply_interval_core`), put together by :func:`evolve`.

What differs from SciPy:

* The early stop's tolerance is the unit roundoff of the working dtype (SciPy uses
  double's for every dtype). Its norm counts ``|re| + |im|`` of complex entries
  (:func:`exact_inf_norm`), and for a DiaMatrix the terms' norms are exact every
  :data:`NORM_EVERY` terms and bounded in between: the test passes at SciPy's term or a
  few terms later.
* On a time grid the first point ``exp(t_0 A) B`` gets the parameters of the larger of
  ``|t_0|`` and the span ``|t_q - t_0|``. SciPy takes those of the span, which are too
  few substeps when ``|t_0|`` is larger; those of ``|t_0|`` alone lose accuracy when the
  span is larger (each later point inherits the first one's relative error, amplified
  where ``t_0 < 0`` shrinks components that later grow).

``(m, s)`` are traced integers and the loops are ``lax.while_loop``, so everything works
under ``jit`` and ``vmap`` (a batch with different ``(m, s)`` runs until its last member
is done).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._geometry import pairwise_sum
from .._typing import DTypeLike
from .expm_norms import LazyOperatorNormInfo, Product, fragment_3_1

#: The exact norm of a Taylor term is computed every this many terms; in between, the
#: early stop tests the bound ``||c A x|| <= |c| ||A|| ||x||`` of the last exact one.
NORM_EVERY = 4


def unit_roundoff(dtype: DTypeLike) -> float:
    return float(np.finfo(dtype).eps) / 2


def exact_inf_norm(x: Array) -> Array:
    """The norm of the early stop, as SciPy's ``_exact_inf_norm``: the largest ``|x_i|`` of
    a vector, the largest row sum of ``|x|`` of a block ``(n, c)``. Complex entries count
    ``|re| + |im|`` (no square root; within a factor sqrt(2) of the modulus, on both
    sides of the test)."""
    size = jnp.abs(x.real) + jnp.abs(x.imag) if jnp.iscomplexobj(x) else jnp.abs(x)
    if x.ndim == 2:  # row sums as adds of columns: XLA CPU reduces a short last axis slowly
        size = pairwise_sum([size[:, i] for i in range(x.shape[1])])
    return jnp.max(size, initial=0.0)


def converged(c1: Array, c2: Array, bound: Array, F: Array, tol: float) -> Array:
    """SciPy's early stop ``c1 + c2 <= tol * ||F||``, with ``||F||`` computed only when the
    running bound ``bound >= ||F||`` (the sum of the terms' norms) lets the test pass: the
    same decision as computing it at every term, at a fraction of the passes over ``F``."""
    small = c1 + c2
    return lax.cond(
        small <= tol * bound, lambda: small <= tol * exact_inf_norm(F), lambda: jnp.bool_(False)
    )


def expm_multiply_simple_core(
    matvec: Product,
    B: Array,
    tau: Array,
    mu: Array,
    m: Array,
    s: Array,
    tol: float,
    size: Array | None,
) -> Array:
    """``exp(tau (A + mu I)) B`` for ``matvec(x) = A @ x``: ``s`` substeps of the degree-``m``
    Taylor series, each stopped once two consecutive terms are below ``tol`` of the sum
    (SciPy's ``_expm_multiply_simple_core``). ``B`` is ``(n,)`` or ``(n, c)``.

    ``size`` bounds the operator in the norm of the test (:func:`exact_inf_norm`); None
    where no bound is known (an operator that is not a DiaMatrix), and then every term's
    norm is exact, as SciPy's. With a bound, the terms' norms are exact every
    :data:`NORM_EVERY` terms and bounded in between: on XLA CPU the reduction over a
    complex vector costs most of a tridiagonal product, and SciPy's test rarely passes
    before the last few terms. With bounds (never below the exact norms) the test passes
    at SciPy's term or at most ``NORM_EVERY - 1`` terms later, never earlier: the same
    accuracy or better."""
    eta = jnp.exp(tau * mu / s)

    def substep(_, F):
        def more(state):
            j, *_, done = state
            return (j < m) & ~done

        def term(state):
            j, Bj, F, c1, bound, _ = state
            coefficient = (tau / (s * (j + 1))).astype(tau.dtype)
            Bj = coefficient * matvec(Bj)
            if size is None:
                c2 = exact_inf_norm(Bj)
            else:
                estimate = jnp.abs(coefficient) * size * c1
                c2 = lax.cond(
                    (j + 1) % NORM_EVERY == 0,
                    lambda: jnp.minimum(exact_inf_norm(Bj), estimate),
                    lambda: estimate,
                )
            F = F + Bj
            bound = bound + c2
            return j + 1, Bj, F, c2, bound, converged(c1, c2, bound, F, tol)

        norm = exact_inf_norm(F)
        state = (jnp.int32(0), F, F, norm, norm, jnp.bool_(False))
        return eta * lax.while_loop(more, term, state)[2]

    return lax.fori_loop(jnp.int32(0), s, substep, B)


def expm_multiply_interval_core(
    matvec: Product, X: Array, h: Array, mu: Array, m: Array, s: Array, q: int, tol: float
) -> Array:
    """Algorithm 5.2 for ``q > s`` (SciPy's ``_expm_multiply_interval_core_1`` and
    ``_2``): blocks of ``d = q // s`` points each take their values from the block's
    first point through one shared sequence of Taylor terms ``K_p = (d h A)^p Z / p!``,
    point ``k`` summing ``(k / d)^p K_p`` until its own early stop. ``X[0]`` holds the
    first point."""
    d = q // s
    blocks, rest = q // d, q - d * (q // d)
    index = jnp.arange(q + 1)

    def block(i, X):
        count = jnp.where(i < blocks, d, rest)
        base = i * d
        Z = X[base]
        X = lax.fori_loop(1, count + 1, lambda k, X: X.at[base + k].set(Z), X)
        c1 = jnp.full(q + 1, exact_inf_norm(Z))
        bound = c1
        done = (index == 0) | (index > count)

        def more(state):
            p, *_, done = state
            return (p < m) & ~jnp.all(done)

        def term(state):
            p, K, X, c1, bound, done = state
            p = p + 1
            K = (d * h / p).astype(h.dtype) * matvec(K)
            norm_K = exact_inf_norm(K)

            def point(k, carry):
                X, c1, bound, done = carry
                coeff = (k.astype(h.dtype) / d) ** p
                F = jnp.where(done[k], X[base + k], X[base + k] + coeff * K)
                c2 = coeff * norm_K
                total = bound[k] + c2
                stop = done[k] | converged(c1[k], c2, total, F, tol)
                carry = c1.at[k].set(c2), bound.at[k].set(total), done.at[k].set(stop)
                return X.at[base + k].set(F), *carry

            X, c1, bound, done = lax.fori_loop(1, count + 1, point, (X, c1, bound, done))
            return p, K, X, c1, bound, done

        state = (jnp.int32(0), Z, X, c1, bound, done)
        X = lax.while_loop(more, term, state)[2]
        return lax.fori_loop(
            1, count + 1, lambda k, X: X.at[base + k].multiply(jnp.exp(k * h * mu)), X
        )

    return lax.fori_loop(0, blocks + 1, block, X)


def evolve(
    matvec: Product,
    info: LazyOperatorNormInfo,
    mu: Array,
    size: Array | None,
    B: Array,
    start: Array,
    stop: Array,
    divisions: Array,
    *,
    grid: bool,
    num: int,
    tol: float,
) -> Array:
    """``exp(A) B``, or ``exp(t_k A) B`` on a grid of ``num`` times from ``start`` with
    step ``(stop - start) / divisions`` (``(num, *B.shape)``), for ``matvec`` the product
    of the shifted operator ``A - mu I``, ``info`` its norms and ``size`` a bound on it
    (:func:`expm_multiply_simple_core`); NaN when its 1-norm is not finite."""
    columns = B.shape[-1] if B.ndim == 2 else 1
    real = start.dtype
    if not grid:
        one = jnp.ones((), real)
        norms = info.powers(one)
        m, s = fragment_3_1(norms, one, columns)
        X = expm_multiply_simple_core(matvec, B, one, mu, m, s, tol, size)
    else:
        q = num - 1
        h = (stop - start) / divisions
        t = q * h
        first = jnp.maximum(jnp.abs(start), jnp.abs(t))  # see the module's docstring
        norms = info.powers(first)
        m0, s0 = fragment_3_1(norms, first, columns)
        m, s = fragment_3_1(norms, jnp.abs(t), columns)
        mh, sh = fragment_3_1(norms, jnp.abs(h), columns)  # for q <= s
        stepwise = q <= s

        def step(k, X):
            # X[0] from B, and for q <= s each X[k] from X[k - 1] with parameters of its
            # own: one Taylor loop in the program for both.
            initial = k == 0
            tau, mk, sk = (jnp.where(initial, a, b) for a, b in ((start, h), (m0, mh), (s0, sh)))
            Y = expm_multiply_simple_core(
                matvec, X[jnp.maximum(k - 1, 0)], tau, mu, mk, sk, tol, size
            )
            return X.at[k].set(Y)

        X = jnp.zeros((num, *B.shape), B.dtype).at[0].set(B)
        X = lax.fori_loop(0, jnp.where(stepwise, q + 1, 1), step, X)
        X = lax.cond(
            stepwise,
            lambda X: X,
            lambda X: expm_multiply_interval_core(matvec, X, h, mu, m, s, q, tol),
            X,
        )
    return jnp.where(jnp.isfinite(info.onenorm), X, jnp.nan)
