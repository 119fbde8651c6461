"""Compile time of ``A @ X`` and of its gradient with respect to the data, n = 1e4.

The XLA formulation unrolls one term per diagonal, so compile time grows with the number
of diagonals; this shows it stays bounded (seconds, not minutes) up to 200 diagonals.
Each measurement jits a fresh function (no cache hit), and splits the first call into
tracing + lowering, XLA compilation, and the first run.

Usage::

    python benchmarks/bench_compile.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import jaxdia  # noqa: E402

jax.config.update("jax_enable_x64", True)

N = 10_000
CASES = {
    "1 (main diagonal)": (0,),
    "27 (band)": tuple(range(-13, 14)),
    "200 (band)": tuple(range(-100, 100)),
    "200 (spread, |offset| <= 9950)": tuple(range(-9950, 10_000, 100)),
}


def _fresh(kind):
    """A new function object each call, so jit's cache never hits."""
    if kind == "A @ X":
        return lambda A, X: A @ X
    return jax.grad(lambda A, X: jnp.sum(A @ X).real)


def measure(kind, offsets, columns, dtype=np.float64):
    rng = np.random.default_rng(0)
    A = jaxdia.DiaMatrix(
        jnp.asarray(rng.standard_normal((len(offsets), N)).astype(dtype)), offsets, (N, N)
    )
    X = jnp.asarray(rng.standard_normal((N, columns) if columns > 1 else N).astype(dtype))
    t0 = time.perf_counter()
    lowered = jax.jit(_fresh(kind)).trace(A, X).lower()
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jax.block_until_ready(compiled(A, X))
    t3 = time.perf_counter()
    # The end-to-end first call of a plain jit, for reference.
    f = jax.jit(_fresh(kind))
    t4 = time.perf_counter()
    jax.block_until_ready(f(A, X))
    t5 = time.perf_counter()
    return t1 - t0, t2 - t1, t3 - t2, t5 - t4


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--markdown", default=None)
    args = p.parse_args()
    lines = [
        f"n = {N}, float64, jax {jax.__version__}. Seconds; first call = a fresh "
        "`jax.jit` called once (trace + lower + compile + run).",
        "",
        "| diagonals | function | c | trace + lower | XLA compile | first run | first call |",
        "|---|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for label, offsets in CASES.items():
        for kind in ("A @ X", "grad wrt data"):
            for columns in (1, 8):
                lower, comp, run, first = measure(kind, offsets, columns)
                lines.append(
                    f"| {label} | {kind} | {columns} | {lower:.2f} | {comp:.2f} | "
                    f"{run:.3f} | {first:.2f} |"
                )
                print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
