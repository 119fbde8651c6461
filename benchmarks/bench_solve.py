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


def case(n, lower, upper, dtype, rounds, inner, batch=1):
    """Median seconds per call of each competitor; ``batch`` systems share the offsets
    (one batched DiaMatrix for jaxdia, a loop for SciPy)."""
    rng = np.random.default_rng(n)
    offsets = tuple(range(-lower, upper + 1))
    data = rng.standard_normal((batch, len(offsets), n)).astype(dtype)
    data[:, lower] += 2 * len(offsets)  # diagonally dominant: well conditioned
    A = jaxdia.DiaMatrix(data if batch > 1 else data[0], offsets, (n, n))
    b = rng.standard_normal((batch, n)).astype(dtype)
    ab = np.zeros((batch, lower + upper + 1, n), dtype)  # SciPy's storage: ab[u + i - j, j]
    for k, offset in enumerate(offsets):
        ab[:, upper - offset] = data[:, k]

    def scipy_loop():
        return np.stack([sla.solve_banded((lower, upper), ab[i], b[i]) for i in range(batch)])

    rhs = b[..., None] if batch > 1 else b[0]
    expected = scipy_loop().reshape(np.shape(rhs))
    default, scan = jax.jit(jaxdia.solve_banded), with_lapack_from(2**62)
    competitors = {
        "scipy": scipy_loop,
        "jaxdia": lambda: jax.block_until_ready(default(A, rhs)),
        "scan": lambda: jax.block_until_ready(scan(A, rhs)),
    }
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    for name, call in competitors.items():
        got = np.reshape(call(), np.shape(rhs))
        if not np.allclose(got, expected, rtol=tolerance, atol=tolerance):
            raise AssertionError(f"{name} is wrong for n = {n}, band ({lower}, {upper})")
    return {name: median for name, (median, _) in timed(competitors, rounds, inner).items()}


def row(n, lower, upper, dtype, t, batch=1):
    return (
        f"| {f'{batch} x ' if batch > 1 else ''}{n:,} | ({lower}, {upper}) "
        f"| {np.dtype(dtype).name} | {shown(t['scipy'])} | {shown(t['jaxdia'])} "
        f"({t['jaxdia'] / t['scipy']:.2f}) | {shown(t['scan'])} ({t['scan'] / t['scipy']:.2f}) |"
    )


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
        "| (systems x) n | band (l, u) | dtype | SciPy `solve_banded` | jaxdia | scan forced |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for lower, upper in ((2, 2), (3, 3), (1, 6)):
        for dtype in (np.float64, np.float32):
            for n in sizes:
                rounds, inner = (3, 5) if n < 1_000_000 else (2, 2)
                lines.append(
                    row(n, lower, upper, dtype, case(n, lower, upper, dtype, rounds, inner))
                )
                print(lines[-1], flush=True)
    batches = (
        ((256, 256), (256, 2048))
        if args.quick
        else ((256, 64), (256, 256), (256, 2048), (16, 10_000))
    )
    for batch, n in batches:  # SciPy: a loop over the systems
        t = case(n, 2, 2, np.float64, 3, 3, batch=batch)
        lines.append(row(n, 2, 2, np.float64, t, batch=batch))
        print(lines[-1], flush=True)
    report = "\n".join(lines)
    print("\n" + report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
