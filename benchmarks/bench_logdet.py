"""Log-determinants, their gradients and the selected inverse, against CHOLMOD (through
scikit-sparse), a NumPy Kalman smoother and a stochastic estimator.

Four measurements, each with its competitor in the same run (rounds interleaved,
medians after a warm-up):

* **logdet** (``--n``, default ``1e6``): the RW2 precision ``D^T D + tau I``
  (pentadiagonal, ``D`` the second differences, ``--tau`` default ``1e-2``):
  ``cho_factor(Q).logdet()`` and ``slogdet(Q)`` (jitted), and ``jax.value_and_grad`` of
  the first with respect to ``Q.data`` (the gradient is ``Q^-1`` on the band), against
  CHOLMOD's factor + logdet, ``cholesky(Q).logdet()``, with its default ordering and with
  ``ordering_method="natural"`` (a band needs no reordering); the ratios are to the faster
  of the two. Targets (issue 41): ``logdet`` at most 0.5x, value + gradient at most 1.0x.
* **smoother** (``--steps``, default ``1e5``): ``examples/state_space_smoother.py``'s
  banded smoother (factor, solve, log-likelihood, selected inverse) against its NumPy
  Kalman filter + RTS smoother: time, and the agreement of means, variances and
  log-likelihood.
* **estimate** (``--estimate``, default ``1e5``): the exact ``logdet`` against matfree's
  stochastic Lanczos quadrature (Rademacher probes, ``--lanczos`` steps), if matfree
  imports: time and relative error.
* **variances** (``--variances``, default ``1e5``): ``selected_inverse(Q).diagonal()``
  (exact) against a Hutchinson estimate ``diag(Q^-1) ~ mean_k z_k * Q^-1 z_k``
  (Rademacher ``z_k`` solved with the stored factor).
* **periodic** (``--periodic``, default ``1e5``): the selected inverse and the
  log-determinant's gradient of periodic tridiagonal and pentadiagonal matrices, against
  the plain band, and against the whole band before the corners' Woodbury correction (at
  ``--periodic-small``).
* **pivoting** (``--pivoting``, default ``1e5``): the gradient and the selected inverse of
  a pentadiagonal matrix that needs row interchanges across cyclic reduction's blocks (on
  CPU, the pivoted LU's reverse mode) against a diagonally dominant one.

Medians of ``--rounds`` runs after a warm-up, competitors interleaved in the same run.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_logdet.py \\
        [--n 1000000] [--tau 0.01] [--steps 100000] [--estimate 100000] \\
        [--variances 100000] [--probes 10 100] [--lanczos 30] [--rounds 5]

Competitors are benchmark-only, never jaxdia's dependencies; a missing one skips its rows
with a note. scikit-sparse (CHOLMOD) builds against SuiteSparse's headers: on Debian or
Ubuntu ``apt-get install libsuitesparse-dev``, then ``pip install "scikit-sparse<0.5"``
(0.5 changed the API). matfree needs nothing but JAX; keep it out of the environment:
``pip install --no-deps --target /tmp/matfree matfree`` and add ``/tmp/matfree`` to
``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402

OFFSETS = (-2, -1, 0, 1, 2)


def rw2_precision(n: int, tau: float) -> tuple[np.ndarray, sp.csc_matrix]:
    """DIA ``data`` and CSC of ``R + tau I``, ``R = D^T D`` (second differences)."""
    D = sp.eye(n - 2, n) - 2 * sp.eye(n - 2, n, k=1) + sp.eye(n - 2, n, k=2)
    Q = (D.T @ D + tau * sp.eye(n)).todia()
    data = np.zeros((5, n))
    for k, offset in enumerate(Q.offsets):
        data[OFFSETS.index(int(offset))] = Q.data[k]
    return data, Q.tocsc()


def interleaved(functions: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median seconds of each function, one call of each per round (after a warm-up)."""
    for fn in functions.values():
        fn()
    times: dict[str, list[float]] = {name: [] for name in functions}
    for _ in range(rounds):
        for name, fn in functions.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def cholmod() -> dict[str, Callable[[sp.csc_matrix], float]]:
    """CHOLMOD's factor + logdet by ordering, or nothing (with a note) without
    scikit-sparse."""
    if importlib.util.find_spec("sksparse") is None:
        print("scikit-sparse is not installed: no CHOLMOD rows (see the docstring)")
        return {}
    from sksparse.cholmod import cholesky

    return {
        "CHOLMOD factor + logdet (default ordering)": lambda Q: cholesky(Q).logdet(),
        "CHOLMOD factor + logdet (natural ordering)": lambda Q: cholesky(
            Q, ordering_method="natural"
        ).logdet(),
    }


