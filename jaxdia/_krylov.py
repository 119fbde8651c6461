"""Krylov iterations that count: preconditioned conjugate gradients and BiCGStab.

The loops follow ``jax.scipy.sparse.linalg.cg`` and ``bicgstab`` (the same recurrences,
stopping test and breakdown rules), with three differences: they return the number of
iterations; they solve a batch of independent systems at once (leading dims of ``b``:
each system has its own step sizes, stops on its own and keeps its solution while the
others go on); and a breakdown stops the system instead of returning NaN.

``matvec`` and ``M`` map arrays of ``b``'s shape ``(*batch, n)`` to the same shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax.numpy as jnp
from jax import Array, lax

Operator = Callable[[Array], Array]


def _dot(a: Array, b: Array) -> Array:
    """``vdot`` over the last axis (conjugating ``a``), one per system."""
    return jnp.sum(a.conj() * b, axis=-1)


def _squared_norm(a: Array) -> Array:
    return jnp.sum((a.conj() * a).real, axis=-1)


def _where(active: Array, new: Array, old: Array) -> Array:
    """Per system: ``new`` where the system is active, else ``old``."""
    if new.ndim > active.ndim:
        active = active[..., None]
    return jnp.where(active, new, old)


def _divide(a: Array, b: Array, ok: Array) -> Array:
    """``a / b`` where ``ok``, else 0 (no NaN from a stopped or broken-down system)."""
    return jnp.where(ok, a / jnp.where(ok, b, 1), 0)


def cg(matvec: Operator, b: Array, x0: Array | None, M: Operator, threshold: Array, maxiter: Any):
    """Preconditioned CG from ``x0`` (None: zeros, which saves a product) until
    ``|b - A x| <= threshold`` (per system, on the recursively updated residual) or
    ``maxiter`` iterations. Returns ``(x, iterations)``.

    The loop body applies ``M`` once (the first direction is made in the loop, from
    ``p = 0``), so a large preconditioner such as a V-cycle is compiled once.
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = jnp.zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    k = jnp.zeros(r.shape[:-1], jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    gamma = jnp.ones(r.shape[:-1], r.dtype)

    def cond(state):
        return jnp.any(state[-1])

    def body(state):
        x, r, p, gamma_before, k, active = state
        z = M(r)
        gamma = _dot(r, z)
        ok = active & (gamma != 0)
        beta = _divide(gamma, gamma_before, ok)  # p is 0 on the first iteration
        p = _where(ok, z + beta[..., None] * p, p)
        q = matvec(p)
        pq = _dot(p, q)
        ok = ok & (pq != 0)
        alpha = _divide(gamma, pq, ok)
        x = x + alpha[..., None] * p
        r = r - alpha[..., None] * q
        k = k + ok
        active = ok & (_squared_norm(r) > threshold2) & (k < maxiter)
        return x, r, p, _where(ok, gamma, gamma_before), k, active

    x, *_, k, _ = lax.while_loop(cond, body, (x0, r, jnp.zeros_like(r), gamma, k, active))
    return x, k


def bicgstab(
    matvec: Operator, b: Array, x0: Array | None, M: Operator, threshold: Array, maxiter: Any
):
    """Preconditioned BiCGStab (van der Vorst's, as in ``jax.scipy.sparse.linalg``) from
    ``x0``; stopping as :func:`cg`. Returns ``(x, iterations)``.

    Each iteration applies ``M`` and ``A`` twice, to ``p`` and then to ``s``. The loop
    runs half iterations instead, alternating the two (all systems in step): its body
    applies ``M`` once, so a large preconditioner is compiled once.
    """
    r = b if x0 is None else b - matvec(x0)
    x0 = jnp.zeros_like(b) if x0 is None else x0
    threshold2 = threshold**2
    shape = r.shape[:-1]
    one = jnp.ones(shape, r.dtype)
    k = jnp.zeros(shape, jnp.int32)
    active = (_squared_norm(r) > threshold2) & (k < maxiter)
    zeros = jnp.zeros_like(r)
    # x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, second half
    state = (x0, r, r, one, one, one, one, zeros, zeros, zeros, zeros, active, k, active, False)

    def cond(state):
        return jnp.any(state[-2])

    def first_direction(state):
        x, r, rhat, alpha, omega, rho, _, p, v, s, phat, _, k, active, _ = state
        rho_next = _dot(rhat, r)
        ok = active & (rho_next != 0) & (omega != 0)
        beta = _divide(rho_next, rho, ok) * _divide(alpha, omega, ok)
        p = _where(ok, r + beta[..., None] * (p - omega[..., None] * v), p)
        return p, rho_next, ok, p

    def second_direction(state):
        p, rho_next, ok, s = state[7], state[6], state[11], state[9]
        return p, rho_next, ok, s

    def first_half(state, p, rho_next, ok, phat, v_next):
        x, r, rhat, alpha, omega, rho, _, _, v, s, _, _, k, active, _ = state
        v = _where(ok, v_next, v)
        rv = _dot(rhat, v)
        ok = ok & (rv != 0)
        alpha = _where(ok, _divide(rho_next, rv, ok), alpha)
        s = r - alpha[..., None] * v
        # Stop half way when s is small enough already (as JAX and SciPy do).
        half = ok & (_squared_norm(s) <= threshold2)
        x = _where(half, x + alpha[..., None] * phat, x)
        r = _where(half, s, r)
        k = k + half
        active = ok & ~half
        return (x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, True)

    def second_half(state, shat, t):
        x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, _ = state
        tt = _dot(t, t)
        full = ok & (tt != 0)
        omega = _where(full, _divide(_dot(t, s), tt, full), omega)
        step = alpha[..., None] * phat + _where(full, omega[..., None] * shat, 0 * shat)
        x = _where(ok, x + step, x)
        r = _where(full, s - omega[..., None] * t, r)
        k = k + ok
        active = full & (_squared_norm(r) > threshold2) & (k < maxiter) & (omega != 0)
        rho = _where(ok, rho_next, rho)
        return (x, r, rhat, alpha, omega, rho, rho_next, p, v, s, phat, ok, k, active, False)

    def body(state):
        second = state[-1]
        p, rho_next, ok, u = lax.cond(second, second_direction, first_direction, state)
        w = M(u)
        y = matvec(w)
        return lax.cond(
            second,
            lambda state: second_half(state, w, y),
            lambda state: first_half(state, p, rho_next, ok, w, y),
            state,
        )

    state = lax.while_loop(cond, body, state)
    return state[0], state[-3]


def threshold(b: Array, rtol: Any, atol: Any) -> Array:
    """``max(rtol * |b|, atol)`` per system, SciPy's and JAX's stopping rule."""
    return jnp.maximum(rtol * jnp.sqrt(_squared_norm(b)), atol)


def residual_norm(matvec: Operator, b: Array, x: Array) -> Array:
    return jnp.sqrt(_squared_norm(b - matvec(x)))
