"""Banded solves by block cyclic reduction against LAPACK, the ``lax.scan``
factorization and SciPy, on CPU, and the sequential depth of the GPU program.

1. **Batches**: ``jax.jit(jax.vmap(jaxdia.solve_banded))`` on ``B`` systems of size ``n``
   (tridiagonal and pentadiagonal, diagonally dominant, float64) against a Python loop of
   ``scipy.linalg.solve_banded``; on CPU a batch of 8 or more systems runs cyclic
   reduction.
2. **One large system**: ``lu_factor(A).solve(b)`` in one compiled call with the method
   forced (``jaxdia._linalg.banded.METHOD``): cyclic reduction (``"parallel"``, what a
   GPU/TPU runs), the ``lax.scan`` LU (``"scan"``, what they ran before: the proxy for a
   GPU's sequential loop) and LAPACK (``"host"``, CPU's default).
3. **Sequential depth on GPU**: the ``while`` loops of ``lu_factor(A).solve(b)`` lowered
   for ``cuda`` with the scan (before) and with the default (after): their count and trip
   counts, read as the structural tests read them.

Every result is checked against SciPy before timing; medians of interleaved rounds.
Produced with::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_parallel_banded.py

(``--quick``: smaller sizes.)
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg as sla  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia._linalg import banded as _banded  # noqa: E402


def band(n: int, width: int, batch: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    """SciPy's ``ab`` layout (rows: offsets ``width .. -width``), diagonally dominant."""
    rng = np.random.default_rng(seed)
    ab = rng.uniform(-1, 1, (*batch, 2 * width + 1, n))
    ab[..., width, :] = 2 * (2 * width + 1)
    return ab


def as_matrix(ab: np.ndarray, width: int) -> jaxdia.DiaMatrix:
    n = ab.shape[-1]
    # SciPy's ab[u + i - j, j] == A[i, j] is DIA's data[k, j] for offset j - i = u - row.
    return jaxdia.DiaMatrix(jnp.asarray(ab), tuple(range(width, -width - 1, -1)), (n, n))


def median_times(runs: dict, rounds: int) -> dict[str, float]:
    times: dict[str, list[float]] = {name: [] for name in runs}
    rng = np.random.default_rng(1)
    for _ in range(rounds):
        for name in rng.permutation(list(runs)):
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def batches(count: int, n: int, rounds: int) -> list[str]:
    rows = []
    for width, label in ((1, "tridiagonal"), (2, "pentadiagonal")):
        ab = band(n, width, (count,))
        b = np.random.default_rng(2).standard_normal((count, n))
        A = as_matrix(ab, width)
        offsets, shape = A.offsets, A.shape
        solve = jax.jit(
            jax.vmap(lambda d, b: jaxdia.solve_banded(jaxdia.DiaMatrix(d, offsets, shape), b))
        )
        data, rhs = A.data, jnp.asarray(b)
        expected = np.stack([sla.solve_banded((width, width), ab[i], b[i]) for i in range(count)])
        got = np.asarray(solve(data, rhs))
        assert np.abs(got - expected).max() <= 1e-10 * np.abs(expected).max()
        median = median_times(
            {
                "jaxdia": lambda: jax.block_until_ready(solve(data, rhs)),
                "scipy": lambda: [
                    sla.solve_banded((width, width), ab[i], b[i]) for i in range(count)
                ],
            },
            rounds,
        )
        ratio = median["jaxdia"] / median["scipy"]
        rows.append(
            f"| {count} x {label}, n = {n} | {median['scipy'] * 1e3:.1f} ms | "
            f"{median['jaxdia'] * 1e3:.1f} ms | {ratio:.3f} ({1 / ratio:.1f}x faster) |"
        )
    return rows


def forced(method: str):
    """``lu_factor(A).solve(b)``, compiled with ``method`` forced."""
    _banded.METHOD = method
    jax.clear_caches()

    @jax.jit
    def run(A, b):
        return jaxdia.lu_factor(A).solve(b)

    return run


def single(n: int, width: int, rounds: int, scan: bool) -> str:
    ab = band(n, width, seed=3)
    b = jnp.asarray(np.random.default_rng(4).standard_normal(n))
    A = as_matrix(ab, width)
    expected = sla.solve_banded((width, width), ab, np.asarray(b))
    methods = ["parallel", "host"] + (["scan"] if scan else [])
    runs, compiles = {}, {}
    for method in methods:
        fn = forced(method)
        start = time.perf_counter()
        compiled = fn.lower(A, b).compile()
        compiles[method] = time.perf_counter() - start
        got = np.asarray(compiled(A, b))
        assert np.abs(got - expected).max() <= 1e-9 * np.abs(expected).max(), method
        runs[method] = lambda compiled=compiled: jax.block_until_ready(compiled(A, b))
    _banded.METHOD = "auto"
    median = median_times(runs, rounds)
    scan_cell = (
        f"{median['scan'] * 1e3:.1f} ms | {median['scan'] / median['parallel']:.1f}x"
        if scan
        else "not run | -"
    )
    return (
        f"| n = {n:.0e}, band ({width}, {width}) | {median['host'] * 1e3:.2f} ms | "
        f"{median['parallel'] * 1e3:.2f} ms ({compiles['parallel']:.1f} s) | "
        f"{median['parallel'] / median['host']:.1f} | {scan_cell} |"
    )


def depth(n: int, width: int) -> str:
    from tests.test_lowering import while_loops

    A = as_matrix(band(n, width, seed=5), width)
    b = jnp.ones(n)

    def loops(method: str):
        _banded.METHOD = method
        jax.clear_caches()
        return while_loops(lambda A, b: jaxdia.lu_factor(A).solve(b), A, b, platform="cuda")

    before, after = loops("scan"), loops("parallel")
    _banded.METHOD = "auto"

    def describe(found):
        trips = [max(c, default=0) for c in found]
        return f"{len(found)} loops, trip counts {trips}" if found else "no loop"

    return f"| n = {n}, band ({width}, {width}) | {describe(before)} | {describe(after)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    count, n_batch = (200, 200) if args.quick else (1000, 1000)
    sizes = (10**4,) if args.quick else (10**5, 10**6)
    print(f"jax {jax.__version__}, float64, medians of {args.rounds} interleaved rounds\n")
    print("| batch | SciPy loop | jaxdia vmap(solve_banded) | ratio |\n|---|---:|---:|---:|")
    for row in batches(count, n_batch, args.rounds):
        print(row)
    print(
        "\n| one system | LAPACK (host) | cyclic reduction (compile) | vs LAPACK | "
        "lax.scan LU | scan / cyclic reduction |\n|---|---:|---:|---:|---:|---:|"
    )
    for n in sizes:
        for width in (2, 10):
            print(single(n, width, args.rounds, scan=n <= 10**5))
    print("\n| program for cuda | before (lax.scan) | after (cyclic reduction) |\n|---|---|---|")
    for width in (1, 2, 10):
        print(depth(10**5, width))


if __name__ == "__main__":
    main()
