"""Banded least squares: ``jaxdia.lstsq_banded`` and ``optimistix.least_squares`` with
``jaxdia.BandedSolver`` against SciPy, on a smoothing fit (Whittaker-type) with ``n``
unknowns and ``2 n - 2`` residuals.

Run from the repository root:

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_lstsq.py \\
        [--n 2000] [--repeats 5] [--dense]

Sections:

* ``linear``: one least-squares solve ``min |J x - b|`` with the fit's Jacobian ``J``
  (offsets ``0, -n, -n + 1, -n + 2``): ``jaxdia.lstsq_banded`` (compiled, ``jit``)
  against SciPy's ``spsolve`` on the normal equations ``J^T J x = J^T b`` (SuperLU, the
  product formed in the timing) and ``scipy.sparse.linalg.lsqr`` (to its ``atol = btol =
  1e-12``), and NumPy's dense ``lstsq`` with ``--dense``. Every answer is checked against
  jaxdia's first.
* ``nonlinear``: the fit ``exp(y) ~ obs`` with a second-difference penalty, solved by
  ``optimistix.least_squares`` with ``LevenbergMarquardt`` and ``GaussNewton``
  (``linear_solver=jaxdia.BandedSolver(offsets, mask=mask)``: the Jacobian materialised from 4
  products, factored banded) against ``scipy.optimize.least_squares(jac_sparsity=...)``
  (``trf`` with ``lsmr``, the residual in NumPy); with ``--dense``, optimistix's default
  dense QR too. The minimizers are compared first.

Times are medians of ``--repeats`` calls after the first (which compiles: its time is
reported apart); ratios come from the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optimistix as optx  # noqa: E402
import scipy.optimize  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402


def whittaker(n: int, lam: float = 3.0, seed: int = 0):
    """The fit's residual (JAX), its NumPy twin, SciPy's sparsity and jaxdia's offsets."""
    t = np.linspace(0, 1, n)
    obs = np.exp(np.sin(6 * t)) + 0.05 * np.random.default_rng(seed).standard_normal(n)
    root = np.sqrt(lam)

    def fun(y, _=None):
        return jnp.concatenate([jnp.exp(y) - obs, root * (y[:-2] - 2 * y[1:-1] + y[2:])])

    def numpy_fun(y):
        return np.concatenate([np.exp(y) - obs, root * (y[:-2] - 2 * y[1:-1] + y[2:])])

    sparsity = sp.vstack([sp.eye(n), sp.diags([1.0, 1.0, 1.0], [0, 1, 2], shape=(n - 2, n))])
    return fun, numpy_fun, sparsity.tocsr(), (0, -n, -n + 1, -n + 2), penalty_mask(n)


def penalty_mask(n: int) -> np.ndarray:
    """The structural zeros of offsets ``0, -n, -n + 1, -n + 2``: the penalty's diagonals
    start in the fit's rows (``A[n - 1, 0]``, ``A[n - 2, 0]``, ``A[n - 1, 1]``)."""
    mask = np.ones((4, n), bool)
    mask[2, 0] = False
    mask[3, :2] = False
    return mask


def timed(fn, repeats: int) -> tuple[float, float]:
    """(first call's seconds, median of ``repeats`` later calls)."""
    start = time.perf_counter()
    fn()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return first, statistics.median(times)


def block(value):
    return jax.block_until_ready(value)


