"""Preconditioned solves: jaxdia's multigrid and Chebyshev against PyAMG and SciPy.

Run from the repository root (PyAMG is a benchmark-only dependency: ``pip install
'.[bench]'``):

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_precond.py \
        [--quick] [--out FILE]

Every solve goes to a relative residual ``|b - A x| / |b| <= 1e-8`` from ``x = 0``, and
is checked (the residual recomputed with SciPy) before it is timed. jaxdia's times are
one jitted call each, setup included (``jaxdia.multigrid`` or ``chebyshev`` inside the
call, then ``jaxdia.cg``/``bicgstab``); the first call's compile time is reported apart.
PyAMG's are ``smoothed_aggregation_solver`` (setup) plus ``solve(..., accel="cg")``,
SciPy's ``spsolve`` (SuperLU). Competitors run in interleaved rounds, a fresh random
order each round; the tables report medians and ratios measured in the same run.
OPENBLAS_NUM_THREADS=1 keeps NumPy's BLAS (PyAMG's coarsest solve) on one core; XLA uses
both cores, SciPy's sparse kernels one.
"""

from __future__ import annotations

import argparse
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

try:
    import pyamg
    from pyamg.gallery import diffusion_stencil_2d, poisson, stencil_grid
except ImportError:  # pragma: no cover - a benchmark-only dependency
    sys.exit("bench_precond.py needs PyAMG: pip install '.[bench]' (or pip install pyamg)")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "examples"))
from demo import convection_diffusion  # noqa: E402  (the demo's nonsymmetric problem)

RTOL = 1e-8


# -- problems --------------------------------------------------------------------------------


def jump_coefficient(N: int, contrast: float = 1e3):
    """``-div(k grad u)`` on an ``N x N`` grid, 5-point with harmonic means on the faces,
    ``k = contrast`` on the square ``[0.3, 0.7]^2`` and 1 elsewhere (Dirichlet)."""
    x = (np.arange(N) + 1) / (N + 1)
    X, Y = np.meshgrid(x, x, indexing="ij")
    k = np.where((X > 0.3) & (X < 0.7) & (Y > 0.3) & (Y < 0.7), contrast, 1.0)
    diagonal = np.zeros((N, N))
    rows, cols, values = [], [], []
    index = np.arange(N * N).reshape(N, N)
    for axis in range(2):
        for step in (-1, 1):
            neighbour = np.roll(k, -step, axis=axis)
            face = 2 * k * neighbour / (k + neighbour)
            edge = [slice(None)] * 2
            edge[axis] = -1 if step == 1 else 0
            face[tuple(edge)] = k[tuple(edge)]  # Dirichlet boundary face
            diagonal += face
            inside = [slice(None)] * 2
            inside[axis] = slice(0, N - 1) if step == 1 else slice(1, N)
            inside = tuple(inside)
            rows.append(index[inside].ravel())
            cols.append(np.roll(index, -step, axis=axis)[inside].ravel())
            values.append(-face[inside].ravel())
    rows.append(index.ravel())
    cols.append(index.ravel())
    values.append(diagonal.ravel())
    S = sp.csr_array(
        (np.concatenate(values), (np.concatenate(rows), np.concatenate(cols))), shape=(N * N,) * 2
    )
    return S


# -- solvers ---------------------------------------------------------------------------------


def jaxdia_solver(grid, method="cg", preconditioner="multigrid", **options):
    """A jitted ``A, b -> (x, info)``: the preconditioner's setup and the solve."""
    solve = getattr(jaxdia, method)

    def run(A, b):
        if preconditioner == "multigrid":
            M = jaxdia.multigrid(A, grid, **options)
        elif preconditioner == "chebyshev":
            M = jaxdia.chebyshev(A, **options)
        else:
            M = jaxdia.jacobi(A)
        return solve(A, b, M=M, rtol=RTOL, maxiter=100_000)

    return jax.jit(run)


