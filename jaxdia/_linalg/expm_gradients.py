"""The evolution of a DiaMatrix, ``exp(t A) B``, as a ``jax.custom_vjp`` (:func:`evolve`):
reverse-mode differentiation cannot go through the Taylor loops, whose trip counts are
traced, so the cotangents are computed by rules of their own:

* w.r.t. ``B``: ``exp(t A)^T G`` (JAX's cotangents are transposes, not adjoints);
* w.r.t. ``A``'s data (the stored diagonals only): ``t * integral_0^1 u(r) v(r)^T dr``
  on the stored slots (an ``sddmm``), with ``v(r) = exp(r t A) B`` and
  ``u(r) = exp((1 - r) t A^T) G``. The integral is Gauss-Legendre quadrature
  (:data:`GAUSS_NODES` nodes) on panels with ``||t A|| / panels <= theta_30``, where it
  is exact to rounding; ``v`` is marched forward and checkpointed at panel starts (two
  levels of at most :data:`CHECKPOINTS` each, so at most ``CHECKPOINTS**2`` panels per
  step; beyond that the cotangent is NaN, never silently wrong), ``u`` is marched
  backward, and the values at the nodes come from each panel's Taylor terms;
* w.r.t. the times ``start``/``stop``: ``d X_k / d t_k = A X_k``.

Forward mode (``jvp``, ``jacfwd``) is not available, as for every ``custom_vjp``.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from .._kernels.primitives import sddmm
from .._ops import shifted
from .._parts import DiaParts
from .._products import matvec as dia_matvec
from .expm_norms import THETA, dia_norm_info, inf_norm, one_norm, operator_size
from .expm_taylor import (
    converged,
    evolve as evolve_products,
    exact_inf_norm,
    expm_multiply_simple_core,
    unit_roundoff,
)

#: Gauss-Legendre nodes per panel of the data cotangent's quadrature: with panels of
#: ``||t A||_1 <= theta_30``, 12 nodes integrate the products ``u v^T`` (frequencies up
#: to ``2 theta_30``) to double's rounding.
GAUSS_NODES = 12
_PANEL_DEGREE = 30
#: Checkpoints per level of the data cotangent's forward march.
CHECKPOINTS = 64


class Config(NamedTuple):
    """The static part of one evolution: the matrix's structure and the time grid's size
    (its times, and the step's divisor, are arguments: no program per grid)."""

    offsets: tuple[int, ...]
    n: int
    grid: bool  # a grid of times (else the single time 1)
    num: int  # number of time points (1 without a grid)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)


def _matvecs(A: DiaParts):
    """``x -> A @ x`` and ``x -> A^T @ x`` for ``x`` of shape ``(n,)`` or ``(n, c)``."""
    return dia_matvec(A), dia_matvec(A, transpose=True)


def _forward(config: Config, data, B, trace, start, stop, divisions):
    """``exp(t A) B`` at the time(s) of ``config`` (NaN when ``A`` holds inf or NaN); on a
    grid the step is ``(stop - start) / divisions``."""
    A = DiaParts(data, config.offsets, config.shape)
    mu = (trace / config.n).astype(data.dtype)
    tol = unit_roundoff(data.dtype)
    columns = B.shape[-1] if B.ndim == 2 else 1
    shifted_A = shifted(A, mu)
    info = dia_norm_info(shifted_A, columns)
    size = operator_size(shifted_A)
    matvec, _ = _matvecs(shifted_A)
    return evolve_products(
        matvec, info, mu, size, B, start, stop, divisions, grid=config.grid, num=config.num, tol=tol
    )


def _panel(matvec, matvec_t, v0, u1, delta, nodes, weights, tol):
    """One panel of the data cotangent's quadrature: ``v(c) = exp(c delta A) v0`` and
    ``u(c) = exp((1 - c) delta A^T) u1`` at the Gauss nodes ``c``, from one Taylor series
    each. Returns ``u(0)``, the ``v(c_i)`` and the ``weights_i u(c_i)``, stacked over
    the nodes: their ``sddmm`` is the panel's integral (over ``c``) of ``u v^T``."""

    def series(x, apply, powers_of):
        total = x

        def more(state):
            p, *_, done = state
            return (p < _PANEL_DEGREE) & ~done

        def term(state):
            p, K, values, total, c1, bound, _ = state
            p = p + 1
            K = (delta / p).astype(delta.dtype) * apply(K)
            values = values + _along(powers_of**p, K) * K
            total = total + K
            c2 = exact_inf_norm(K)
            bound = bound + c2
            return p, K, values, total, c2, bound, converged(c1, c2, bound, total, tol)

        values = jnp.broadcast_to(x, (len(nodes), *x.shape))
        norm = exact_inf_norm(x)
        state = (jnp.int32(0), x, values, total, norm, norm, jnp.bool_(False))
        _, _, values, total, *_ = lax.while_loop(more, term, state)
        return values, total

    v_nodes, _ = series(v0, matvec, nodes)
    u_nodes, u0 = series(u1, matvec_t, 1 - nodes)
    return u0, v_nodes, u_nodes * _along(weights, u1)


def _along(w: Array, x: Array) -> Array:
    """Weights ``w`` (one per node) shaped to scale a stack of arrays like ``x``."""
    return w.reshape(-1, *[1] * x.ndim).astype(x.dtype)


def _columns(x: Array) -> Array:
    """``(N, n[, c])`` node values as the ``(n, N * c)`` columns of one ``sddmm``."""
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], -1)


