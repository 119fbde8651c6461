"""``jaxdia.expm_multiply`` of a SciPy ``LinearOperator`` whose products run in NumPy (on
the host, through ``jax.pure_callback``) against SciPy's ``expm_multiply`` of the same
operator: the products each asks of the operator (columns through ``matvec``/``matmat``
and through ``rmatvec``/``rmatmat``: deterministic for jaxdia; SciPy's norm estimator
draws random columns, so its counts are medians), the time per call (medians, after a
first call that compiles), and the largest relative difference of the results.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_expm_operators.py
"""

from __future__ import annotations

import statistics
import time
import warnings

import jax
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

jax.config.update("jax_enable_x64", True)
ROUNDS = 5


class Counted:
    """A LinearOperator of ``M`` in NumPy that counts the columns it is applied to."""

    def __init__(self, M):
        self.M, self.forward, self.adjoint = M, 0, 0
        self.operator = spla.LinearOperator(
            M.shape,
            matvec=self._matvec,
            matmat=self._matmat,
            rmatvec=self._rmatvec,
            rmatmat=self._rmatmat,
            dtype=M.dtype,
        )

    def _matvec(self, v):
        self.forward += 1
        return self.M @ v

    def _matmat(self, X):
        self.forward += X.shape[1]
        return self.M @ X

    def _rmatvec(self, v):
        self.adjoint += 1
        return self.M.conj().T @ v

    def _rmatmat(self, X):
        self.adjoint += X.shape[1]
        return self.M.conj().T @ X


def problems():
    rng = np.random.default_rng(0)
    dense = rng.standard_normal((200, 200))
    dense *= 3 / np.abs(dense).sum(axis=0).max()
    n = 2000
    x = (np.arange(n) - n / 2) * 0.1
    off = np.full(n - 1, -0.5 / 0.01)
    H = sp.diags_array([off, 1 / 0.01 + np.cos(x), off], offsets=[-1, 0, 1]).tocsr()
    psi = np.exp(-((x / 5) ** 2) + 2j * x)
    return {
        "dense 200, ||A||_1 = 3, B (200, 2)": (dense, rng.standard_normal((200, 2)), {}),
        "Schrodinger -0.3j H, n = 2000": ((-0.3j) * H, psi / np.linalg.norm(psi), {}),
        "dense 200, a grid of 11 times": (
            dense,
            rng.standard_normal(200),
            {"start": 0.0, "stop": 2.0, "num": 11},
        ),
    }


def measure(call, counted):
    counts, times = [], []
    result = None
    for _ in range(ROUNDS + 1):
        counted.forward = counted.adjoint = 0
        start = time.perf_counter()
        result = np.asarray(call())
        times.append(time.perf_counter() - start)
        counts.append((counted.forward, counted.adjoint))
    forward = statistics.median(c[0] for c in counts[1:])
    adjoint = statistics.median(c[1] for c in counts[1:])
    return result, forward, adjoint, statistics.median(times[1:])


def main():
    print(
        "| problem | SciPy products (A, A^H) | jaxdia products | SciPy ms | jaxdia ms | ratio "
        "| difference |"
    )
    print("|---|---|---|---|---|---|---|")
    for name, (M, B, grid) in problems().items():
        counted = Counted(M)
        trace = complex(M.diagonal().sum()) if np.iscomplexobj(M) else float(M.diagonal().sum())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours = jax.jit(
                lambda B: jaxdia.expm_multiply(counted.operator, B, traceA=trace, **grid)
            )
            X, forward, adjoint, seconds = measure(lambda: ours(B), counted)
            Y, s_forward, s_adjoint, s_seconds = measure(
                lambda: spla.expm_multiply(counted.operator, B, traceA=trace, **grid), counted
            )
        difference = np.abs(X - Y).max() / np.abs(Y).max()
        print(
            f"| {name} | {s_forward:.0f}, {s_adjoint:.0f} | {forward:.0f}, {adjoint:.0f} | "
            f"{1e3 * s_seconds:.1f} | {1e3 * seconds:.1f} | {seconds / s_seconds:.2f} | "
            f"{difference:.1e} |"
        )


if __name__ == "__main__":
    main()