def linear(n: int, repeats: int, dense: bool) -> None:
    fun, _, _, offsets, mask = whittaker(n)
    y0 = jnp.asarray(np.sin(np.linspace(0, 3, n)))
    J = jaxdia.jacobian(fun, offsets)(y0)
    assert isinstance(J, jaxdia.DiaMatrix)
    b = jnp.asarray(np.random.default_rng(1).standard_normal(2 * n - 2))
    Js = sp.csr_array(J.to_scipy())
    rows = []
    # Eagerly, J's zeros tell the pattern of J^T J; under jit, the mask does.
    first, median = timed(lambda: block(jaxdia.lstsq_banded(J, b)), repeats)
    x = np.asarray(jaxdia.lstsq_banded(J, b))
    rows.append(("jaxdia.lstsq_banded", first, median, 0.0))
    in_order = mask[np.argsort(offsets)]  # lstsq_banded's mask: rows as J.offsets (sorted)
    solve = jax.jit(lambda J, b: jaxdia.lstsq_banded(J, b, mask=in_order))
    first, median = timed(lambda: block(solve(J, b)), repeats)
    rows.append(("jaxdia.lstsq_banded (jit, mask)", first, median, np.max(np.abs(solve(J, b) - x))))

    def normal():
        return spla.spsolve((Js.T @ Js).tocsc(), Js.T @ np.asarray(b))

    _, median_normal = timed(normal, repeats)
    rows.append(("scipy spsolve(J^T J)", 0.0, median_normal, np.max(np.abs(normal() - x))))

    def lsqr():
        return spla.lsqr(Js, np.asarray(b), atol=1e-12, btol=1e-12, iter_lim=20 * n)[0]

    _, median_lsqr = timed(lsqr, max(1, repeats // 2))
    rows.append(("scipy lsqr", 0.0, median_lsqr, np.max(np.abs(lsqr() - x))))
    if dense:
        dense_J = J.todense()
        _, median_dense = timed(lambda: np.linalg.lstsq(dense_J, np.asarray(b), rcond=None), 1)
        error = np.max(np.abs(np.linalg.lstsq(dense_J, np.asarray(b), rcond=None)[0] - x))
        rows.append(("numpy dense lstsq", 0.0, median_dense, error))
    print(f"\nlinear: min |J x - b|, J {2 * n - 2} x {n}, offsets {offsets}")
    report(rows)


def nonlinear(n: int, repeats: int, dense: bool) -> None:
    fun, numpy_fun, sparsity, offsets, mask = whittaker(n)
    tol = 1e-10

    def scipy_fit():
        return scipy.optimize.least_squares(
            numpy_fun, np.zeros(n), jac_sparsity=sparsity, xtol=tol, ftol=tol, gtol=tol
        )

    expected = scipy_fit()
    rows = []
    _, median_scipy = timed(scipy_fit, repeats)
    solvers = {
        "optx LevenbergMarquardt + BandedSolver": optx.LevenbergMarquardt(
            rtol=tol, atol=tol, linear_solver=jaxdia.BandedSolver(offsets, mask=mask)
        ),
        "optx GaussNewton + BandedSolver": optx.GaussNewton(
            rtol=tol, atol=tol, linear_solver=jaxdia.BandedSolver(offsets, mask=mask)
        ),
    }
    if dense:
        solvers["optx LevenbergMarquardt, dense QR"] = optx.LevenbergMarquardt(rtol=tol, atol=tol)
    for name, solver in solvers.items():
        run = jax.jit(lambda y0, solver=solver: optx.least_squares(fun, solver, y0).value)
        first, median = timed(lambda run=run: block(run(jnp.zeros(n))), repeats)
        value = np.asarray(run(jnp.zeros(n)))
        rows.append((name, first, median, np.max(np.abs(value - expected.x))))
    rows.append(("scipy least_squares(jac_sparsity) trf/lsmr", 0.0, median_scipy, 0.0))
    print(
        f"\nnonlinear: fit of {n} unknowns to {2 * n - 2} residuals ({expected.nfev} SciPy evals)"
    )
    report(rows)


def report(rows) -> None:
    base = rows[0][2]
    print(f"{'':46s} {'first (s)':>10s} {'median (s)':>11s} {'x jaxdia':>9s} {'max |dx|':>9s}")
    for name, first, median, error in rows:
        ratio = median / base
        first_text = f"{first:10.3f}" if first else f"{'':10s}"
        print(f"{name:46s} {first_text} {median:11.5f} {ratio:9.2f} {error:9.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dense", action="store_true", help="dense baselines too (slow)")
    args = parser.parse_args()
    linear(args.n, args.repeats, args.dense)
    nonlinear(args.n, args.repeats, args.dense)


if __name__ == "__main__":
    main()
