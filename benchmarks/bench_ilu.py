"""Incomplete factorizations: jaxdia.ilu0 / ic0 on convection-diffusion problems, against
the other jaxdia preconditioners and SciPy (spilu + bicgstab, spsolve).

Run from the repository root:

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_ilu.py \
        [--quick] [--out FILE]

The problems: ``-eps Laplacian(u) + w . grad(u) = 1`` on the unit square (cube), first-order
upwind differences, Dirichlet boundaries, unknowns in C order; ``w = (1, 0.5)`` (2-D) or
``(1, 0.5, 0.25)`` (3-D), "with the flow" (the natural ordering is downwind), or with the
first component negated, "against" it. Every solve goes from ``x = 0`` to ``|b - A x| <=
1e-8 |b|`` (at most 3000 iterations); the iteration tables count BiCGStab iterations and
mark a solve that does not reach that residual (the true one, recomputed) with "fail".

Timings: each jaxdia solve is one jitted call, the preconditioner's setup included; its
compile time is measured apart. SciPy's are ``spilu`` (default options: threshold
dropping with fill, not ILU(0)) plus ``bicgstab``, and ``spsolve`` (SuperLU). Every
result is checked against the residual first; competitors then run in interleaved rounds,
a fresh random order each round, and the tables report medians and ratios from the same
run. OPENBLAS_NUM_THREADS=1 keeps NumPy's BLAS on one core; SciPy's sparse kernels use
one core, XLA both.
"""

from __future__ import annotations

import argparse
import functools
import os
import platform
import random
import statistics
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402

RTOL = 1e-8
MAXITER = 3000


def convection_diffusion(N: int, eps: float, wind) -> sp.dia_array:
    """The upwinded operator on an ``N^dim`` grid, ``dim = len(wind)``."""
    dim = len(wind)
    h = 1.0 / (N + 1)
    I = sp.eye_array(N)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N)) / h**2
    forward = sp.diags_array([-1.0, 1.0], offsets=[0, 1], shape=(N, N)) / h
    backward = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(N, N)) / h

    def along(M, axis):
        out = None
        for a in range(dim):
            factor = M if a == axis else I
            out = factor if out is None else sp.kron(out, factor)
        return out

    S = sum(eps * along(T, axis) for axis in range(dim))
    for axis, w in enumerate(wind):
        S = S + w * along(backward if w > 0 else forward, axis)
    return sp.dia_array(S)


def peclet(N: int, eps: float, wind) -> float:
    """The cell Peclet number ``|w| h / (2 eps)``."""
    return float(np.linalg.norm(wind)) / (N + 1) / (2 * eps)


# -- solvers ---------------------------------------------------------------------------------


def preconditioner(name: str, A, grid, order=()):
    """jaxdia's preconditioner ``name`` for ``A`` (inside a jitted call)."""
    if name == "none":
        return None
    if name == "Jacobi":
        return jaxdia.jacobi(A)
    if name == "ILU(0) exact":
        return jaxdia.ilu0(A, grid, method="exact")
    if name == "ILU(0) Chow-Patel, 2 sweeps":
        return jaxdia.ilu0(A, grid, method="chow-patel", sweeps=2)
    if name == "ILU(0) Chow-Patel, 1 sweep":
        return jaxdia.ilu0(A, grid, method="chow-patel", sweeps=1)
    if name == "ILU(0), order='auto'":
        return jaxdia.ilu0(A, grid, method="exact", order=order)
    if name == "ILU(0), order='auto', float32 factor":
        return jaxdia.ilu0(A, grid, method="exact", order=order, dtype=jnp.float32)
    if name == "IC(0)":
        return jaxdia.ic0(A, grid)
    if name.startswith("multigrid"):
        smoother = name.split("(")[1].rstrip(")").lower()
        sweeps = 1 if smoother == "ilu" else 2
        return jaxdia.multigrid(A, grid, smoother=smoother, sweeps=sweeps)
    raise ValueError(name)


