"""jaxdia demo (``make demo``): SciPy builds three PDE problems, jaxdia solves them.

1. 2-D Poisson, ``-Laplacian(u) = f``: symmetric positive definite, solved with
   ``jaxdia.cg`` preconditioned by ``jaxdia.multigrid``.
2. 2-D convection-diffusion, ``-eps Laplacian(u) + w . grad(u) = f`` with a rotating
   wind, upwinded: nonsymmetric, solved with ``jaxdia.bicgstab`` preconditioned by
   ``jaxdia.multigrid``.
3. The same with convection dominating (``eps = 1e-4``, a uniform wind ``w = (-1, 0.5)``):
   multigrid's smoothing no longer reaches the error that the wind carries, and
   BiCGStab with it does not converge; ILU(0) (``jaxdia.ilu0``, in the ordering of the
   flow that ``order="auto"`` picks) is then close to an exact solve. Both rows are shown:
   the choice of preconditioner is the point.

Each matrix is assembled with ``scipy.sparse`` (``kron`` of 1-D stencils, unknowns in C
order on the ``N x N`` grid), converted with ``jaxdia.DiaMatrix.from_scipy`` and solved on
JAX's default backend, the preconditioner's setup and the solve in one jitted call; the
solution is checked against SciPy's direct solver ``spsolve``. A table of sizes,
iterations, residuals and times is printed, and the solutions are plotted to a PNG when
matplotlib is installed (``pip install 'jaxdia[plot]'``).

Run: ``python examples/demo.py [--small] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import functools
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402


def grid(N: int):
    h = 1.0 / (N + 1)
    x = np.linspace(h, 1 - h, N)
    return h, *np.meshgrid(x, x, indexing="ij")


def poisson(N: int):
    """The 5-point Laplacian on an ``N x N`` grid and a source with three hot spots."""
    h, X, Y = grid(N)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    I = sp.eye_array(N)
    S = (sp.kron(T, I) + sp.kron(I, T)) / h**2
    f = sum(
        a * np.exp(-((X - cx) ** 2 + (Y - cy) ** 2) / 0.005)
        for a, cx, cy in [(100, 0.3, 0.3), (-60, 0.7, 0.4), (80, 0.45, 0.75)]
    )
    return S.todia(), f.ravel()


def convection_diffusion(N: int, eps: float = 0.01):
    """Upwinded ``-eps Laplacian + w . grad`` with the rotating wind ``w = (y - 1/2, 1/2 - x)``."""
    h, X, Y = grid(N)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    I = sp.eye_array(N)
    wx, wy = (Y - 0.5).ravel(), (0.5 - X).ravel()
    forward = sp.diags_array([-1.0, 1.0], offsets=[0, 1], shape=(N, N)) / h
    backward = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(N, N)) / h
    # First-order upwinding: backward differences where the wind is positive.
    dx = sp.diags_array(np.maximum(wx, 0)) @ sp.kron(backward, I) + sp.diags_array(
        np.minimum(wx, 0)
    ) @ sp.kron(forward, I)
    dy = sp.diags_array(np.maximum(wy, 0)) @ sp.kron(I, backward) + sp.diags_array(
        np.minimum(wy, 0)
    ) @ sp.kron(I, forward)
    S = eps * (sp.kron(T, I) + sp.kron(I, T)) / h**2 + dx + dy
    f = np.where((X - 0.25) ** 2 + (Y - 0.5) ** 2 < 0.01, 1.0, 0.0)
    return S.todia(), f.ravel()


def convection_dominated(N: int, eps: float = 1e-4, wind=(-1.0, 0.5)):
    """Upwinded ``-eps Laplacian + w . grad`` with a uniform wind ``w``, source 1."""
    h, X, _ = grid(N)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N))
    I = sp.eye_array(N)
    forward = sp.diags_array([-1.0, 1.0], offsets=[0, 1], shape=(N, N)) / h
    backward = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(N, N)) / h
    S = eps * (sp.kron(T, I) + sp.kron(I, T)) / h**2
    S = S + wind[0] * sp.kron(backward if wind[0] > 0 else forward, I)
    S = S + wind[1] * sp.kron(I, backward if wind[1] > 0 else forward)
    return S.todia(), np.ones(X.size)


@functools.partial(jax.jit, static_argnames=("method", "preconditioner", "N", "order"))
def solve(A, b, maxiter, *, method, preconditioner, N, order=()):
    """The preconditioner of the N x N grid (the unknowns in C order), then the solve;
    info says how many iterations and whether it converged."""
    if preconditioner == "multigrid":
        M = jaxdia.multigrid(A, (N, N))
    else:  # ILU(0), in the ordering chosen outside (order="auto" reads A's values)
        M = jaxdia.ilu0(A, (N, N), order=order)
    return getattr(jaxdia, method)(A, b, M=M, rtol=1e-10, maxiter=maxiter)


def step(message: str):
    print(f"  {message} ...", end="", flush=True)
    return time.perf_counter()


def done(start: float) -> float:
    elapsed = time.perf_counter() - start
    print(f" {elapsed:.1f} s", flush=True)
    return elapsed


def run(name, S, f, method, preconditioner, N, expected=True):
    """Converts, solves with jaxdia and with SciPy, and returns a row of the table.
    ``expected``: whether this preconditioner is the one to use here (a row that shows the
    wrong choice does not converge, and says so)."""
    print(f"{name}: {N} x {N} grid, n = {S.shape[0]:,}, {len(S.offsets)} diagonals")
    start = step("converting with DiaMatrix.from_scipy")
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = jnp.asarray(f)
    done(start)
    options = dict(method=method, preconditioner=preconditioner, N=N)
    if preconditioner == "ilu0":
        options["order"] = jaxdia.ilu0(A, (N, N), order="auto").order
    maxiter = 10 * S.shape[0] if expected else 300

    start = step(f"jaxdia: compiling and solving (first call), {preconditioner}")
    jax.block_until_ready(solve(A, b, maxiter, **options))
    first = done(start)
    start = step("jaxdia: solving again (compiled)")
    x, info = jax.block_until_ready(solve(A, b, maxiter, **options))
    t_jax = done(start)
    x = np.asarray(x)
    start = step("SciPy: spsolve (SuperLU, direct)")
    reference = spla.spsolve(S.tocsc(), f)
    t_scipy = done(start)
    residual = np.linalg.norm(S @ x - f) / np.linalg.norm(f)
    difference = np.linalg.norm(x - reference) / np.linalg.norm(reference)
    converged = bool(info.converged) and residual < 1e-8 and difference < 1e-6
    ok = converged if expected else not converged
    if expected:
        check = "ok" if ok else "FAILED"
    else:
        check = "no convergence, as expected" if ok else "FAILED (it converged)"
    row = (
        name,
        S.shape[0],
        S.nnz,
        f"{method} + {preconditioner}",
        int(info.iterations),
        residual,
        difference,
        first,
        t_jax,
        t_scipy,
        check,
        ok,
    )
    return row, x.reshape(N, N)


def print_table(rows):
    header = (
        f"{'problem':<22}{'n':>9}{'nnz':>10}  {'jaxdia solver':<21}{'its':>4}{'residual':>10}"
        f"{'vs spsolve':>12}{'1st call':>10}{'jaxdia':>9}{'spsolve':>9}  check"
    )
    print()
    print(header)
    print("-" * len(header))
    for name, n, nnz, solver, its, residual, difference, first, t_jax, t_scipy, check, _ in rows:
        print(
            f"{name:<22}{n:>9,}{nnz:>10,}  {solver:<21}{its:>4}{residual:>10.1e}"
            f"{difference:>12.1e}{first:>9.2f}s{t_jax:>8.2f}s{t_scipy:>8.2f}s  {check}"
        )
    print("its: iterations; residual: |A x - b| / |b| of jaxdia's x; vs spsolve:")
    print("|x - x_scipy| / |x_scipy|; 1st call includes compilation; jaxdia's time is the")
    print("preconditioner's setup and the solve; times are wall-clock seconds on this machine.")
    print("Multigrid where diffusion dominates, ILU(0) where convection does: the last two")
    print("rows are one problem, and multigrid is the wrong choice for it.")


def plot(path: Path, solutions) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed, so no plot: pip install 'jaxdia[plot]')")
        return
    fig, axes = plt.subplots(1, len(solutions), figsize=(6 * len(solutions), 5))
    for ax, (title, u) in zip(np.atleast_1d(axes), solutions):
        image = ax.imshow(u.T, origin="lower", extent=(0, 1, 0, 1), cmap="viridis")
        ax.set(title=title, xlabel="x", ylabel="y")
        fig.colorbar(image, ax=ax)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="small grids (a quick check)")
    parser.add_argument("--size", type=int, default=None, help="grid side N (default 500)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build/demo.png"),
        help="where to write the plot (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    N = args.size or (40 if args.small else 500)
    print(f"jaxdia {jaxdia.__version__}, JAX {jax.__version__}, backend: {jax.devices()[0]}")
    print()
    rows, solutions = [], []
    for name, build, method, preconditioner, expected in [
        ("Poisson 2-D", poisson, "cg", "multigrid", True),
        ("convection-diffusion", convection_diffusion, "bicgstab", "multigrid", True),
        ("convection-dominated", convection_dominated, "bicgstab", "multigrid", False),
        ("convection-dominated", convection_dominated, "bicgstab", "ilu0", True),
    ]:
        start = step(f"building {name} with scipy.sparse")
        S, f = build(N)
        done(start)
        row, u = run(name, S, f, method, preconditioner, N, expected)
        rows.append(row)
        if expected:
            solutions.append((f"{name} (jaxdia, {method} + {preconditioner})", u))
    print_table(rows)
    plot(args.out, solutions)
    return 0 if all(row[-1] for row in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
