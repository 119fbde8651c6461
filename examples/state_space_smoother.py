"""Smoothing a linear-Gaussian state-space model as one banded solve: the posterior of all
the states at once, its log-likelihood from a log-determinant, checked against NumPy's
Kalman filter and Rauch-Tung-Striebel smoother.

Model (a constant-velocity target seen through noisy positions): ``x_{t+1} = F x_t + w_t``,
``w_t ~ N(0, Q)``, ``y_t = H x_t + v_t``, ``v_t ~ N(0, R)``, ``x_0 ~ N(m0, P0)``. The
posterior of ``x = (x_0, ..., x_{T-1})`` (states interleaved: ``x[t s + i]``) has the
block tridiagonal precision

    J[t, t] = H^T R^-1 H + (P0^-1 if t = 0 else Q^-1) + (F^T Q^-1 F if t < T - 1)
    J[t, t + 1] = -F^T Q^-1,   h[t] = H^T R^-1 y_t (+ P0^-1 m0 at t = 0)

a band of ``2 s - 1`` diagonals each side. One ``cho_factor(J)`` gives the smoothed means
``J^-1 h`` (what the RTS smoother's backward pass computes), its ``logdet`` the
log-likelihood

    log p(y) = 1/2 h^T J^-1 h - 1/2 c - 1/2 log det J - 1/2 (log det P0 + (T - 1) log det Q
               + T log det R) - T p/2 log(2 pi),    c = m0^T P0^-1 m0 + sum_t y_t^T R^-1 y_t

and ``selected_inverse(J)`` the smoothed covariances (the ``s x s`` diagonal blocks lie on
the band). No loop over time steps: on GPUs and TPUs the factor, the solve and the
selected inverse are O(log T) sequential steps (block cyclic reduction).

Run: ``python examples/state_space_smoother.py [--small]``.
"""

from __future__ import annotations

import argparse
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402

DT, PROCESS, NOISE = 0.1, 0.5, 0.4
F = np.array([[1.0, DT], [0.0, 1.0]])
Q = PROCESS * np.array([[DT**3 / 3, DT**2 / 2], [DT**2 / 2, DT]])
H = np.array([[1.0, 0.0]])
R = np.array([[NOISE**2]])
M0, P0 = np.zeros(2), 10.0 * np.eye(2)


def simulate(T: int, rng: np.random.Generator) -> np.ndarray:
    x = rng.multivariate_normal(M0, P0)
    noise = rng.multivariate_normal(np.zeros(2), Q, size=T)
    ys = np.empty((T, 1))
    for t in range(T):
        ys[t] = H @ x + NOISE * rng.standard_normal(1)
        x = F @ x + noise[t]
    return ys


def precision(T: int) -> jaxdia.DiaMatrix:
    """``J`` as a DiaMatrix (built block by block with SciPy)."""
    s = F.shape[0]
    Qi, Ri, P0i = np.linalg.inv(Q), np.linalg.inv(R), np.linalg.inv(P0)
    first = np.zeros((T, 1))
    first[0] = 1
    last = np.zeros((T, 1))
    last[-1] = 1
    diagonal = (
        sp.kron(sp.eye(T), H.T @ Ri @ H)
        + sp.kron(sp.diags(first[:, 0]), P0i)
        + sp.kron(sp.diags(1 - first[:, 0]), Qi)
        + sp.kron(sp.diags(1 - last[:, 0]), F.T @ Qi @ F)
    )
    coupling = sp.kron(sp.eye(T, k=1), -F.T @ Qi)
    J = sp.dia_array(diagonal + coupling + coupling.T)
    offsets = tuple(range(-(2 * s - 1), 2 * s))
    J = J.todia()
    data = np.zeros((len(offsets), T * s))
    for k, offset in enumerate(J.offsets):
        data[offsets.index(int(offset))] = J.data[k]
    return jaxdia.DiaMatrix(data, offsets, (T * s, T * s))


def information(ys: np.ndarray) -> np.ndarray:
    h = (ys @ np.linalg.inv(R) @ H).reshape(-1)  # H^T R^-1 y_t, interleaved
    h[:2] += np.linalg.inv(P0) @ M0
    return h


