"""Multigrid on complex matrices: iterations of ``jaxdia.bicgstab`` preconditioned by
``jaxdia.multigrid`` (Jacobi smoothing, the complex default) against Jacobi and no
preconditioner, and the time to solution against SciPy's ``spsolve``.

Three 2-D problems on an ``N x N`` grid (5-point Laplacian ``L``, Dirichlet, C order):

- ``shifted``: the complex-shifted Laplacian ``L + (1 + 0.5i) 1e-3 I`` (Helmholtz-type
  preconditioning operators);
- ``crank-nicolson``: ``I + i dt/2 H`` with ``H = L / h^2 + V``, a harmonic potential,
  ``dt = 1e-3`` (the implicit Schrodinger step);
- ``real as complex``: ``L`` stored as complex128 (a real operator in a complex code).

Every solve goes from ``x = 0`` to ``|b - A x| / |b| <= 1e-8`` and is checked against
``spsolve`` first; times are medians of interleaved rounds, the preconditioner's setup
inside the compiled call. Produced with::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_complex_multigrid.py \\
        [--N 256] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

RTOL = 1e-8
MAXITER = 3000


def problems(N: int) -> dict[str, sp.dia_array]:
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    L = sp.kronsum(T, T).astype(np.complex128)
    h = 1.0 / (N + 1)
    x = np.arange(1, N + 1) * h - 0.5
    V = (1e4 * (x[:, None] ** 2 + x[None, :] ** 2)).ravel()
    H = L / h**2 + sp.diags_array(V)
    dt = 1e-3
    return {
        "shifted": (L + (1 + 0.5j) * 1e-3 * sp.eye_array(N * N)).todia(),
        "crank-nicolson": (sp.eye_array(N * N) + 0.5j * dt * H).todia(),
        "real as complex": L.todia(),
    }


def solvers(N: int):
    grid = (N, N)

    def none(A, b):
        return jaxdia.bicgstab(A, b, rtol=RTOL, maxiter=MAXITER)

    def jacobi(A, b):
        return jaxdia.bicgstab(A, b, M=jaxdia.jacobi(A), rtol=RTOL, maxiter=MAXITER)

    def multigrid(A, b):
        return jaxdia.bicgstab(A, b, M=jaxdia.multigrid(A, grid), rtol=RTOL, maxiter=MAXITER)

    return {"none": jax.jit(none), "Jacobi": jax.jit(jacobi), "multigrid": jax.jit(multigrid)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    print(
        f"N = {args.N} (n = {args.N**2}), complex128, rtol = {RTOL}, at most {MAXITER} "
        f"BiCGStab iterations; medians of {args.rounds} interleaved rounds; jax {jax.__version__}"
    )
    print(
        "\n| problem | preconditioner | iterations | time | vs spsolve |\n|---|---|---:|---:|---:|"
    )
    for name, S in problems(args.N).items():
        b = rng.standard_normal(S.shape[0]) + 1j * rng.standard_normal(S.shape[0])
        A, rhs = jaxdia.DiaMatrix.from_scipy(S), jnp.asarray(b)
        expected = spla.spsolve(S.tocsc(), b)
        runs = {"spsolve": lambda: spla.spsolve(S.tocsc(), b)}
        iterations = {}
        for label, solve in solvers(args.N).items():
            x, info = jax.block_until_ready(solve(A, rhs))
            iterations[label] = int(info.iterations) if bool(info.converged) else None
            if iterations[label] is not None:
                error = np.linalg.norm(np.asarray(x) - expected) / np.linalg.norm(expected)
                assert error < 1e-5, (name, label, error)
                runs[label] = lambda solve=solve: jax.block_until_ready(solve(A, rhs))
        times: dict[str, list[float]] = {label: [] for label in runs}
        for _ in range(args.rounds):
            for label in rng.permutation(list(runs)):
                start = time.perf_counter()
                runs[label]()
                times[label].append(time.perf_counter() - start)
        median = {label: statistics.median(values) for label, values in times.items()}
        print(f"| {name} | spsolve | - | {median['spsolve']:.3f} s | 1 |")
        for label in solvers(args.N):
            if iterations[label] is None:
                print(f"| {name} | {label} | fails | - | - |")
            else:
                time_, ratio = median[label], median[label] / median["spsolve"]
                print(f"| {name} | {label} | {iterations[label]} | {time_:.3f} s | {ratio:.2f} |")


if __name__ == "__main__":
    main()
