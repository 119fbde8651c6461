"""Periodic (cyclic) banded solves: a band plus corner diagonals, against SciPy's sparse LU.

A Newton step of a periodic 1-D problem solves with a Jacobian whose diagonals sit at
``-h..h`` and, wrapping around, at ``±(n - h)..±(n - 1)``. jaxdia factors the band and
corrects for the corners with the Sherman-Morrison-Woodbury identity (rank ``2 h``);
SciPy's ``spsolve`` (SuperLU) is what a user would pick instead. Per size and band:

* one-shot: ``jaxdia.solve_banded(A, b)`` (jitted, factor and solve) against
  ``scipy.sparse.linalg.spsolve(A_csc, b)`` (the CSC conversion not timed);
* factor once, solve many: ``lu_factor(A).solve(b)`` against ``splu(A_csc).solve(b)``,
  the solve alone (the factor is built before timing).

Competitors run in interleaved rounds; medians and ratios come from the same run. Each
solution is checked against SciPy's first.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_periodic.py \\
        [--sizes 1000 10000 100000] [--halves 1 2 5] [--rounds 15]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402


def periodic_jacobian(n: int, half: int, seed: int = 0) -> sp.dia_array:
    """A diagonally dominant Jacobian of a periodic stencil of half-width ``half``."""
    rng = np.random.default_rng(seed)
    rows = np.arange(n)
    entries, rows_all, cols_all = [], [], []
    for offset in range(-half, half + 1):
        values = rng.uniform(-1.0, 1.0, n) + (2.0 * half + 2.0) * (offset == 0)
        entries.append(values)
        rows_all.append(rows)
        cols_all.append((rows + offset) % n)
    coo = sp.coo_array(
        (np.concatenate(entries), (np.concatenate(rows_all), np.concatenate(cols_all))),
        shape=(n, n),
    )
    return coo.todia()


def median_ms(samples: list[float]) -> float:
    return 1e3 * statistics.median(samples)


def run(n: int, half: int, rounds: int) -> dict:
    S = periodic_jacobian(n, half)
    csc = S.tocsc()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(1).standard_normal(n)
    reference = spla.spsolve(csc, b)

    once = jax.jit(jaxdia.solve_banded)
    lu = jaxdia.lu_factor(A)
    solve = jax.jit(lambda factor, rhs: factor.solve(rhs))
    superlu = spla.splu(csc)
    for x in (once(A, b), solve(lu, b), superlu.solve(b)):
        error = np.max(np.abs(np.asarray(x) - reference)) / np.max(np.abs(reference))
        assert error < 1e-10, error

    timings: dict[str, list[float]] = {k: [] for k in ("once", "spsolve", "solve", "splu")}
    for _ in range(rounds):
        start = time.perf_counter()
        once(A, b).block_until_ready()
        timings["once"].append(time.perf_counter() - start)
        start = time.perf_counter()
        spla.spsolve(csc, b)
        timings["spsolve"].append(time.perf_counter() - start)
        start = time.perf_counter()
        solve(lu, b).block_until_ready()
        timings["solve"].append(time.perf_counter() - start)
        start = time.perf_counter()
        superlu.solve(b)
        timings["splu"].append(time.perf_counter() - start)
    medians = {k: median_ms(v) for k, v in timings.items()}
    return {"n": n, "half": half, "kind": lu.kind, **medians}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000, 100000])
    parser.add_argument("--halves", type=int, nargs="+", default=[1, 2, 5])
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(
        "| n | diagonals | factor | solve_banded ms | spsolve ms | ratio | "
        "lu.solve ms | splu.solve ms | ratio |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for n in args.sizes:
        for half in args.halves:
            r = run(n, half, args.rounds)
            print(
                f"| {n} | {2 * (2 * half + 1) - 1} | {r['kind']} | {r['once']:.3f} | "
                f"{r['spsolve']:.3f} | {r['once'] / r['spsolve']:.2f} | {r['solve']:.3f} | "
                f"{r['splu']:.3f} | {r['solve'] / r['splu']:.2f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
