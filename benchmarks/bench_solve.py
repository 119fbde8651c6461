"""Banded direct solves: jaxdia against SciPy, one-shot and factor once / solve many.

Run from the repository root (OpenBLAS is limited to one thread, as SciPy's SuperLU is
single-threaded; the script sets ``OPENBLAS_NUM_THREADS=1`` unless it is set):

    PYTHONPATH=. .venv/bin/python benchmarks/bench_solve.py [--quick] [--only PART] [--out FILE]

Parts (``--only`` runs one):

* ``oneshot``: ``jaxdia.solve_banded`` against ``scipy.linalg.solve_banded`` (one
  factorization and solve per call), with the ``lax.scan`` implementation forced too;
* ``factor``: factor once, solve many: implicit heat equations in 1-D and 2-D (factor
  plus all time steps in one jitted ``lax.scan``) against ``scipy.sparse.linalg.splu``
  once and a loop of its ``solve``; a complex Crank-Nicolson step (per solve); the
  factorization against ``scipy.linalg.lapack``'s ``?gbtrf``/``?pbtrf`` on the same
  matrix; 1000 tridiagonal systems under ``vmap`` against a loop of
  ``scipy.linalg.solve_banded``.

Every case is checked against SciPy first, compiled, then timed as in ``bench_traces.py``
(interleaved rounds, every call timed on its own, ``block_until_ready``, medians); compile
time is reported apart.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import functools  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.linalg as sla  # noqa: E402
import scipy.linalg.lapack as lapack  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from bench_traces import shown, timed  # noqa: E402  (also turns x64 on)
from jax import lax  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia import _dispatch  # noqa: E402

# -- one-shot solves -----------------------------------------------------------------------


def forced(method):
    """``jit(solve_banded)`` with the CPU implementation forced (``method=``)."""
    return jax.jit(functools.partial(jaxdia.solve_banded, method=method))


def oneshot_case(n, lower, upper, dtype, rounds, inner, batch=1):
    """Median seconds per call of each competitor; ``batch`` systems share the offsets
    (one batched DiaMatrix for jaxdia, a loop for SciPy)."""
    rng = np.random.default_rng(n)
    offsets = tuple(range(-lower, upper + 1))
    data = rng.standard_normal((batch, len(offsets), n)).astype(dtype)
    data[:, lower] += 2 * len(offsets)  # diagonally dominant: well conditioned
    A = jaxdia.DiaMatrix(data if batch > 1 else data[0], offsets, (n, n))
    b = rng.standard_normal((batch, n)).astype(dtype)
    ab = np.zeros((batch, lower + upper + 1, n), dtype)  # SciPy's storage: ab[u + i - j, j]
    for k, offset in enumerate(offsets):
        ab[:, upper - offset] = data[:, k]

    def scipy_loop():
        return np.stack([sla.solve_banded((lower, upper), ab[i], b[i]) for i in range(batch)])

    rhs = b[..., None] if batch > 1 else b[0]
    expected = scipy_loop().reshape(np.shape(rhs))
    default, scan = jax.jit(jaxdia.solve_banded), forced("scan")
    competitors = {
        "scipy": scipy_loop,
        "jaxdia": lambda: jax.block_until_ready(default(A, rhs)),
        "scan": lambda: jax.block_until_ready(scan(A, rhs)),
    }
    tolerance = 1e-4 if dtype == np.float32 else 1e-10
    for name, call in competitors.items():
        got = np.reshape(call(), np.shape(rhs))
        if not np.allclose(got, expected, rtol=tolerance, atol=tolerance):
            raise AssertionError(f"{name} is wrong for n = {n}, band ({lower}, {upper})")
    return {name: median for name, (median, _) in timed(competitors, rounds, inner).items()}


def oneshot_row(n, lower, upper, dtype, t, batch=1):
    return (
        f"| {f'{batch} x ' if batch > 1 else ''}{n:,} | ({lower}, {upper}) "
        f"| {np.dtype(dtype).name} | {shown(t['scipy'])} | {shown(t['jaxdia'])} "
        f"({t['jaxdia'] / t['scipy']:.2f}) | {shown(t['scan'])} ({t['scan'] / t['scipy']:.2f}) |"
    )


def oneshot(quick: bool) -> list[str]:
    sizes = (1_000, 100_000) if quick else (100, 1_000, 10_000, 100_000, 1_000_000)
    lines = [
        "| (systems x) n | band (l, u) | dtype | SciPy `solve_banded` | jaxdia | scan forced |",
        "|---:|---|---|---:|---:|---:|",
    ]
    for lower, upper in ((2, 2), (3, 3), (1, 6)):
        for dtype in (np.float64, np.float32):
            for n in sizes:
                rounds, inner = (3, 5) if n < 1_000_000 else (2, 2)
                t = oneshot_case(n, lower, upper, dtype, rounds, inner)
                lines.append(oneshot_row(n, lower, upper, dtype, t))
                print(lines[-1], flush=True)
    batches = ((256, 256),) if quick else ((256, 64), (256, 256), (256, 2048), (16, 10_000))
    for batch, n in batches:  # SciPy: a loop over the systems
        t = oneshot_case(n, 2, 2, np.float64, 3, 3, batch=batch)
        lines.append(oneshot_row(n, 2, 2, np.float64, t, batch=batch))
        print(lines[-1], flush=True)
    return lines


# -- factor once, solve many ---------------------------------------------------------------


def compiled(fn, *args):
    """``(jitted fn, seconds to compile it)``."""
    start = time.perf_counter()
    jitted = jax.jit(fn).trace(*args).lower().compile()
    return jitted, time.perf_counter() - start


def check(name, got, expected, rtol):
    got = np.asarray(got)
    error = np.linalg.norm(got - expected) / np.linalg.norm(expected)
    if not error < rtol:
        raise AssertionError(f"{name}: relative error {error:.2e} against SciPy")


def laplacian_1d(N):
    return sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(N, N)) * (N + 1) ** 2


def laplacian_2d(N):
    T, identity = laplacian_1d(N), sp.eye_array(N)
    return sp.kron(T, identity) + sp.kron(identity, T)


def time_stepping(name, S, u0, steps, rounds, factor="cholesky"):
    """Implicit time stepping ``S u_next = u``: SciPy's ``splu`` once and a loop of
    ``solve`` against jaxdia's factor and ``steps`` solves in one jitted ``lax.scan``."""
    S = S.tocsc()
    A = jaxdia.DiaMatrix.from_scipy(S.todia())
    make = {"cholesky": jaxdia.cho_factor, "lu": jaxdia.lu_factor}[factor]

    def scipy_steps():
        lu = spla.splu(S)
        u = u0
        for _ in range(steps):
            u = lu.solve(u)
        return u

    def steps_jax(A, u):
        solve = make(A).solve
        return lax.scan(lambda u, _: (solve(u), None), u, length=steps)[0]

    run, compile_time = compiled(steps_jax, A, jnp.asarray(u0))
    expected = scipy_steps()
    check(name, run(A, jnp.asarray(u0)), expected, 1e-8)
    u0_jax = jnp.asarray(u0)
    t = timed(
        {"scipy": scipy_steps, "jaxdia": lambda: jax.block_until_ready(run(A, u0_jax))},
        rounds,
        1,
    )
    return t["scipy"], t["jaxdia"], compile_time


