"""Compile time against the number of diagonals: ``A @ X``, ``A.T @ X``, ``A.traces`` and
the gradient with respect to the data, for 1, 27, 200 and 1000 diagonals.

Few diagonals compile to unrolled, fused loops (one piece per diagonal, the fastest code);
beyond a threshold the products loop over the diagonals, the transpose and the traces
gather, so compile time stops growing. Each measurement jits a fresh function (no cache
hit) and splits the first call into tracing + lowering and XLA compilation; ``run`` is
the median of later calls (compiled code, for the cost of each formulation).

Usage::

    python benchmarks/bench_compile.py [--n 2000] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import jaxdia  # noqa: E402

jax.config.update("jax_enable_x64", True)

DIAGONALS = (1, 27, 200, 1000)


def programs(offsets):
    """A new function object each call, so jit's cache never hits."""
    return {
        "A @ X": lambda A, X: A @ X,
        "A.T @ X": lambda A, X: A.T @ X,
        "A.traces(all)": lambda A, X: A.traces(list(offsets)),
        "grad wrt data": jax.grad(lambda A, X: jnp.sum(A @ X).real),
    }


def measure(fn, A, X):
    t0 = time.perf_counter()
    lowered = jax.jit(fn).trace(A, X).lower()
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jax.block_until_ready(compiled(A, X))
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(compiled(A, X))
        runs.append(time.perf_counter() - t)
    return t1 - t0, t2 - t1, statistics.median(runs)


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--markdown", default=None)
    args = p.parse_args()
    n = args.n
    lines = [
        f"n = {n}, float64, jax {jax.__version__}, {os.cpu_count()} cores. Seconds for "
        "trace + lower and for XLA's compile of a fresh `jax.jit`; `run` is the median "
        "call of the compiled program, in ms.",
        "",
        "| diagonals | function | c | trace + lower | XLA compile | run (ms) |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(0)
    for count in DIAGONALS:
        offsets = tuple(range(-(count // 2), count - count // 2))
        A = jaxdia.DiaMatrix(rng.standard_normal((count, n)), offsets, (n, n))
        for name, fn in programs(offsets).items():
            for columns in (1, 8):
                if name == "A.traces(all)" and columns > 1:
                    continue
                X = jnp.asarray(rng.standard_normal((n, columns) if columns > 1 else n))
                lower, compile_, run = measure(fn, A, X)
                lines.append(
                    f"| {count} | {name} | {columns} | {lower:.2f} | {compile_:.2f} | "
                    f"{run * 1e3:.2f} |"
                )
                print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
