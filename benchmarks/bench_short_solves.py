"""Short Krylov solves: jaxdia.cg/bicgstab (with their report) against JAX's own loops.

An implicit time loop, ``(I + dt L) u_next = u`` for the 2-D Laplacian ``L`` on an
``N x N`` grid, ``steps`` steps in one ``lax.scan`` (one compiled call), each step one
solve from ``x = 0`` to ``rtol``; a small ``dt`` makes each solve take 1-2 iterations,
where a fixed cost per solve (the report's residual, the loop's set-up) shows most.
Competitors run in interleaved rounds; the table reports medians and ratios measured in
the same run. Every variant is checked first: the final state against SciPy's
``spsolve`` stepping, to the solves' tolerance.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_short_solves.py \\
        [--N 256] [--steps 100] [--dt 0.01] [--rounds 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.sparse.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

RTOL = 1e-6


def problem(N: int, dt: float):
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    S = (sp.eye_array(N * N) + dt * sp.kronsum(T, T)).todia()
    u0 = np.random.default_rng(0).standard_normal(N * N)
    return S, jaxdia.DiaMatrix.from_scipy(S), u0


def time_loops(A: jaxdia.DiaMatrix, steps: int) -> dict:
    """The time loops, jitted: each returns the final state and the iterations per step
    (0 for JAX's solvers, which do not count them)."""

    def jaxdia_solver(method):
        def solve(u):
            x, info = method(A, u, rtol=RTOL)
            return x, info.iterations

        return solve

    def jax_solver(method):
        def solve(u):
            return method(A, u, tol=RTOL)[0], jnp.int32(0)

        return solve

    def loop(solve):
        return jax.jit(lambda u: jax.lax.scan(lambda u, _: solve(u), u, length=steps))

    return {
        "jaxdia.bicgstab": loop(jaxdia_solver(jaxdia.bicgstab)),
        "jax bicgstab": loop(jax_solver(jsl.bicgstab)),
        "jaxdia.cg": loop(jaxdia_solver(jaxdia.cg)),
        "jax cg": loop(jax_solver(jsl.cg)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--dt", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    S, A, u0 = problem(args.N, args.dt)
    expected = u0
    solve = spla.factorized(S.tocsc())
    for _ in range(args.steps):
        expected = solve(expected)
    loops = time_loops(A, args.steps)
    iterations = None
    for name, f in loops.items():
        u, counts = jax.block_until_ready(f(jnp.asarray(u0)))
        error = np.linalg.norm(np.asarray(u) - expected) / np.linalg.norm(expected)
        assert error < 100 * RTOL, (name, error)
        if name == "jaxdia.bicgstab":
            iterations = np.unique(np.asarray(counts), return_counts=True)
    times: dict[str, list[float]] = {name: [] for name in loops}
    rng = np.random.default_rng(1)
    for _ in range(args.rounds):
        for name in rng.permutation(list(loops)):
            start = time.perf_counter()
            jax.block_until_ready(loops[name](jnp.asarray(u0)))
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(values) for name, values in times.items()}
    print(
        f"N = {args.N} (n = {args.N**2}), {args.steps} steps, dt = {args.dt}, rtol = {RTOL}; "
        f"BiCGStab iterations per solve (count): {dict(zip(*(v.tolist() for v in iterations)))}; "
        f"medians of {args.rounds} interleaved rounds; jax {jax.__version__}"
    )
    print("\n| solver | time | vs JAX's loop |\n|---|---:|---:|")
    for ours, theirs in (("jaxdia.bicgstab", "jax bicgstab"), ("jaxdia.cg", "jax cg")):
        for name in (ours, theirs):
            print(f"| {name} | {median[name]:.3f} s | {median[name] / median[theirs]:.2f} |")


if __name__ == "__main__":
    main()