def breakdown(S, rounds):
    """Factorization and one solve apart: ``cho_factor`` against ``splu``, ``solve`` with
    the stored factor against ``splu(...).solve``."""
    S = S.tocsc()
    A = jaxdia.DiaMatrix.from_scipy(S.todia())
    b = np.random.default_rng(0).random(S.shape[0])
    factor, _ = compiled(jaxdia.cho_factor, A)
    c = factor(A)
    solve, _ = compiled(lambda c, b: c.solve(b), c, jnp.asarray(b))
    lu = spla.splu(S)
    check("breakdown", solve(c, jnp.asarray(b)), lu.solve(b), 1e-8)
    b_jax = jnp.asarray(b)
    t = timed(
        {
            "splu": lambda: spla.splu(S),
            "cho_factor": lambda: jax.block_until_ready(factor(A)),
            "splu.solve": lambda: lu.solve(b),
            "solve": lambda: jax.block_until_ready(solve(c, b_jax)),
        },
        rounds,
        1,
    )
    return t


def crank_nicolson(N, rounds, inner):
    """A 2-D Schrödinger Crank-Nicolson step: ``(I + i dt/2 H) psi_next = rhs``, complex,
    band N: per-solve time of a stored factor against ``splu(...).solve``."""
    n, h, dt = N * N, 1.0 / (N + 1), 1e-4
    x = np.arange(1, N + 1) * h
    X, Y = np.meshgrid(x, x, indexing="ij")
    H = laplacian_2d(N) + sp.diags_array((1e3 * ((X - 0.5) ** 2 + (Y - 0.5) ** 2)).ravel())
    S = (sp.eye_array(n) + 0.5j * dt * H).astype(np.complex128).tocsc()
    b = np.exp(-((X - 0.3) ** 2 + (Y - 0.5) ** 2) / 0.01).ravel().astype(np.complex128)
    lu_scipy = spla.splu(S)
    A = jaxdia.DiaMatrix.from_scipy(S.todia())
    lu = jaxdia.lu_factor(A)
    solve, compile_time = compiled(lambda lu, b: lu.solve(b), lu, jnp.asarray(b))
    b_jax = jnp.asarray(b)
    check("Crank-Nicolson", solve(lu, b_jax), lu_scipy.solve(b), 1e-10)

    def steps(lu, psi):  # 20 steps in a scan: the per-step cost inside a time loop
        return lax.scan(lambda psi, _: (lu.solve(psi), None), psi, length=20)[0]

    loop, _ = compiled(steps, lu, b_jax)

    def scipy_steps():
        psi = b
        for _ in range(20):
            psi = lu_scipy.solve(psi)
        return psi

    t = timed(
        {
            "scipy": lambda: lu_scipy.solve(b),
            "jaxdia": lambda: jax.block_until_ready(solve(lu, b_jax)),
            "scipy loop": scipy_steps,
            "jaxdia loop": lambda: jax.block_until_ready(loop(lu, b_jax)),
        },
        rounds,
        inner,
    )
    fill = (lu_scipy.L.nnz + lu_scipy.U.nnz) / n
    per_step = tuple(
        tuple(value / 20 for value in t[name]) for name in ("scipy loop", "jaxdia loop")
    )
    return t["scipy"], t["jaxdia"], per_step, compile_time, fill