def bench_logdet(n: int, tau: float, rounds: int) -> None:
    data, Q_csc = rw2_precision(n, tau)
    data = jnp.asarray(data)

    def matrix(d):
        return jaxdia.DiaMatrix(d, OFFSETS, (n, n))

    def logdet(d):
        return jaxdia.cho_factor(matrix(d)).logdet()

    value = jax.jit(logdet)
    general = jax.jit(lambda d: jaxdia.slogdet(matrix(d))[1])
    value_and_grad = jax.jit(jax.value_and_grad(logdet))
    got = float(value(data))
    _, grad = value_and_grad(data)
    # The gradient is Q^-1 on the band (twice off the diagonal: one triangle is read); the
    # independent check is the general selected inverse (cyclic reduction, LU's blocks).
    exact = jaxdia.selected_inverse(matrix(data)).data
    offsets = np.asarray(OFFSETS)[:, None]
    twice = np.where(offsets == 0, 1.0, 2.0) * (offsets >= 0)
    rows = np.arange(n) - offsets  # the slot of Q[rows, j] in column j
    read = (rows >= 0) & (rows < n) & (twice != 0)
    error = np.max(np.abs(np.asarray(grad) - twice * np.asarray(exact))[read] / np.abs(exact)[read])
    print(f"RW2 + {tau:g} I, n = {n}: jaxdia logdet {got:.12e}, gradient vs cyclic reduction's")
    print(f"  selected inverse: max relative difference {error:.1e}")
    assert error < 1e-6, error
    assert abs(float(general(data)) - got) < 1e-10 * abs(got)
    competitors = cholmod()
    for name, fn in competitors.items():
        expected = fn(Q_csc)
        print(f"  {name}: {expected:.12e} (relative difference {abs(got / expected - 1):.1e})")
        assert abs(got - expected) < 1e-9 * abs(expected), (got, expected)
    functions: dict[str, Callable[[], object]] = {
        "jaxdia `cho_factor(Q).logdet()`": lambda: value(data).block_until_ready(),
        "jaxdia `slogdet(Q)` (LU)": lambda: general(data).block_until_ready(),
        "jaxdia logdet value + gradient": lambda: jax.block_until_ready(value_and_grad(data)),
    }
    functions.update({name: (lambda fn=fn: fn(Q_csc)) for name, fn in competitors.items()})
    medians = interleaved(functions, rounds)
    base = min((medians[name] for name in competitors), default=None)
    print(f"\n| RW2 + tau I, n = {n} | median ms | vs CHOLMOD (faster ordering) |")
    print("|---|---:|---:|")
    for name, median in medians.items():
        ratio = f"{median / base:.2f}x" if base else "-"
        print(f"| {name} | {median * 1e3:.1f} | {ratio} |")