def jaxdia_call(solver, A, b):
    """The compiled solve (its compile time is measured here, apart) as a call."""
    start = time.perf_counter()
    compiled = solver.lower(A, b).compile()
    COMPILE[id(compiled)] = time.perf_counter() - start

    def call():
        x, info = jax.block_until_ready(compiled(A, b))
        if not bool(info.converged):
            raise AssertionError(f"jaxdia did not converge: {info}")
        return np.asarray(x), int(info.iterations)

    call.compiled = compiled  # type: ignore[attr-defined]
    return call


def jax_cg_call(A, b):
    """``jax.scipy.sparse.linalg.cg`` with ``jaxdia.jacobi``: the route before this
    release (JAX's solver reports no iteration count: its count is SciPy's with the same
    preconditioner, printed as "-")."""
    solver = jax.jit(
        lambda A, b: jax.scipy.sparse.linalg.cg(
            A, b, M=jaxdia.jacobi(A), tol=RTOL, maxiter=100_000
        )[0]
    )
    start = time.perf_counter()
    compiled = solver.lower(A, b).compile()
    COMPILE[id(compiled)] = time.perf_counter() - start

    def call():
        return np.asarray(jax.block_until_ready(compiled(A, b))), "-"

    call.compiled = compiled  # type: ignore[attr-defined]
    return call


#: Compile times of the jaxdia competitors, by compiled object.
COMPILE: dict[int, float] = {}


def pyamg_call(S, b):
    def call():
        ml = pyamg.smoothed_aggregation_solver(S)
        residuals: list[float] = []
        x = ml.solve(b, tol=RTOL, accel="cg", residuals=residuals, maxiter=1000)
        return x, len(residuals) - 1

    return call


def spsolve_call(S, b):
    csc = S.tocsc()
    return lambda: (spla.spsolve(csc, b), 1)


# -- measuring -------------------------------------------------------------------------------


def measure(S, b, competitors, rounds, slow=()):
    """Checks each competitor (its first run), then times ``rounds`` interleaved calls
    (``slow`` ones: 2 at most) and takes their median. jaxdia's are compiled already (see
    :func:`jaxdia_call`)."""
    results = {}
    norm = np.linalg.norm(b)
    for name, call in competitors.items():
        start = time.perf_counter()
        x, iterations = call()
        first = time.perf_counter() - start
        residual = np.linalg.norm(b - S @ x) / norm
        if not residual <= 1.01 * RTOL:
            raise AssertionError(f"{name}: relative residual {residual:.2e} > {RTOL}")
        results[name] = {"first": first, "iterations": iterations, "residual": residual}
        print(f"    {name}: first run {first:.2f} s, {iterations} iterations", flush=True)
    samples: dict[str, list[float]] = {name: [] for name in competitors}
    order = list(competitors)
    shuffle = random.Random(0).shuffle
    for round_ in range(rounds):
        shuffle(order)
        for name in order:
            if name in slow and round_ >= 2:
                continue
            start = time.perf_counter()
            competitors[name]()
            samples[name].append(time.perf_counter() - start)
    for name, times in samples.items():
        results[name]["time"] = statistics.median(times)
        compiled = getattr(competitors[name], "compiled", None)
        results[name]["compile"] = COMPILE.get(id(compiled), 0.0)
    return results


def versus_jacobi(results) -> str:
    """The ratios of the preconditioned solves to Jacobi-CG's time."""
    jacobi = results["jaxdia Jacobi-CG"]["time"]
    ratios = [
        f"{name.removeprefix('jaxdia ')}: {r['time'] / jacobi:.3f}"
        for name, r in results.items()
        if name.startswith("jaxdia") and "Jacobi" not in name
    ]
    if "JAX cg + jaxdia.jacobi" in results:
        ratios.append(
            f"JAX cg + jaxdia.jacobi: {results['JAX cg + jaxdia.jacobi']['time'] / jacobi:.2f}"
        )
    return "\n\nTime / jaxdia Jacobi-CG's: " + "; ".join(ratios) + "."


def seconds(t: float) -> str:
    return f"{t:.3f} s" if t < 10 else f"{t:.1f} s"