def factorization(name, S, kind, rounds):
    """jaxdia's factorization against ``scipy.linalg.lapack``'s on the same band (SciPy's
    wrapper copies its input, as jaxdia assembles its band from DIA ``data``)."""
    Sd = S.todia()
    A = jaxdia.DiaMatrix.from_scipy(Sd)
    lower, upper = max(0, -min(Sd.offsets)), max(0, max(Sd.offsets))
    n = S.shape[0]
    prefix = "z" if np.iscomplexobj(Sd.data) else "d"
    if kind == "lu":
        ab = np.zeros((2 * lower + upper + 1, n), Sd.data.dtype)
        for k, offset in enumerate(Sd.offsets):
            ab[lower + upper - offset] = Sd.data[k]
        routine = getattr(lapack, prefix + "gbtrf")
        ab = np.asfortranarray(ab)

        def reference():
            return routine(ab, lower, upper)

        factor = jaxdia.lu_factor
    else:
        ab = np.zeros((upper + 1, n), Sd.data.dtype)
        for k, offset in enumerate(Sd.offsets):
            if offset >= 0:
                ab[upper - offset] = Sd.data[k]
        routine = getattr(lapack, prefix + "pbtrf")
        ab = np.asfortranarray(ab)

        def reference():
            return routine(ab)

        factor = jaxdia.cho_factor
    run, compile_time = compiled(factor, A)
    expected = np.asarray(reference()[0])
    got = np.asarray(run(A).lu if kind == "lu" else run(A).factors[0]).T
    check(name, got[np.abs(expected) > 0], expected[np.abs(expected) > 0], 1e-10)
    t = timed({"lapack": reference, "jaxdia": lambda: jax.block_until_ready(run(A))}, rounds, 1)
    return t["lapack"], t["jaxdia"], compile_time


