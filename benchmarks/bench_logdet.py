"""Log-determinants, their gradients and the selected inverse, against a sparse direct
factorization (CHOLMOD through scikit-sparse if it is installed, else SciPy's SuperLU).

Three measurements:

* **logdet**: the RW2 precision plus ``tau I`` (pentadiagonal, ``n = 1e6`` by default):
  ``cho_factor(Q).logdet()`` (jitted) and ``jax.value_and_grad`` of it with respect to
  ``Q.data`` (the gradient is ``Q^-1`` on the band: the selected inverse), against
  CHOLMOD's ``cholesky(Q).logdet()`` (factor + logdet) or, without scikit-sparse, SciPy's
  ``splu(Q)`` and ``sum(log |diag U|)``;
* **smoother**: ``examples/state_space_smoother.py``'s banded smoother (factor, solve,
  log-likelihood, selected inverse) at ``T = 1e5`` against its NumPy Kalman filter + RTS
  smoother;
* **variances**: ``selected_inverse(Q).diagonal()`` (exact) against a Hutchinson-type
  stochastic estimate ``diag(Q^-1) ~ mean_k z_k * Q^-1 z_k`` (Rademacher ``z_k``, ``k``
  probes solved with the stored factor) at ``n = 1e5``: time and accuracy.

* **periodic** (``--periodic 100000``, ``0`` skips; ``--periodic-only``): the selected
  inverse and the log-determinant's gradient of periodic tridiagonal and pentadiagonal
  matrices, against the plain band, and against the whole band before the corners' Woodbury
  correction (at ``--periodic-small``).

Medians of ``--rounds`` runs after a warm-up, competitors interleaved in the same run.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_logdet.py \\
        [--n 1000000] [--steps 100000] [--variances 100000] [--probes 10 100] [--rounds 5]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
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

OFFSETS = (-2, -1, 0, 1, 2)


def rw2_precision(n: int, tau: float) -> tuple[np.ndarray, sp.csc_matrix]:
    """DIA ``data`` and CSC of ``R + tau I``, ``R = D^T D`` (second differences)."""
    D = sp.diags([1.0, -2.0, 1.0], [0, 1, 2], shape=(n - 2, n))
    Q = (D.T @ D + tau * sp.eye(n)).todia()
    data = np.zeros((5, n))
    for k, offset in enumerate(Q.offsets):
        data[OFFSETS.index(int(offset))] = Q.data[k]
    return data, Q.tocsc()


def timed(fn, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def competitor():
    """``(name, factor-and-logdet function)``: CHOLMOD if scikit-sparse imports, else
    SciPy's SuperLU."""
    if importlib.util.find_spec("sksparse") is not None:
        from sksparse.cholmod import cholesky

        return "CHOLMOD factor + logdet", lambda Q: cholesky(Q).logdet()

    def superlu(Q):
        lu = spla.splu(Q, permc_spec="NATURAL", diag_pivot_thresh=0.0)
        return float(np.sum(np.log(np.abs(lu.U.diagonal()))))

    return "SciPy splu + sum log|diag U|", superlu


def bench_logdet(n: int, rounds: int) -> None:
    data, Q_csc = rw2_precision(n, 1.0)
    data = jnp.asarray(data)

    def logdet(d):
        return jaxdia.cho_factor(jaxdia.DiaMatrix(d, OFFSETS, (n, n))).logdet()

    value = jax.jit(logdet)
    value_and_grad = jax.jit(jax.value_and_grad(logdet))
    name, other = competitor()
    expected = other(Q_csc)
    got = float(value(data))
    _, grad = value_and_grad(data)
    print(f"RW2 + I, n = {n}: logdet {got:.10e} ({name}: {expected:.10e})")
    assert abs(got - expected) < 1e-9 * abs(expected), (got, expected)
    assert np.isfinite(np.asarray(grad)).all()
    times = {"jaxdia logdet": [], "jaxdia value + grad": [], name: []}
    for _ in range(rounds):
        times["jaxdia logdet"] += timed(lambda: value(data).block_until_ready(), 1)
        times["jaxdia value + grad"] += timed(
            lambda: jax.block_until_ready(value_and_grad(data)), 1
        )
        times[name] += timed(lambda: other(Q_csc), 1)
    base = statistics.median(times[name])
    print(f"| {'what':32} | median ms | vs {name} |")
    for label, values in times.items():
        median = statistics.median(values)
        print(f"| {label:32} | {median * 1e3:9.1f} | {median / base:5.2f}x |")


