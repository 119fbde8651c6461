"""Whole programs: SciPy/PyAMG originals against their jaxdia ports, as processes.

Each pair in ``benchmarks/ports/`` is one public-style SciPy program and its port to
jaxdia (nothing from SciPy at run time): a ``kron``-built transverse-field Ising quench
(``eigsh`` + ``expm_multiply`` on 101 times), PyAMG's start-here solve (2-D Poisson
500 x 500, multigrid-CG), a short shift-invert ``eigsh``, and SciPy's banded-Jacobian
tutorial (the 1-D Gray-Scott equations, ``odeint(..., ml=2, mu=2)`` on ``y0`` of 5000
values: 2500 grid points, ``u`` and ``v`` interleaved). Each program runs as a
whole process (interpreter start, imports, construction, compilation, the run), its wall
and CPU time measured from outside; the port cold (no compilation cache) and warm (JAX's
persistent compilation cache filled by a first run that is not counted: the settings of
``jaxdia.enable_compilation_cache``, given as environment variables). The outputs are
checked to agree first. Rounds interleave original, cold port, warm port and JAX's
start-up floor (a process that only runs ``import jax``, which no port can beat); medians.
Bytecode is written and used, as for installed packages, whatever
``PYTHONDONTWRITEBYTECODE`` says.

**jaxdia's share** of a cold port is its CPU time minus that floor's (the median CPU
seconds of ``python -c "import jax"`` in the same rounds): importing jaxdia, the
construction, tracing, compilation and the run. The Gray-Scott port's budget: a share
of at most 1.5 s of CPU time without a cache.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_ports.py \\
        [--rounds 3] [--pairs gray_scott,oscillator]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

PORTS = Path(__file__).resolve().parent / "ports"
ROOT = str(PORTS.parents[1])
PAIRS = {  # key: (name, original, port, budget of jaxdia's share in CPU seconds)
    "ising": (
        "Ising quench, 12 sites (kron, eigsh, expm_multiply)",
        "ising_scipy.py",
        "ising_jaxdia.py",
        None,
    ),
    "poisson": (
        "PyAMG demo, 2-D Poisson 500^2 (multigrid-CG)",
        "poisson_pyamg.py",
        "poisson_jaxdia.py",
        None,
    ),
    "oscillator": (
        "oscillator, n = 2000, 10 levels (shift-invert eigsh)",
        "oscillator_scipy.py",
        "oscillator_jaxdia.py",
        None,
    ),
    "gray_scott": (
        "Gray-Scott tutorial, n = 5000 (odeint, ml = mu = 2)",
        "gray_scott_scipy.py",
        "gray_scott_jaxdia.py",
        1.5,
    ),
}


#: JAX's start-up floor: a process that imports JAX and does nothing else.
FLOOR = "-c", "import jax"


def run(script: str | tuple[str, ...], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU (user + system) seconds of one whole process, and what it printed."""
    arguments = list(script) if isinstance(script, tuple) else [str(PORTS / script)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *arguments], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise RuntimeError(f"{script} failed:\n{done.stdout}{done.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout.strip()


def agree(original: str, port: str) -> None:
    """The port printed what the original did (residuals: both below the tolerance;
    ``values``: the same numbers to 6 digits, as two integrators' solutions agree)."""
    if original.startswith("residual"):
        assert float(original.split()[1]) < 1e-8 and float(port.split()[1]) < 1e-8
    elif original.startswith("values"):
        ours, theirs = (np.array(line.split()[1:], float) for line in (port, original))
        scale = np.max(np.abs(theirs))
        assert np.allclose(ours, theirs, rtol=1e-6, atol=1e-6 * scale), (original, port)
    else:
        assert original == port, (original, port)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pairs", default=",".join(PAIRS), help="comma-separated keys")
    args = parser.parse_args()
    base = {**os.environ, "PYTHONPATH": ROOT}
    base.pop("PYTHONDONTWRITEBYTECODE", None)
    print(
        "| program | original wall s (CPU) | port cold wall s (CPU) | cold / original wall "
        "(CPU) | port warm cache wall s (CPU) | warm / original wall (CPU) | "
        "`import jax` wall s (CPU) | jaxdia's share, CPU s (budget) |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for key in args.pairs.split(","):
        name, original, port, budget = PAIRS[key]
        with tempfile.TemporaryDirectory() as cache:
            warm_env = {
                **base,
                "JAX_COMPILATION_CACHE_DIR": cache,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "-1",
            }
            agree(run(original, base)[2], run(port, warm_env)[2])  # also fills the cache
            times: dict[str, list[tuple[float, float]]] = {
                "orig": [],
                "cold": [],
                "warm": [],
                "floor": [],
            }
            for _ in range(args.rounds):
                times["orig"].append(run(original, base)[:2])
                times["cold"].append(run(port, base)[:2])
                times["warm"].append(run(port, warm_env)[:2])
                times["floor"].append(run(FLOOR, base)[:2])
        wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
        cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
        print(
            f"| {name} | {wall['orig']:.2f} ({cpu['orig']:.2f}) | {wall['cold']:.2f} "
            f"({cpu['cold']:.2f}) | {wall['cold'] / wall['orig']:.1f} "
            f"({cpu['cold'] / cpu['orig']:.1f}) | {wall['warm']:.2f} ({cpu['warm']:.2f}) | "
            f"{wall['warm'] / wall['orig']:.1f} ({cpu['warm'] / cpu['orig']:.1f}) | "
            f"{wall['floor']:.2f} ({cpu['floor']:.2f}) | {cpu['cold'] - cpu['floor']:.2f}"
            + (f" (<= {budget:g})" if budget else "")
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