def many_tridiagonal(batch, n, rounds):
    """``batch`` tridiagonal systems under ``vmap`` against a loop of
    ``scipy.linalg.solve_banded``."""
    rng = np.random.default_rng(0)
    data = rng.standard_normal((batch, 3, n))
    data[:, 1] += 4 * np.sign(data[:, 1])
    b = rng.standard_normal((batch, n))
    ab = data[:, ::-1].copy()  # offsets 1, 0, -1: SciPy's rows

    def scipy_loop():
        return np.stack([sla.solve_banded((1, 1), ab[i], b[i]) for i in range(batch)])

    def matrix(d):
        return jaxdia.DiaMatrix(d, (-1, 0, 1), (n, n))

    def one_shot(d, b):
        return jaxdia.solve_banded(matrix(d), b)

    solve, compile_time = compiled(jax.vmap(one_shot), data, b)
    factor, _ = compiled(jax.vmap(lambda d: jaxdia.lu_factor(matrix(d))), data)
    lus = factor(data)
    stored, _ = compiled(jax.vmap(jaxdia.lu_solve), lus, b)
    expected = scipy_loop()
    check("vmap tridiagonal", solve(data, b), expected, 1e-10)
    check("vmap tridiagonal, stored", stored(lus, b), expected, 1e-10)
    t = timed(
        {
            "scipy": scipy_loop,
            "jaxdia": lambda: jax.block_until_ready(solve(data, b)),
            "stored": lambda: jax.block_until_ready(stored(lus, b)),
        },
        rounds,
        1,
    )
    return t["scipy"], t["jaxdia"], t["stored"], compile_time