def bench_smoother(steps: int, rounds: int) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import state_space_smoother as model  # noqa: PLC0415

    ys = model.simulate(steps, np.random.default_rng(0))
    J, h = model.precision(steps), jnp.asarray(model.information(ys))
    run = jax.jit(model.smooth)
    mean, variances, _ = jax.block_until_ready(run(J, h, 0.0))
    expected_mean, expected_variances, _ = model.kalman_rts(ys)
    error = np.max(np.abs(np.asarray(variances) / expected_variances - 1))
    assert error < 1e-8, error
    ours = timed(lambda: jax.block_until_ready(run(J, h, 0.0)), rounds)
    theirs = timed(lambda: model.kalman_rts(ys), max(1, rounds // 2))
    print(f"\nSmoother, T = {steps} steps (2 states): variances agree to {error:.1e}")
    label = "jaxdia factor + solve + logdet + selected inverse"
    print(f"| {label} | {statistics.median(ours) * 1e3:.1f} ms |")
    print(f"| NumPy Kalman filter + RTS smoother | {statistics.median(theirs) * 1e3:.1f} ms |")


def bench_variances(n: int, probes: list[int], rounds: int) -> None:
    data, _ = rw2_precision(n, 1.0)
    Q = jaxdia.DiaMatrix(jnp.asarray(data), OFFSETS, (n, n))
    exact_fn = jax.jit(lambda Q: jaxdia.selected_inverse(Q, assume_a="pos").diagonal())
    exact = exact_fn(Q).block_until_ready()

    @jax.jit
    def hutchinson(Q, key, k):
        # k Rademacher probes z, diag(Q^-1) ~ mean of z * Q^-1 z.
        z = jax.random.rademacher(key, (n, k.shape[0]), dtype=jnp.float64)
        return jnp.mean(z * jaxdia.cho_factor(Q).solve(z), axis=1)

    reference = np.diag(
        np.linalg.inv(np.asarray(jaxdia.DiaMatrix(data[:, :2000], OFFSETS, (2000, 2000)).todense()))
    )
    check = np.asarray(
        exact_fn(jaxdia.DiaMatrix(jnp.asarray(data[:, :2000]), OFFSETS, (2000, 2000)))
    )
    print(f"\nPosterior variances, n = {n}: exact (selected_inverse) vs Hutchinson")
    error = np.max(np.abs(check / reference - 1))
    print(f"  selected_inverse against the dense inverse at n = 2000: {error:.1e}")
    row = timed(lambda: exact_fn(Q).block_until_ready(), rounds)
    print("| method | median ms | max relative error | median relative error |")
    print(
        f"| selected_inverse (exact) | {statistics.median(row) * 1e3:.1f} | rounding | rounding |"
    )
    for k in probes:
        shape = jnp.zeros(k)
        estimate = hutchinson(Q, jax.random.key(0), shape).block_until_ready()
        relative = np.abs(np.asarray(estimate) / np.asarray(exact) - 1)
        row = timed(lambda: hutchinson(Q, jax.random.key(1), shape).block_until_ready(), rounds)
        median = statistics.median(row) * 1e3
        print(f"| Hutchinson, {k} probes | {median:.1f} | {relative.max():.2f} | ", end="")
        print(f"{np.median(relative):.3f} |")


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
        jax.block_until_ready(fn(data))
        return statistics.median(timed(lambda: jax.block_until_ready(fn(data)), rounds)) * 1e3

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--steps", type=int, default=100_000)
    parser.add_argument("--variances", type=int, default=100_000)
    parser.add_argument("--probes", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--periodic", type=int, default=100_000, help="0: skip")
    parser.add_argument("--periodic-small", type=int, default=1_000)
    parser.add_argument("--periodic-only", action="store_true")
    args = parser.parse_args()
    if args.periodic:
        bench_periodic(args.periodic, args.periodic_small, args.rounds)
    if args.periodic_only:
        return
    bench_logdet(args.n, args.rounds)
    bench_smoother(args.steps, args.rounds)
    bench_variances(args.variances, args.probes, args.rounds)


if __name__ == "__main__":
    main()