def table(title, results, reference, compiled=()):
    lines = [
        f"\n### {title}\n",
        f"| solver | iterations | time (setup + solve) | vs {reference} | compile (apart) |",
        "|---|---:|---:|---:|---:|",
    ]
    base = results[reference]["time"]
    for name, r in results.items():
        compile_ = seconds(r["compile"]) if name in compiled else "-"
        lines.append(
            f"| {name} | {r['iterations']} | {seconds(r['time'])} | "
            f"{r['time'] / base:.2f} | {compile_} |"
        )
    return "\n".join(lines)


# -- the cases -------------------------------------------------------------------------------


def poisson_case(grid, rounds, chebyshev=False):
    S = poisson(grid, format="csr")
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(0).standard_normal(S.shape[0])
    competitors = {
        "jaxdia multigrid-CG": jaxdia_call(jaxdia_solver(grid), A, b),
        "jaxdia multigrid-CG, float32 hierarchy": jaxdia_call(
            jaxdia_solver(grid, dtype=jnp.float32), A, b
        ),
        "PyAMG SA-CG": pyamg_call(S, b),
        "jaxdia Jacobi-CG": jaxdia_call(jaxdia_solver(grid, preconditioner="jacobi"), A, b),
    }
    if chebyshev:
        competitors["JAX cg + jaxdia.jacobi"] = jax_cg_call(A, b)
        for degree, dtype in ((16, None), (16, jnp.float32)):
            label = f"jaxdia Chebyshev({degree})-CG" + (", float32 polynomial" if dtype else "")
            solver = jaxdia_solver(grid, preconditioner="chebyshev", degree=degree, dtype=dtype)
            competitors[label] = jaxdia_call(solver, A, b)
    slow = {name for name in competitors if "acobi" in name or "Chebyshev" in name}
    return measure(S, b, competitors, rounds, slow)