COMPILE: dict[str, float] = {}


@functools.cache
def solver(name: str, grid, method: str, order):
    """The jitted ``A, b -> (x, info)`` of preconditioner ``name`` (one per name, grid and
    order: equal matrix structures share the compiled program)."""
    solve = getattr(jaxdia, method)

    def run(A, b):
        M = preconditioner(name, A, grid, order)
        return solve(A, b, M=M, rtol=RTOL, maxiter=MAXITER)

    return jax.jit(run)


def jaxdia_call(name: str, A, b, grid, method="bicgstab", order=()):
    """The compiled solve ``name`` as a call returning ``(x, iterations, converged)``;
    the compile time (when it compiles) goes to ``COMPILE``."""
    start = time.perf_counter()
    compiled = solver(name, grid, method, order).lower(A, b).compile()
    COMPILE[name] = time.perf_counter() - start

    def call():
        x, info = jax.block_until_ready(compiled(A, b))
        return np.asarray(x), int(info.iterations), bool(info.converged)

    return call


def iterations_of(name: str, A, b, grid, method="bicgstab", order=()):
    """``(x, iterations)`` of one solve, through the cached jitted solver."""
    x, info = solver(name, grid, method, order)(A, b)
    return np.asarray(x), int(info.iterations)


def scipy_ilu_call(S, b):
    csc, csr = S.tocsc(), S.tocsr()

    def call():
        factor = spla.spilu(csc)
        count = [0]
        M = spla.LinearOperator(S.shape, factor.solve)
        x, info = spla.bicgstab(
            csr,
            b,
            M=M,
            rtol=RTOL,
            maxiter=MAXITER,
            callback=lambda _: count.__setitem__(0, count[0] + 1),
        )
        return x, count[0], info == 0

    return call


def spsolve_call(S, b):
    csc = S.tocsc()
    return lambda: (spla.spsolve(csc, b), 1, True)


def converged(S, b, x) -> bool:
    """Whether the true residual of ``x`` meets the tolerance."""
    return bool(np.linalg.norm(b - S @ x) <= 1.01 * RTOL * np.linalg.norm(b))


# -- iteration tables --------------------------------------------------------------------------

COLUMNS = (
    "none",
    "Jacobi",
    "ILU(0) exact",
    "ILU(0) Chow-Patel, 1 sweep",
    "ILU(0) Chow-Patel, 2 sweeps",
    "ILU(0), order='auto'",
    "multigrid (Chebyshev)",
    "multigrid (Jacobi)",
    "multigrid (ILU)",
)


def iteration_table(N: int, dim: int, epsilons, columns=COLUMNS) -> str:
    grid = (N,) * dim
    base = (1.0, 0.5, 0.25)[:dim]
    lines = [
        f"\n#### {dim}-D, N = {N} (n = {N**dim:,}), w = {base} with the flow, and with "
        f"w_1 negated against it\n",
        "| eps (cell Peclet) | flow | " + " | ".join(columns) + " |",
        "|---|---|" + "---:|" * len(columns),
    ]
    for eps in epsilons:
        for flow in ("with", "against"):
            wind = base if flow == "with" else (-base[0], *base[1:])
            S = convection_diffusion(N, eps, wind)
            A = jaxdia.DiaMatrix.from_scipy(S)
            b = np.ones(S.shape[0])
            order = jaxdia.ilu0(A, grid, order="auto").order
            cells = []
            for name in columns:
                x, iterations = iterations_of(name, A, jnp.asarray(b), grid, order=order)
                ok = converged(S, b, x)
                cells.append(str(iterations) if ok else f"fail ({iterations})")
            label = f"{eps:g} ({peclet(N, eps, base):.2g})"
            lines.append(f"| {label} | {flow} | " + " | ".join(cells) + " |")
            print(f"  {dim}-D N={N} eps={eps:g} {flow}: {cells}", flush=True)
    return "\n".join(lines)