def factor_once(quick: bool) -> list[str]:
    rounds = 3 if quick else 7
    lines = [
        "| case | SciPy | jaxdia | ratio | best / best | target | jaxdia compile |",
        "|---|---:|---:|---:|---:|---|---:|",
    ]

    def add(case, scipy_time, jax_time, target, compile_time):
        """A row: median times and their ratio, and the ratio of the best calls (less
        exposed to the other processes on a busy machine)."""
        ratio, best = jax_time[0] / scipy_time[0], jax_time[1] / scipy_time[1]
        compile_text = f"{compile_time:.2f} s" if compile_time else "—"
        lines.append(
            f"| {case} | {shown(scipy_time[0])} | {shown(jax_time[0])} | {ratio:.2f} "
            f"| {best:.2f} | {target} | {compile_text} |"
        )
        print(lines[-1], flush=True)

    # Implicit (backward Euler) heat equation u_t = Laplacian(u): (I + dt L) u_next = u.
    n = 100_000
    x = np.arange(1, n + 1) / (n + 1)
    S1 = sp.eye_array(n) + 1e-6 * laplacian_1d(n)
    for factor in ("cholesky", "lu"):
        t = time_stepping("heat 1-D", S1, np.sin(np.pi * x), 200, rounds, factor)
        name = "`cho_factor`" if factor == "cholesky" else "`lu_factor`"
        add(f"heat 1-D, n = 1e5, 200 steps, {name} + scan", *t[:2], "<= 0.5", t[2])
    sides = (100,) if quick else (100, 300)
    for N in sides:
        u0 = np.random.default_rng(N).random(N * N)
        S2 = sp.eye_array(N * N) + 1e-3 * laplacian_2d(N)
        steps = 50
        for factor in ("cholesky", "lu") if N == 100 else ("cholesky",):
            t = time_stepping(f"heat 2-D {N}", S2, u0, steps, max(2, rounds - 2), factor)
            name = "`cho_factor`" if factor == "cholesky" else "`lu_factor`"
            target = "<= 2" if N == 100 else "(report)"
            add(
                f"heat 2-D, {N} x {N} (band {N}), {steps} steps, {name} + scan",
                *t[:2],
                target,
                t[2],
            )
        parts = breakdown(S2, max(2, rounds - 2))
        add(
            f"  {N} x {N}: factorization alone, `cho_factor` vs `splu`",
            parts["splu"],
            parts["cho_factor"],
            "(report)",
            0.0,
        )
        add(
            f"  {N} x {N}: one solve, stored factor vs `splu(...).solve`",
            parts["splu.solve"],
            parts["solve"],
            "(report)",
            0.0,
        )
    scipy_time, jax_time, in_loop, compile_time, fill = crank_nicolson(120, rounds, 5)
    add(
        "Crank-Nicolson 2-D, complex, n = 14400, band 120: per solve",
        scipy_time,
        jax_time,
        "<= 2",
        compile_time,
    )
    add(
        "  same, per step of 20 (SciPy: a loop; jaxdia: a jitted `lax.scan`)",
        *in_loop,
        "<= 2",
        compile_time,
    )
    print(f"  (SuperLU's L + U hold {fill:.0f} entries per row; the band LU 2 * 120 + 1)")
    N = 120
    cn = sp.eye_array(N * N) + 0.5j * 1e-4 * laplacian_2d(N)
    for name, S, kind in [
        ("factorization: `lu_factor` vs `dgbtrf`, heat 2-D 100 x 100", S2_100(), "lu"),
        ("factorization: `lu_factor` vs `zgbtrf`, Crank-Nicolson n = 14400", cn, "lu"),
        ("factorization: `cho_factor` vs `dpbtrf`, heat 2-D 100 x 100", S2_100(), "cholesky"),
        ("factorization: `lu_factor` vs `dgbtrf`, 1-D n = 1e5, band (2, 2)", penta(), "lu"),
    ]:
        t = factorization(name, S, kind, rounds)
        add(name, *t[:2], "<= 1.5", t[2])
    scipy_time, jax_time, stored, compile_time = many_tridiagonal(1000, 1000, rounds)
    add(
        "1000 tridiagonal systems, n = 1000, `vmap(solve_banded)`",
        scipy_time,
        jax_time,
        ">= 10x faster (<= 0.1)",
        compile_time,
    )
    add("  same, `vmap(lu_solve)` with stored factors", scipy_time, stored, "(report)", 0.0)
    return lines


def S2_100():
    return sp.eye_array(100 * 100) + 1e-3 * laplacian_2d(100)


def penta():
    n = 100_000
    rng = np.random.default_rng(1)
    diagonals = [rng.standard_normal(n - abs(k)) for k in (-2, -1, 0, 1, 2)]
    diagonals[2] += 8.0
    return sp.diags_array(diagonals, offsets=[-2, -1, 0, 1, 2])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer sizes and rounds")
    parser.add_argument("--only", choices=("oneshot", "factor"), help="run one part")
    parser.add_argument("--out", help="also write the markdown report here")
    args = parser.parse_args()
    header = (
        f"jax {jax.__version__}, scipy {scipy.__version__}, {platform.processor() or 'cpu'}, "
        f"{os.cpu_count()} cores, OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}; "
        f"scan on CPU up to {_dispatch.SCAN_ROWS} rows; median, ratio jaxdia / SciPy"
    )
    lines = [header, ""]
    if args.only in (None, "factor"):
        lines += factor_once(args.quick) + [""]
    if args.only in (None, "oneshot"):
        lines += oneshot(args.quick)
    report = "\n".join(lines)
    print("\n" + report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
