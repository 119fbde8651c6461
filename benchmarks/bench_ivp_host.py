"""The cost of a right-hand side written in NumPy: ``jaxdia.solve_ivp`` runs it on the host
through ``jax.pure_callback`` (its Jacobian by SciPy's finite differences on the band),
against the same function in ``jax.numpy`` (compiled into the loop) and SciPy's BDF with
the NumPy one, in one run.

The case: the 1-D Brusselator (``examples/brusselator.py``'s, species interleaved, the
band ``-2 .. 2`` given as SciPy's ``jac_sparsity``) to t = 10 at rtol = 1e-6, atol =
1e-8; the three take the same steps (the counts are printed). Times are the medians of
``--repeats`` runs after a first (compiling) call, as CPU time of the process
(``time.process_time``) and wall time.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_ivp_host.py \\
        [--points 20] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.integrate as si  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402


def brusselator(xp: Any) -> Callable[..., Any]:
    """The right-hand side in ``xp`` (NumPy or ``jax.numpy``)."""

    def fun(t: Any, y: Any) -> Any:
        u, v = y[0::2], y[1::2]
        h = 1.0 / (u.size + 1)
        up, vp = xp.pad(u, 1, constant_values=1.0), xp.pad(v, 1, constant_values=3.0)
        du = 1 + u * u * v - 4 * u + 0.02 * (up[:-2] - 2 * u + up[2:]) / h**2
        dv = 3 * u - u * u * v + 0.02 * (vp[:-2] - 2 * v + vp[2:]) / h**2
        return xp.stack([du, dv], axis=-1).reshape(-1)

    return fun


def timed(run: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median CPU and wall seconds of ``run`` after a first call, and its last result."""
    result = run()
    cpu, wall = [], []
    for _ in range(repeats):
        c, w = time.process_time(), time.perf_counter()
        result = run()
        cpu.append(time.process_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(cpu), statistics.median(wall), result


def main() -> None:
    parser = argparse.ArgumentParser(description="A NumPy right-hand side on the host.")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    x = np.arange(1, options.points + 1) / (options.points + 1)
    y0 = np.stack([1 + np.sin(2 * np.pi * x), np.full(options.points, 3.0)], -1).reshape(-1)
    index = np.arange(y0.size)
    sparsity = sp.csc_array(np.abs(np.subtract.outer(index, index)) <= 2)
    kwargs: dict[str, Any] = dict(rtol=1e-6, atol=1e-8, jac_sparsity=sparsity)

    def jaxdia_run(fun: Callable[..., Any]) -> Callable[[], Any]:
        # jit outside: the program is compiled once, by the first call.
        program = jax.jit(lambda y0: jaxdia.solve_ivp(fun, (0.0, 10.0), y0, **kwargs))

        def run() -> Any:
            result = program(y0)
            jax.block_until_ready(result.y)
            return int(result.nsteps), int(result.nfev), int(result.njev), int(result.nlu)

        return run

    def scipy_run() -> Any:
        result = si.solve_ivp(brusselator(np), (0, 10), y0, method="BDF", **kwargs)
        return len(result.t) - 1, result.nfev, result.njev, result.nlu

    rows = [
        ("jaxdia, fun in jax.numpy", jaxdia_run(brusselator(jnp))),
        ("jaxdia, fun in NumPy (host)", jaxdia_run(brusselator(np))),
        ("SciPy BDF, fun in NumPy", scipy_run),
    ]
    print(f"Brusselator 1-D, n = {y0.size}, load {os.getloadavg()[0]:.1f}")
    print("| solver | steps, f, J, LU | CPU | wall | CPU / SciPy's |")
    print("|---|---|---:|---:|---:|")
    results = [(label, *timed(run, options.repeats)) for label, run in rows]
    scipy_cpu = results[-1][1]
    for label, cpu, wall, counts in results:
        print(
            f"| {label} | {', '.join(map(str, counts))} | {cpu * 1e3:.1f} ms | "
            f"{wall * 1e3:.1f} ms | {cpu / scipy_cpu:.2f} |"
        )


if __name__ == "__main__":
    main()
