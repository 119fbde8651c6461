"""Fitting a Gaussian Markov random field: a second-order random walk (RW2) smoother
whose two precision hyperparameters maximise the log marginal likelihood.

Model: ``x ~ RW2(tau_x)`` (prior precision ``tau_x R``, ``R = D^T D`` with ``D`` the
second differences: pentadiagonal, of rank ``n - 2``), and observations ``y = x + e``,
``e ~ N(0, I / tau_y)``. The posterior precision ``Q = tau_x R + tau_y I`` is banded and
the log marginal likelihood is

    log p(y) = (n - 2)/2 log tau_x + n/2 log tau_y - 1/2 log det Q
               - tau_y/2 |y|^2 + 1/2 b^T mu + const,   b = tau_y y,  mu = Q^-1 b

so it takes one banded Cholesky factor: ``cho_factor(Q)``'s ``logdet`` and ``solve``.
``jax.grad`` differentiates both through the hyperparameters: the solve implicitly, the
log-determinant by ``jaxdia.selected_inverse`` (``Q^-1`` on the band, O(n)). A plain
gradient ascent over ``(log tau_x, log tau_y)`` fits them; the posterior mean is ``mu``
and the posterior variances are the diagonal of ``Q^-1``, from ``selected_inverse``.

Checks: the log likelihood and its gradient against NumPy (dense) on a small problem and
SciPy (``splu``'s log-determinant) on the full one, the fitted gradient near zero, the
posterior variances against the dense inverse (small) and a Hutchinson-free exact check
on a few entries by solves (full size).

Run: ``python examples/gmrf_fit.py [--small]``.
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
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

OFFSETS = (-2, -1, 0, 1, 2)


def rw2_structure(n: int) -> np.ndarray:
    """DIA ``data`` of ``R = D^T D`` for the second differences ``D`` ``(n - 2, n)``."""
    D = sp.diags([1.0, -2.0, 1.0], [0, 1, 2], shape=(n - 2, n))
    R = sp.dia_array(D.T @ D)
    data = np.zeros((5, n))
    for k, offset in enumerate(OFFSETS):
        data[k] = R.todia().data[list(R.todia().offsets).index(offset)]
    return data


def precision(log_tau, structure):
    """``Q = tau_x R + tau_y I`` as a DiaMatrix."""
    tau_x, tau_y = jnp.exp(log_tau[0]), jnp.exp(log_tau[1])
    data = tau_x * structure + tau_y * jnp.eye(5, 1, -2)  # tau_y on the main diagonal
    n = structure.shape[-1]
    return jaxdia.DiaMatrix(data, OFFSETS, (n, n))


def log_marginal(log_tau, structure, y):
    """The log marginal likelihood (up to a constant) and the posterior mean."""
    n = y.shape[0]
    tau_y = jnp.exp(log_tau[1])
    factor = jaxdia.cho_factor(precision(log_tau, structure))
    b = tau_y * y
    mean = factor.solve(b)
    value = (n - 2) / 2 * log_tau[0] + n / 2 * log_tau[1] - factor.logdet() / 2
    value = value - tau_y / 2 * y @ y + b @ mean / 2
    return value, mean


def dense_log_marginal(log_tau, structure, y):
    """The same with NumPy's dense linear algebra (the small problem's oracle)."""
    n = y.shape[0]
    Q = np.asarray(precision(jnp.asarray(log_tau), structure).todense())
    tau_y = np.exp(log_tau[1])
    b = tau_y * y
    mean = np.linalg.solve(Q, b)
    logdet = np.linalg.slogdet(Q)[1]
    return (
        (n - 2) / 2 * log_tau[0]
        + n / 2 * log_tau[1]
        - logdet / 2
        - tau_y / 2 * y @ y
        + b @ mean / 2
    )


def sparse_log_marginal(log_tau, structure, y):
    """The same with SciPy's sparse LU (``splu``: log det from ``U``'s diagonal)."""
    n = y.shape[0]
    data = np.asarray(precision(jnp.asarray(log_tau), structure).data)
    Q = sp.dia_array((data, OFFSETS), shape=(n, n)).tocsc()
    lu = spla.splu(Q)
    tau_y = np.exp(log_tau[1])
    b = tau_y * y
    mean = lu.solve(b)
    logdet = np.sum(np.log(np.abs(lu.U.diagonal())))
    return (
        (n - 2) / 2 * log_tau[0]
        + n / 2 * log_tau[1]
        - logdet / 2
        - tau_y / 2 * y @ y
        + b @ mean / 2
    )


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a small problem (a quick check)")
    args = parser.parse_args()
    n = 200 if args.small else 100_000
    rng = np.random.default_rng(0)
    t = np.linspace(0, 1, n)
    truth = np.sin(6 * np.pi * t) + 2 * t**2
    y = truth + 0.3 * rng.standard_normal(n)
    structure = jnp.asarray(rw2_structure(n))
    y_jax = jnp.asarray(y)

    objective = jax.jit(lambda p: -log_marginal(p, structure, y_jax)[0] / n)
    gradient = jax.jit(jax.grad(objective))
    log_tau = jnp.array([np.log(1e3 if args.small else 1e8), 0.0])
    ok = True
    print(f"RW2 smoothing of n = {n} noisy points; fitting (log tau_x, log tau_y)")

    # The objective and its gradient against the oracles, at the starting point.
    value = float(objective(log_tau))
    oracle = dense_log_marginal if args.small else sparse_log_marginal
    expected = -oracle(np.asarray(log_tau), structure, y) / n
    ok &= check(
        "log likelihood",
        abs(value - expected) < 1e-9 * max(1, abs(expected)),
        f"jaxdia {value:.12f}, {oracle.__name__} {expected:.12f}",
    )
    step = 1e-5
    numeric = [
        (
            -oracle(np.asarray(log_tau) + step * e, structure, y) / n
            + oracle(np.asarray(log_tau) - step * e, structure, y) / n
        )
        / (2 * step)
        for e in np.eye(2)
    ]
    grad = np.asarray(gradient(log_tau))
    ok &= check(
        "gradient",
        np.allclose(grad, numeric, rtol=1e-5, atol=1e-7),
        f"jax.grad {grad}, central differences {np.asarray(numeric)}",
    )

    # A plain gradient descent with a backtracking step.
    start = time.perf_counter()
    rate = 1.0
    value = objective(log_tau)
    for _ in range(200):
        g = gradient(log_tau)
        while True:
            trial = log_tau - rate * g
            trial_value = objective(trial)
            if trial_value <= value - 0.5 * rate * g @ g or rate < 1e-8:
                break
            rate /= 2
        log_tau, value = trial, trial_value
        rate *= 2
        if float(jnp.linalg.norm(g)) < 1e-8:
            break
    elapsed = time.perf_counter() - start
    g = np.asarray(gradient(log_tau))
    tau = np.exp(np.asarray(log_tau))
    print(f"  fitted tau_x = {tau[0]:.4g}, tau_y = {tau[1]:.4g} (noise sd 0.3: tau_y ~ 11.1)")
    print(f"  {elapsed:.2f} s for the fit (value + gradient per step)")
    ok &= check("stationary", np.linalg.norm(g) < 1e-6, f"|gradient| = {np.linalg.norm(g):.2e}")
    ok &= check("noise precision", 5 < tau[1] < 25, f"tau_y = {tau[1]:.3g}")

    # The posterior: mean from the factor's solve, variances from the selected inverse.
    _, mean = log_marginal(log_tau, structure, y_jax)
    Q = precision(log_tau, structure)
    variances = jaxdia.selected_inverse(Q, assume_a="pos").diagonal()
    error = float(np.sqrt(np.mean((np.asarray(mean) - truth) ** 2)))
    ok &= check("posterior mean", error < 0.1, f"RMS error against the truth {error:.3g}")
    if args.small:
        dense = np.linalg.inv(np.asarray(Q.todense()))
        expected_variances = np.diag(dense)
    else:  # a few entries by solves with SciPy's sparse LU
        lu = spla.splu(sp.dia_array((np.asarray(Q.data), OFFSETS), shape=(n, n)).tocsc())
        picks = np.array([0, 1, n // 2, n - 1])
        variances = np.asarray(variances)[picks]
        expected_variances = np.array([lu.solve(np.eye(1, n, i)[0])[i] for i in picks])
    error = np.max(np.abs(variances / expected_variances - 1))
    close = np.allclose(variances, expected_variances, rtol=1e-9)
    ok &= check("posterior variances", close, f"max relative error {error:.1e}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