def mesh_case(sizes, rounds):
    rows = ["\n### Mesh independence: 2-D Poisson, multigrid-CG\n"]
    rows.append("| grid | n | iterations | time | PyAMG iterations |")
    rows.append("|---|---:|---:|---:|---:|")
    counts = []
    for N in sizes:
        grid = (N, N)
        S = poisson(grid, format="csr")
        A = jaxdia.DiaMatrix.from_scipy(S)
        b = np.random.default_rng(0).standard_normal(S.shape[0])
        print(f"  {N} x {N}", flush=True)
        r = measure(
            S,
            b,
            {"mg": jaxdia_call(jaxdia_solver(grid), A, b), "pyamg": pyamg_call(S, b)},
            rounds,
        )
        counts.append(r["mg"]["iterations"])
        rows.append(
            f"| {N} x {N} | {N * N:,} | {r['mg']['iterations']} | {seconds(r['mg']['time'])} "
            f"| {r['pyamg']['iterations']} |"
        )
    spread = (max(counts) - min(counts)) / statistics.mean(counts)
    rows.append(f"\nIteration counts within +-{100 * spread / 2:.0f} % of their mean.")
    return "\n".join(rows), counts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a check)")
    parser.add_argument("--out", type=Path, help="also write the report to this file")
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds (default 3)")
    args = parser.parse_args(argv)
    quick = args.quick
    N2, N3 = (200, 30) if quick else (1000, 100)
    rounds = 1 if quick else args.rounds
    report = [
        f"jax {jax.__version__}, jaxdia {jaxdia.__version__}, PyAMG {pyamg.__version__}, "
        f"SciPy {scipy.__version__}, NumPy {np.__version__}, {platform.machine()}, "
        f"{os.cpu_count()} cores, OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS')}"
        f"; relative residual {RTOL:g}; medians of {rounds} rounds"
    ]

    print(f"2-D Poisson {N2} x {N2}", flush=True)
    r = poisson_case((N2, N2), rounds, chebyshev=True)
    compiled = [name for name in r if name.startswith(("jaxdia", "JAX"))]
    report.append(table(f"2-D Poisson, {N2} x {N2} (n = {N2 * N2:,})", r, "PyAMG SA-CG", compiled))
    report.append(versus_jacobi(r))
    isotropic = r["jaxdia multigrid-CG"]["iterations"]

    print(f"3-D Poisson {N3}^3", flush=True)
    r = poisson_case((N3, N3, N3), rounds)
    compiled = [name for name in r if name.startswith("jaxdia")]
    report.append(
        table(f"3-D Poisson, {N3}^3 (n = {N3**3:,})", r, "PyAMG SA-CG", compiled) + versus_jacobi(r)
    )

    print(f"jumping coefficient {N2} x {N2}", flush=True)
    S = jump_coefficient(N2)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(0).standard_normal(S.shape[0])
    grid = (N2, N2)
    r = measure(
        S,
        b,
        {
            "jaxdia multigrid-CG": jaxdia_call(jaxdia_solver(grid), A, b),
            "jaxdia multigrid-CG, float32 hierarchy": jaxdia_call(
                jaxdia_solver(grid, dtype=jnp.float32), A, b
            ),
            "PyAMG SA-CG": pyamg_call(S, b),
        },
        rounds,
    )
    report.append(
        table(
            f"Coefficient jumping by 1e3 on [0.3, 0.7]^2, {N2} x {N2}",
            r,
            "PyAMG SA-CG",
            [name for name in r if name.startswith("jaxdia")],
        )
    )

    print(f"anisotropic {N2} x {N2}", flush=True)
    S = stencil_grid(diffusion_stencil_2d(epsilon=0.01), grid, format="csr")
    A = jaxdia.DiaMatrix.from_scipy(S)
    plan = jaxdia.multigrid(A, grid, coarsening="auto").coarsening
    r = measure(
        S,
        b,
        {
            "jaxdia multigrid-CG, coarsening='auto'": jaxdia_call(
                jaxdia_solver(grid, coarsening=plan), A, b
            ),
            "jaxdia multigrid-CG, coarsening='full'": jaxdia_call(jaxdia_solver(grid), A, b),
            "PyAMG SA-CG": pyamg_call(S, b),
        },
        rounds,
    )
    auto = r["jaxdia multigrid-CG, coarsening='auto'"]["iterations"]
    report.append(
        table(
            f"Anisotropic diffusion (diffusion_stencil_2d(epsilon=0.01)), {N2} x {N2}",
            r,
            "PyAMG SA-CG",
            [name for name in r if name.startswith("jaxdia")],
        )
        + f"\n\n'auto' coarsening plan (axes halved per level): {plan}; iterations "
        f"{auto} = {auto / isotropic:.2f}x the isotropic Poisson count ({isotropic}). The "
        "plan is chosen on the host from concrete values before the timed calls (the "
        "timed call rebuilds the same hierarchy from it)."
    )

    sizes = (50, 100, 200) if quick else (250, 500, 1000)
    print("mesh independence", flush=True)
    text, _ = mesh_case(sizes, rounds)
    report.append(text)

    N = 100 if quick else 500
    print(f"convection-diffusion {N} x {N}", flush=True)
    S, f = convection_diffusion(N)
    S = S.tocsr()
    A = jaxdia.DiaMatrix.from_scipy(S)
    grid = (N, N)
    r = measure(
        S,
        f,
        {
            "jaxdia multigrid-BiCGStab": jaxdia_call(jaxdia_solver(grid, method="bicgstab"), A, f),
            "SciPy spsolve": spsolve_call(S, f),
            "jaxdia Jacobi-BiCGStab": jaxdia_call(
                jaxdia_solver(grid, method="bicgstab", preconditioner="jacobi"), A, f
            ),
        },
        rounds,
        slow={"jaxdia Jacobi-BiCGStab"},
    )
    report.append(
        table(
            f"Convection-diffusion (examples/demo.py), {N} x {N}, nonsymmetric",
            r,
            "SciPy spsolve",
            [name for name in r if name.startswith("jaxdia")],
        )
    )

    text = "\n".join(report) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