def bench_smoother(steps: int, rounds: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import state_space_smoother as model  # pyright: ignore[reportMissingImports]

    ys = model.simulate(steps, np.random.default_rng(0))
    J, h = model.precision(steps), jnp.asarray(model.information(ys))
    constant, c = model.loglik_constant(ys)
    run = jax.jit(model.smooth)
    mean, variances, loglik = jax.block_until_ready(run(J, h, constant))
    expected_mean, expected_variances, expected_loglik = model.kalman_rts(ys)
    errors = {
        "means": np.max(np.abs(np.asarray(mean) - expected_mean) / (1 + np.abs(expected_mean))),
        "variances": np.max(np.abs(np.asarray(variances) / expected_variances - 1)),
        # Relative to the terms it is the difference of (see the example).
        "log-likelihood": abs(float(loglik) - expected_loglik) / (abs(c) + abs(expected_loglik)),
    }
    print(f"\nSmoother, T = {steps} steps (2 states), jaxdia vs Kalman + RTS, max relative error:")
    print("  " + ", ".join(f"{name} {error:.1e}" for name, error in errors.items()))
    assert max(errors.values()) < 1e-8, errors
    medians = interleaved(
        {
            "jaxdia factor + solve + logdet + selected inverse": lambda: jax.block_until_ready(
                run(J, h, constant)
            ),
            "NumPy Kalman filter + RTS smoother": lambda: model.kalman_rts(ys),
        },
        max(1, rounds // 2),  # the NumPy loop takes seconds
    )
    print(f"| smoother, T = {steps} | median ms |")
    print("|---|---:|")
    for name, median in medians.items():
        print(f"| {name} | {median * 1e3:.1f} |")


def bench_estimate(n: int, tau: float, probes: list[int], lanczos: int, rounds: int) -> None:
    if importlib.util.find_spec("matfree") is None:
        print("\nmatfree is not importable: no stochastic log-determinant rows (see the docstring)")
        return
    from matfree import decomp, funm, stochtrace  # pyright: ignore[reportMissingImports]

    data, _ = rw2_precision(n, tau)
    Q = jaxdia.DiaMatrix(jnp.asarray(data), OFFSETS, (n, n))
    exact_fn = jax.jit(lambda Q: jaxdia.cho_factor(Q).logdet())
    exact = float(exact_fn(Q))
    # Without reorthogonalization (matfree's "full" costs 20-60x the time here, for the same
    # estimate to 1e-11: the error is the probes').
    tridiagonal = decomp.tridiag_sym(lanczos, reortho="none")
    integrand = funm.monte_carlo_funm_sym_logdet(tridiagonal)
    chunk = 10  # probes per vmap: each keeps lanczos + 1 vectors of n

    def slq(Q, key, count):
        sampler = stochtrace.sampler_signs(jnp.zeros(n), num=chunk)
        estimate = stochtrace.estimator_monte_carlo(integrand, sampler=sampler)
        keys = jax.random.split(key, count // chunk)
        return jnp.mean(jax.lax.map(lambda k: estimate(lambda v: Q @ v, k), keys))

    functions: dict[str, Callable[[], object]] = {
        "jaxdia `cho_factor(Q).logdet()` (exact)": lambda: exact_fn(Q).block_until_ready()
    }
    errors = {}
    for count in probes:
        count = max(chunk, count // chunk * chunk)
        run = jax.jit(slq, static_argnums=2)
        name = f"matfree SLQ, {count} probes x {lanczos} Lanczos steps"
        estimates = [float(run(Q, jax.random.key(seed), count)) for seed in range(3)]
        errors[name] = max(abs(e / exact - 1) for e in estimates)
        functions[name] = lambda run=run, count=count: run(
            Q, jax.random.key(7), count
        ).block_until_ready()
    medians = interleaved(functions, rounds)
    print(f"\nlog det of RW2 + {tau:g} I, n = {n}: exact {exact:.10e}")
    print("| method | median ms | relative error (worst of 3 seeds) |")
    print("|---|---:|---:|")
    for name, median in medians.items():
        print(f"| {name} | {median * 1e3:.1f} | {errors.get(name, 0):.1e} |")


def bench_variances(n: int, tau: float, probes: list[int], rounds: int) -> None:
    data, _ = rw2_precision(n, tau)
    Q = jaxdia.DiaMatrix(jnp.asarray(data), OFFSETS, (n, n))
    exact_fn = jax.jit(lambda Q: jaxdia.selected_inverse(Q, assume_a="pos").diagonal())
    exact = np.asarray(exact_fn(Q))

    @jax.jit
    def hutchinson(Q, key, k):
        # k Rademacher probes z, diag(Q^-1) ~ mean of z * Q^-1 z.
        z = jax.random.rademacher(key, (n, k.shape[0]), dtype=jnp.float64)
        return jnp.mean(z * jaxdia.cho_factor(Q).solve(z), axis=1)

    small = jaxdia.DiaMatrix(jnp.asarray(data[:, :2000]), OFFSETS, (2000, 2000))
    reference = np.diag(np.linalg.inv(np.asarray(small.todense())))
    error = np.max(np.abs(np.asarray(exact_fn(small)) / reference - 1))
    print(f"\nPosterior variances, n = {n}: exact (selected_inverse) vs Hutchinson")
    print(f"  selected_inverse against the dense inverse at n = 2000: {error:.1e}")
    functions: dict[str, Callable[[], object]] = {
        "selected_inverse (exact)": lambda: exact_fn(Q).block_until_ready()
    }
    errors = {}
    for k in probes:
        shape = jnp.zeros(k)
        relative = np.abs(np.asarray(hutchinson(Q, jax.random.key(0), shape)) / exact - 1)
        name = f"Hutchinson, {k} probes"
        errors[name] = f"{relative.max():.2f} | {np.median(relative):.3f}"
        functions[name] = lambda shape=shape: hutchinson(
            Q, jax.random.key(1), shape
        ).block_until_ready()
    medians = interleaved(functions, rounds)
    print("| method | median ms | max relative error | median relative error |")
    print("|---|---:|---:|---:|")
    for name, median in medians.items():
        print(f"| {name} | {median * 1e3:.1f} | {errors.get(name, 'rounding | rounding')} |")


def bench_periodic(n: int, small: int, rounds: int) -> None:
    """Periodic tridiagonal and pentadiagonal matrices (corner diagonals at ``±(n - 1)``
    and ``±(n - 2)``): ``selected_inverse`` and ``value_and_grad`` of ``slogdet`` (both
    jitted) at ``n``, against the same on the plain band (no corners); at ``small``, the
    selected inverse against the whole band its offsets span (what it cost before the
    Woodbury correction; infeasible at ``n``: ``n x n`` blocks)."""
    from jaxdia._linalg.selected_inverse import block_inverse, gather
    from jaxdia._parts import DiaParts

    def matrix(size: int, half: int, corners: bool):
        offsets = tuple(range(-half, half + 1))
        if corners:
            offsets += tuple(size - k for k in range(1, half + 1))
            offsets = tuple(sorted(offsets + tuple(-(size - k) for k in range(1, half + 1))))
        rng = np.random.default_rng(0)
        data = rng.standard_normal((len(offsets), size))
        data[offsets.index(0)] = 2 * half + 2 + np.abs(data[offsets.index(0)])
        return jnp.asarray(data), offsets

    def selected(offsets, size):
        return jax.jit(
            lambda d: jaxdia.selected_inverse(jaxdia.DiaMatrix(d, offsets, (size, size))).data
        )

    def gradient(offsets, size):
        return jax.jit(
            jax.value_and_grad(
                lambda d: jaxdia.slogdet(jaxdia.DiaMatrix(d, offsets, (size, size)))[1]
            )
        )

    def whole_band(offsets, size):
        def run(d):
            inverse, _ = block_inverse(DiaParts(d, offsets, (size, size)), None)
            return gather(inverse, offsets, size)

        return jax.jit(run)

    def median_ms(fn, data) -> float:
        run = {"fn": lambda: jax.block_until_ready(fn(data))}
        return interleaved(run, rounds)["fn"] * 1e3

    print("| periodic, half-width | what | n | periodic ms | plain band ms | ratio |")
    for half in (1, 2):
        data, offsets = matrix(n, half, True)
        band, band_offsets = matrix(n, half, False)
        for label, make in (("selected_inverse", selected), ("slogdet value + grad", gradient)):
            periodic_ms = median_ms(make(offsets, n), data)
            band_ms = median_ms(make(band_offsets, n), band)
            ratio = periodic_ms / band_ms
            print(f"| {half} | {label} | {n} | {periodic_ms:.1f} | {band_ms:.1f} | {ratio:.2f}x |")
        data, offsets = matrix(small, half, True)
        new, old = selected(offsets, small), whole_band(offsets, small)
        dense = np.linalg.inv(np.asarray(jaxdia.DiaMatrix(data, offsets, (small, small)).todense()))
        got = jaxdia.DiaMatrix(new(data), offsets, (small, small)).todense()
        mask = np.asarray(jaxdia.DiaMatrix(jnp.ones_like(data), offsets, (small, small)).todense())
        assert np.allclose(np.asarray(got)[mask != 0], dense[mask != 0], atol=1e-10)
        new_ms, old_ms = median_ms(new, data), median_ms(old, data)
        print(f"| {half} | selected_inverse vs whole band | {small} | {new_ms:.1f} | ", end="")
        print(f"{old_ms:.1f} (whole band) | {old_ms / new_ms:.0f}x faster |")


def bench_pivoting(n: int, rounds: int) -> None:
    """Pentadiagonal matrices at ``n``: ``value_and_grad`` of ``slogdet`` and
    ``selected_inverse`` (jitted) of one that needs row interchanges across cyclic
    reduction's blocks (a zero diagonal, tiny first off-diagonals: on CPU the pivoted LU's
    reverse mode after cyclic reduction's refused attempt) against one that does not
    (diagonally dominant: cyclic reduction alone), rounds interleaved; also the wall and
    CPU time of one call each."""
    offsets = (-2, -1, 0, 1, 2)
    rng = np.random.default_rng(0)
    dominant = rng.standard_normal((5, n))
    dominant[2] += 10.0
    pivoting = rng.standard_normal((5, n))
    pivoting[2] = 0.0
    pivoting[[1, 3]] *= 1e-3

    def gradient(d):
        return jax.value_and_grad(
            lambda d: jaxdia.slogdet(jaxdia.DiaMatrix(d, offsets, (n, n)))[1]
        )(d)

    def selected(d):
        return jaxdia.selected_inverse(jaxdia.DiaMatrix(d, offsets, (n, n))).data

    print("| what | n | dominant ms | pivoting ms | ratio | CPU s, dominant / pivoting |")
    for label, fn in (("slogdet value + grad", gradient), ("selected_inverse", selected)):
        jitted = jax.jit(fn)
        runs = {
            "dominant": lambda: jax.block_until_ready(jitted(jnp.asarray(dominant))),
            "pivoting": lambda: jax.block_until_ready(jitted(jnp.asarray(pivoting))),
        }
        assert np.isfinite(np.asarray(jax.tree.leaves(runs["pivoting"]())[-1])).all()
        times = interleaved(runs, rounds)
        cpu = []
        for run in runs.values():
            start = time.process_time()
            run()
            cpu.append(time.process_time() - start)
        ratio = times["pivoting"] / times["dominant"]
        print(
            f"| {label} | {n} | {times['dominant'] * 1e3:.1f} | {times['pivoting'] * 1e3:.1f} "
            f"| {ratio:.1f}x | {cpu[0]:.2f} / {cpu[1]:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--tau", type=float, default=1e-2)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--estimate", type=int, default=100_000)
    parser.add_argument("--variances", type=int, default=100_000)
    parser.add_argument("--probes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--lanczos", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--periodic", type=int, default=100_000)
    parser.add_argument("--periodic-small", type=int, default=1_000)
    parser.add_argument("--pivoting", type=int, default=100_000)
    parser.add_argument(
        "--only",
        nargs="+",
        choices=("logdet", "smoother", "estimate", "variances", "periodic", "pivoting"),
    )
    args = parser.parse_args()
    parts = args.only or ("logdet", "smoother", "estimate", "variances", "periodic", "pivoting")
    if "logdet" in parts:
        bench_logdet(args.n, args.tau, args.rounds)
    if "smoother" in parts:
        bench_smoother(args.steps, args.rounds)
    if "estimate" in parts:
        bench_estimate(args.estimate, args.tau, args.probes, args.lanczos, args.rounds)
    if "variances" in parts:
        bench_variances(args.variances, args.tau, args.probes, args.rounds)
    if "periodic" in parts:
        bench_periodic(args.periodic, args.periodic_small, args.rounds)
    if "pivoting" in parts:
        bench_pivoting(args.pivoting, args.rounds)


if __name__ == "__main__":
    main()