def loglik_constant(ys: np.ndarray) -> tuple[float, float]:
    """``(constant, c)``: the log-likelihood's terms that do not depend on ``J``'s factor
    (see the module docstring), and ``c``, the one the solve's term cancels."""
    T = ys.shape[0]
    Ri, P0i = np.linalg.inv(R), np.linalg.inv(P0)
    c = M0 @ P0i @ M0 + np.einsum("ti,ij,tj->", ys, Ri, ys)
    logdets = np.linalg.slogdet(P0)[1] + (T - 1) * np.linalg.slogdet(Q)[1]
    logdets += T * np.linalg.slogdet(R)[1]
    return -0.5 * c - 0.5 * logdets - T * H.shape[0] / 2 * np.log(2 * np.pi), c


def smooth(J: jaxdia.DiaMatrix, h, constant):
    """Smoothed means, variances and the log-likelihood, from one Cholesky factor."""
    factor = jaxdia.cho_factor(J)
    mean = factor.solve(h)
    variances = jaxdia.selected_inverse(J, assume_a="pos").diagonal()
    loglik = 0.5 * h @ mean - 0.5 * factor.logdet() + constant
    return mean, variances, loglik


def kalman_rts(ys: np.ndarray):
    """NumPy's Kalman filter (log-likelihood) and RTS smoother (means, variances)."""
    T = ys.shape[0]
    m, P = M0.copy(), P0.copy()
    means, covs, preds, pcovs = [], [], [], []
    loglik = 0.0
    for t in range(T):
        if t:
            m, P = F @ m, F @ P @ F.T + Q
        preds.append(m)
        pcovs.append(P)
        S = H @ P @ H.T + R
        r = ys[t] - H @ m
        loglik -= 0.5 * (r @ np.linalg.solve(S, r) + np.linalg.slogdet(2 * np.pi * S)[1])
        K = P @ H.T @ np.linalg.inv(S)
        m, P = m + K @ r, P - K @ S @ K.T
        means.append(m)
        covs.append(P)
    sm, sP = means[-1], covs[-1]
    smoothed, variances = [sm], [np.diag(sP)]
    for t in range(T - 2, -1, -1):
        G = covs[t] @ F.T @ np.linalg.inv(pcovs[t + 1])
        sm = means[t] + G @ (sm - preds[t + 1])
        sP = covs[t] + G @ (sP - pcovs[t + 1]) @ G.T
        smoothed.append(sm)
        variances.append(np.diag(sP))
    return np.array(smoothed[::-1]).reshape(-1), np.array(variances[::-1]).reshape(-1), loglik


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a short series (a quick check)")
    parser.add_argument("--steps", type=int, default=None, help="the number of time steps")
    args = parser.parse_args()
    T = args.steps or (500 if args.small else 20_000)
    ys = simulate(T, np.random.default_rng(0))
    J, h = precision(T), jnp.asarray(information(ys))
    constant, c = loglik_constant(ys)
    print(f"A constant-velocity model over T = {T} steps, smoothed as one banded solve")

    run = jax.jit(smooth)
    jax.block_until_ready(run(J, h, constant))
    start = time.perf_counter()
    mean, variances, loglik = jax.block_until_ready(run(J, h, constant))
    banded_time = time.perf_counter() - start
    start = time.perf_counter()
    expected_mean, expected_variances, expected_loglik = kalman_rts(ys)
    numpy_time = time.perf_counter() - start
    print(f"  jaxdia {banded_time * 1e3:.1f} ms, NumPy Kalman + RTS {numpy_time * 1e3:.1f} ms")
    ok = True
    error = np.max(np.abs(np.asarray(mean) - expected_mean) / (1 + np.abs(expected_mean)))
    ok &= check("smoothed means", bool(error < 1e-8), f"max relative error {error:.1e}")
    error = np.max(np.abs(np.asarray(variances) / expected_variances - 1))
    ok &= check("smoothed variances", bool(error < 1e-8), f"max relative error {error:.1e}")
    # Relative to the terms it is the difference of (1/2 h^T J^-1 h and c/2 cancel).
    error = abs(float(loglik) - expected_loglik) / (abs(c) + abs(expected_loglik))
    ok &= check(
        "log-likelihood",
        error < 1e-10,
        f"jaxdia {float(loglik):.6f}, Kalman filter {expected_loglik:.6f}, "
        f"error {error:.1e} relative to the cancelling terms",
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
