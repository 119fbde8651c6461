"""``jaxdia.eigsh`` and ``jaxdia.expm_multiply`` against SciPy's, on CPU.

Run from the repository root (SciPy single-threaded, as in the other benchmarks):

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_spectral.py \\
        [--quick] [--out FILE]

Cases:

* ``eigsh``: the 20 lowest levels of the finite-difference harmonic oscillator
  (``-1/2 d^2/dx^2 + x^2/2``, n = 2048) and of the 2-D Laplacian (48 x 48 grid), each
  with ``which="SA"`` and in shift-invert mode ``sigma=0``, against
  ``scipy.sparse.linalg.eigsh`` in the same mode;
* ``expm_multiply``: ``exp(-i t H) psi`` for a tridiagonal 1-D Schrödinger operator
  (``-1/2 d^2/dx^2 + cos x``, dx = 0.1, n = 1e5) and a smooth wave packet, at t = 0.1
  and t = 1, and on a grid of 11 times in [0, 1], against
  ``scipy.sparse.linalg.expm_multiply`` (SciPy's DIA matrix as it is).

Each jaxdia call is a ``jax.jit`` of the public function with the matrix as an argument.
Every competitor is checked against the other first (eigenvalues to 1e-10 relative,
``expm_multiply`` to 1e-10 relative), then timed in interleaved rounds
(``bench_traces.timed``: medians of calls timed one by one, ``block_until_ready`` on JAX
results). Compile time is the first call's time minus the median, reported apart.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from bench_traces import shown, timed  # noqa: E402  (also turns x64 on)

import jaxdia  # noqa: E402


def harmonic_oscillator(n: int, L: float = 10.0):
    x = np.linspace(-L, L, n)
    dx = x[1] - x[0]
    off = np.full(n - 1, -0.5 / dx**2)
    return sp.diags_array([off, 1 / dx**2 + x**2 / 2, off], offsets=[-1, 0, 1]).todia()


def laplacian_2d(N: int):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    return sp.kronsum(T, T, format="dia")


def schrodinger(n: int, dx: float = 0.1):
    x = (np.arange(n) - n / 2) * dx
    off = np.full(n - 1, -0.5 / dx**2)
    H = sp.diags_array([off, 1 / dx**2 + np.cos(x), off], offsets=[-1, 0, 1]).todia()
    psi = np.exp(-((x / 10) ** 2) + 1j * x)
    return H, psi / np.linalg.norm(psi)


def first_call(fn):
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def compare(name, ours, scipy_call, check, rounds, inner):
    """One table row: checks, compile time, interleaved medians."""
    mine, first = first_call(ours)
    reference = scipy_call()
    error = check(np.asarray(mine), reference)
    if not error <= 1e-10:
        raise AssertionError(f"{name}: jaxdia and SciPy differ by {error:.2e}")
    timings = timed({"jaxdia": ours, "scipy": scipy_call}, rounds, inner)
    t = {k: median for k, (median, _) in timings.items()}
    compile_time = max(first - t["jaxdia"], 0.0)
    return (
        f"| {name} | {shown(t['scipy'])} | {shown(t['jaxdia'])} | "
        f"{t['jaxdia'] / t['scipy']:.2f} | {compile_time:.2f} s | {error:.1e} |"
    )


def eigsh_rows(rounds, inner):
    rows = []
    for label, S in [
        ("oscillator n = 2048", harmonic_oscillator(2048)),
        ("2-D Laplacian 48 x 48", laplacian_2d(48)),
    ]:
        A = jaxdia.DiaMatrix.from_scipy(S)
        csr, csc = S.tocsr(), S.tocsc()
        for mode in ({"which": "SA"}, {"sigma": 0.0}):
            solve = jax.jit(lambda A, mode=mode: jaxdia.eigsh(A, k=20, **mode)[0])
            matrix = csc if "sigma" in mode else csr

            def ours(solve=solve, A=A):
                return jax.block_until_ready(solve(A))

            def reference(matrix=matrix, mode=mode):
                return np.sort(spla.eigsh(matrix, k=20, return_eigenvectors=False, **mode))

            def check(w, expected):
                return float(np.abs(w - expected).max() / np.abs(expected).max())

            mode_text = ", ".join(f"{k}={v!r}" for k, v in mode.items())
            name = f"eigsh, {label}, k=20, {mode_text}"
            rows.append(compare(name, ours, reference, check, rounds, inner))
            print(rows[-1], flush=True)
    return rows


def expm_rows(rounds, inner):
    H, psi = schrodinger(100_000)
    rows = []
    for t, grid in [(0.1, None), (1.0, None), (1.0, 11)]:
        S = ((-1j * t) * H).todia()
        A = jaxdia.DiaMatrix.from_scipy(S)
        kwargs = {} if grid is None else {"start": 0.0, "stop": 1.0, "num": grid}
        evolve = jax.jit(lambda A, b, kwargs=kwargs: jaxdia.expm_multiply(A, b, **kwargs))

        def ours(evolve=evolve, A=A):
            return jax.block_until_ready(evolve(A, psi))

        def reference(S=S, kwargs=kwargs):
            return spla.expm_multiply(S, psi, **kwargs)

        def check(X, expected):
            return float(np.abs(X - expected).max() / np.abs(expected).max())

        label = f"t = {t}" if grid is None else f"{grid} times in [0, {t}]"
        name = f"expm_multiply, -i t H psi, n = 1e5, {label}"
        rows.append(compare(name, ours, reference, check, rounds, inner))
        print(rows[-1], flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds")
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args()
    rounds, inner = (2, 2) if args.quick else (5, 3)
    lines = [
        f"jax {jax.__version__}, scipy {scipy.__version__}, {platform.processor() or 'cpu'}, "
        f"{os.cpu_count()} cores, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
        "; median call in interleaved rounds",
        "",
        "| case | SciPy | jaxdia | ratio | jaxdia compile | difference |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    lines += eigsh_rows(rounds, inner)
    lines += expm_rows(rounds, inner)
    report = "\n".join(lines)
    print("\n" + report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