def cg_table(N: int, dim: int) -> str:
    """IC(0) in CG on the Laplacian (eps = 1, no flow)."""
    grid = (N,) * dim
    S = convection_diffusion(N, 1.0, (0.0,) * dim)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.ones(S.shape[0])
    cells = []
    for name in ("Jacobi", "IC(0)", "multigrid (Chebyshev)"):
        x, iterations = iterations_of(name, A, jnp.asarray(b), grid, method="cg")
        cells.append(str(iterations) if converged(S, b, x) else f"fail ({iterations})")
    return f"| {dim}-D Laplacian, N = {N} (n = {N**dim:,}) | " + " | ".join(cells) + " |"


# -- timings -----------------------------------------------------------------------------------


def measure(S, b, competitors, rounds):
    """Checks each competitor's first run, then times ``rounds`` interleaved rounds."""
    results = {}
    for name, call in competitors.items():
        start = time.perf_counter()
        x, iterations, _ = call()
        first = time.perf_counter() - start
        results[name] = {"iterations": iterations, "ok": converged(S, b, x), "first": first}
        print(f"    {name}: {iterations} iterations, ok={results[name]['ok']}", flush=True)
    samples: dict[str, list[float]] = {name: [] for name in competitors}
    order = list(competitors)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            start = time.perf_counter()
            competitors[name]()
            samples[name].append(time.perf_counter() - start)
    for name, times in samples.items():
        results[name]["time"] = statistics.median(times)
    return results


TIMED = (
    "ILU(0), order='auto'",
    "ILU(0), order='auto', float32 factor",
    "multigrid (ILU)",
    "multigrid (Chebyshev)",
)


