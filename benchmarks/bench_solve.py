"""Banded direct solves: ``jaxdia.solve_banded`` against ``scipy.linalg.solve_banded``.

Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_solve.py [--quick] [--out FILE]

For bands wider than tridiagonal, jaxdia solves on CPU with LAPACK's ``gbsv`` (SciPy's
routine, called through ``jax.pure_callback``) from ``_LAPACK_FROM`` rows on, and with a
banded LU in ``lax.scan`` below that (and on accelerators); the ``scan`` column forces
the scan at every size. Each case is checked against SciPy first, then timed as in
``bench_traces.py`` (interleaved rounds, every call timed on its own, medians).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.linalg as sla  # noqa: E402
from bench_traces import shown, timed  # noqa: E402  (also turns x64 on)

import jaxdia  # noqa: E402
from jaxdia import _solve  # noqa: E402


def with_lapack_from(rows):
    """``jit(solve_banded)`` with LAPACK used from ``rows`` rows on (read when tracing)."""

    def solve(A, b):
        saved, _solve._LAPACK_FROM = _solve._LAPACK_FROM, rows
        try:
            return jaxdia.solve_banded(A, b)
        finally:
            _solve._LAPACK_FROM = saved

    return jax.jit(solve)


def case(n, lower, upper, dtype, rounds, inner):
    rng = np.random.default_rng(n)
    offsets = tuple(range(-lower, upper + 1))
    data = rng.standard_normal((len(offsets), n)).astype(dtype)
    data[lower] += 2 * len(offsets)  # diagonally dominant: well conditioned
    A = jaxdia.DiaMatrix(data, offsets, (n, n))
    b = rng.standard_normal(n).astype(dtype)
    ab = np.zeros((lower + upper + 1, n), dtype)  # SciPy's storage: ab[u + i - j, j]
    for k, offset in enumerate(offsets):
        ab[upper - offset] = data[k]
    expected = sla.solve_banded((lower, upper), ab, b)
    default, scan = jax.jit(jaxdia.solve_banded), with_lapack_from(2**62)
    competitors = {
        "scipy": lambda: sla.solve_banded((lower, upper), ab, b),
        "jaxdia": lambda: jax.block_until_ready(default(A, b)),
        "scan": lambda: jax.block_until_ready(scan(A, b)),
    }
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    for name, call in competitors.items():
        if not np.allclose(call(), expected, rtol=tolerance, atol=tolerance):
            raise AssertionError(f"{name} is wrong for n = {n}, band ({lower}, {upper})")
    return {name: median for name, (median, _) in timed(competitors, rounds, inner).items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args()
    sizes = (1_000, 100_000) if args.quick else (100, 1_000, 10_000, 100_000, 1_000_000)
    lines = [
        f"jax {jax.__version__}, scipy {scipy.__version__}, {platform.processor() or 'cpu'}, "
        f"{os.cpu_count()} cores; `_LAPACK_FROM` = {_solve._LAPACK_FROM}; median call, "
        "ratio to SciPy in parentheses",
        "",
        "| n | band (l, u) | dtype | SciPy `solve_banded` | jaxdia | jaxdia, scan forced |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for lower, upper in ((2, 2), (3, 3), (1, 6)):
        for dtype in (np.float64, np.float32):
            for n in sizes:
                rounds, inner = (3, 5) if n < 1_000_000 else (2, 2)
                t = case(n, lower, upper, dtype, rounds, inner)
                lines.append(
                    f"| {n:.0e} | ({lower}, {upper}) | {np.dtype(dtype).name} "
                    f"| {shown(t['scipy'])} | {shown(t['jaxdia'])} "
                    f"({t['jaxdia'] / t['scipy']:.2f}) | {shown(t['scan'])} "
                    f"({t['scan'] / t['scipy']:.2f}) |"
                )
                print(lines[-1], flush=True)
    report = "\n".join(lines)
    print("\n" + report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