def _step_cotangent(config: Config, shifted_A: DiaParts, mu, norm, size, tau, x, ybar):
    """Cotangents of ``y = exp(tau A) x`` given ``ybar``: ``(xbar, data cotangent)``, for
    ``shifted_A = A - mu I``, ``norm >= ||shifted_A||_1, ||shifted_A||_inf`` and ``size``
    its :func:`operator_size` (both computed once, outside the loop over time steps)."""
    tol = unit_roundoff(shifted_A.dtype)
    matvec, matvec_t = _matvecs(shifted_A)
    nodes, weights = np.polynomial.legendre.leggauss(GAUSS_NODES)
    real = tau.dtype
    nodes, weights = jnp.asarray((nodes + 1) / 2, real), jnp.asarray(weights / 2, real)
    limit = CHECKPOINTS**2
    wanted = jnp.ceil(jnp.abs(tau) * norm / THETA[_PANEL_DEGREE])
    fail = ~(wanted <= limit)  # also NaN
    panels = jnp.where(fail, 1, jnp.maximum(wanted, 1)).astype(np.int32)
    delta = tau / panels
    length = (panels + CHECKPOINTS - 1) // CHECKPOINTS  # panels per segment
    segments = (panels + length - 1) // length
    zero, one = jnp.zeros((), real), jnp.int32(1)

    def advance(v):
        return expm_multiply_simple_core(
            matvec, v, delta, zero, jnp.int32(_PANEL_DEGREE), one, tol, size
        )

    def store(segment, state):  # level 1: the first panel start of every segment
        v, saved = state
        saved = saved.at[segment].set(v)
        steps = jnp.where(segment < segments - 1, length, 0)
        return lax.fori_loop(0, steps, lambda _, v: advance(v), v), saved

    saved = jnp.zeros((CHECKPOINTS, *x.shape), x.dtype)
    _, saved = lax.fori_loop(0, segments, store, (x, saved))

    def segment_back(i, state):
        u, cotangent, starts = state
        segment = segments - 1 - i
        count = jnp.minimum(length, panels - segment * length)

        def fill(l, state):  # level 2: every panel start of this segment
            v, starts = state
            return advance(v), starts.at[l].set(v)

        v, starts = lax.fori_loop(0, count - 1, fill, (saved[segment], starts))
        starts = starts.at[count - 1].set(v)

        def panel_back(l, state):
            u, cotangent = state
            u, v_nodes, u_nodes = _panel(
                matvec, matvec_t, starts[count - 1 - l], u, delta, nodes, weights, tol
            )
            term = sddmm(
                _columns(u_nodes), _columns(v_nodes), offsets=config.offsets, shape=config.shape
            )
            return u, cotangent + term

        u, cotangent = lax.fori_loop(0, count, panel_back, (u, cotangent))
        return u, cotangent, starts

    cotangent = jnp.zeros((len(config.offsets), config.n), x.dtype)
    starts = jnp.zeros((CHECKPOINTS, *x.shape), x.dtype)
    u, cotangent, _ = lax.fori_loop(0, segments, segment_back, (ybar, cotangent, starts))
    scale = jnp.exp(tau * mu)
    xbar = jnp.where(fail, jnp.nan, scale * u)
    cotangent = jnp.where(fail, jnp.nan, (delta * scale) * cotangent)
    return xbar, cotangent


@partial(jax.custom_vjp, nondiff_argnums=(0,))
def evolve(config: Config, data, B, trace, start, stop, divisions):
    """``exp(t A) B`` at the time(s) of ``config``: ``(n, c)`` or ``(num, n, c)``."""
    return _forward(config, data, B, trace, start, stop, divisions)


def _evolve_fwd(config, data, B, trace, start, stop, divisions):
    X = _forward(config, data, B, trace, start, stop, divisions)
    return X, (data, B, trace, start, stop, divisions, X)


def _evolve_bwd(config, residuals, G):
    data, B, trace, start, stop, divisions, X = residuals
    A = DiaParts(data, config.offsets, config.shape)
    mu = (trace / config.n).astype(data.dtype)
    shifted_A = shifted(A, mu)
    norm = jnp.maximum(one_norm(shifted_A), inf_norm(shifted_A))
    size = operator_size(shifted_A)
    step = partial(_step_cotangent, config, shifted_A, mu, norm, size)
    if not config.grid:
        Bbar, data_bar = step(jnp.ones((), start.dtype), B, G)
        zero = jnp.zeros((), start.dtype)
        return data_bar, Bbar, jnp.zeros_like(trace), zero, zero, jnp.zeros_like(divisions)
    q = config.num - 1
    h = (stop - start) / divisions

    def back(i, state):
        adjoint, data_bar = state
        k = q - 1 - i
        previous, term = step(h, X[k], adjoint)
        return G[k] + previous, data_bar + term

    adjoint, data_bar = lax.fori_loop(0, q, back, (G[q], jnp.zeros_like(data)))
    Bbar, term = step(start, B, adjoint)
    # d X_k / d t_k = A X_k, with t_k = start + k (stop - start) / divisions.
    matvec, _ = _matvecs(A)
    AX = jax.vmap(matvec)(X)
    rates = jnp.real(jnp.sum(G * AX, axis=tuple(range(1, X.ndim))))
    fraction = jnp.arange(config.num, dtype=start.dtype) / divisions
    return (
        data_bar + term,
        Bbar,
        jnp.zeros_like(trace),
        jnp.sum((1 - fraction) * rates).astype(start.dtype),
        jnp.sum(fraction * rates).astype(start.dtype),
        jnp.zeros_like(divisions),
    )


evolve.defvjp(_evolve_fwd, _evolve_bwd)