def timing_table(N: int, epsilons, rounds: int) -> tuple[str, dict]:
    grid = (N, N)
    lines = [
        f"\n#### 2-D, N = {N} (n = {N * N:,}), w = (1, 0.5); time = setup + solve\n",
        "| eps | solver | iterations | time | vs spilu + bicgstab | vs spsolve | compile (apart) |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    everything = {}
    for eps in epsilons:
        S = convection_diffusion(N, eps, (1.0, 0.5))
        A = jaxdia.DiaMatrix.from_scipy(S)
        b = np.ones(S.shape[0])
        order = jaxdia.ilu0(A, grid, order="auto").order
        print(f"  timing N={N} eps={eps:g}", flush=True)
        competitors = {
            f"jaxdia {name}": jaxdia_call(name, A, jnp.asarray(b), grid, order=order)
            for name in TIMED
        }
        competitors["SciPy spilu + bicgstab"] = scipy_ilu_call(S, b)
        competitors["SciPy spsolve"] = spsolve_call(S, b)
        r = measure(S, b, competitors, rounds)
        everything[eps] = r
        ilu, direct = r["SciPy spilu + bicgstab"]["time"], r["SciPy spsolve"]["time"]
        for name, result in r.items():
            its = result["iterations"] if result["ok"] else f"fail ({result['iterations']})"
            compile_ = COMPILE.get(name.removeprefix("jaxdia "))
            lines.append(
                f"| {eps:g} | {name} | {its} | {result['time']:.3f} s | "
                f"{result['time'] / ilu:.2f} | {result['time'] / direct:.2f} | "
                + (f"{compile_:.1f} s" if name.startswith("jaxdia") and compile_ else "-")
                + " |"
            )
    return "\n".join(lines), everything


def kernel_table(N: int, rounds: int) -> str:
    """The pieces on CPU at N x N: the factorization (exact, Chow-Patel) and one
    application of M (two triangular solves: by rows, by hyperplanes), one jitted call
    each, and M on a batch of 4 vectors (one after another, as on CPU)."""
    grid = (N, N)
    S = convection_diffusion(N, 1e-3, (1.0, 0.5))
    A = jaxdia.DiaMatrix.from_scipy(S)
    v = jnp.asarray(np.random.default_rng(0).standard_normal(S.shape[0]))
    batch = jnp.stack([v, 2 * v, 3 * v, 4 * v])
    reference = jaxdia.ilu0(A, grid, method="exact")(v)
    cases = {
        "factorization, exact (row by row)": (
            jax.jit(lambda A: jaxdia.ilu0(A, grid, method="exact").U.data),
            (A,),
        ),
        "factorization, Chow-Patel, 2 sweeps": (
            jax.jit(lambda A: jaxdia.ilu0(A, grid, method="chow-patel").U.data),
            (A,),
        ),
    }
    for solves in ("scan", "wavefront"):
        M = jaxdia.ilu0(A, grid, method="exact", solves=solves)
        np.testing.assert_allclose(np.asarray(M(v)), np.asarray(reference), rtol=1e-10)
        cases[f"M(v), solves='{solves}'"] = (jax.jit(lambda M, v: M(v)), (M, v))
    M = jaxdia.ilu0(A, grid, method="exact")
    cases["M(v) for 4 vectors (lax.map)"] = (jax.jit(lambda M, v: M(v)), (M, batch))
    lines = [
        f"\n#### The pieces on CPU, 2-D N = {N} (n = {N * N:,}), eps = 1e-3\n",
        "| operation | time |",
        "|---|---:|",
    ]
    for name, (function, args) in cases.items():
        jax.block_until_ready(function(*args))
        times = []
        for _ in range(max(rounds, 5)):
            start = time.perf_counter()
            jax.block_until_ready(function(*args))
            times.append(time.perf_counter() - start)
        lines.append(f"| {name} | {1e3 * statistics.median(times):.2f} ms |")
        print(f"  {name}: {1e3 * statistics.median(times):.2f} ms", flush=True)
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a check)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    parser.add_argument(
        "--targets",
        action="store_true",
        help="only the targets' measurements: 2-D N = 256 iterations at eps 1e-3 and 1e-4, "
        "time to solution at N = 256 (eps 1e-3, 1e-4) and N = 512 (eps 1e-3)",
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    args = parser.parse_args(argv)
    quick = args.quick
    rounds = 1 if quick else args.rounds
    epsilons = (1.0, 1e-2, 1e-3, 1e-4)
    report = [
        f"jax {jax.__version__}, jaxdia {jaxdia.__version__}, SciPy {scipy.__version__}, "
        f"NumPy {np.__version__}, {platform.machine()}, {os.cpu_count()} cores, "
        f"OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}; relative residual "
        f"{RTOL:g}, at most {MAXITER} iterations; timings: medians of {rounds} rounds",
        "\n### BiCGStab iterations",
    ]
    if args.targets:
        report.append(iteration_table(256, 2, (1e-3, 1e-4)))
        report.append("\n### Time to solution")
        for N, eps_list in ((256, (1e-3, 1e-4)), (512, (1e-3,))):
            report.append(timing_table(N, eps_list, rounds)[0])
        return _report(report, args.out)
    for N, dim in ((32, 2), (16, 3)) if quick else ((128, 2), (256, 2), (32, 3)):
        report.append(iteration_table(N, dim, epsilons))
    report.append("\n### IC(0) in CG (eps = 1, no flow)\n")
    report.append("| problem | Jacobi | IC(0) | multigrid (Chebyshev) |")
    report.append("|---|---:|---:|---:|")
    for N, dim in ((32, 2), (16, 3)) if quick else ((256, 2), (32, 3)):
        report.append(cg_table(N, dim))
    report.append(kernel_table(64 if quick else 512, rounds))
    report.append("\n### Time to solution")
    for N, eps_list in ((64, (1e-3,)),) if quick else ((256, (1e-2, 1e-3, 1e-4)), (512, (1e-3,))):
        text, _ = timing_table(N, eps_list, rounds)
        report.append(text)
    return _report(report, args.out)


def _report(report: list[str], out: Path | None) -> int:
    text = "\n".join(report) + "\n"
    print(text)
    if out:
        out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
