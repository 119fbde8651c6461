"""Short solves: Krylov solves against JAX's loops; a stored factor's solve per call.

Krylov (the default table): jaxdia.cg/bicgstab (with their report) against JAX's own loops.

An implicit time loop, ``(I + dt L) u_next = u`` for the 2-D Laplacian ``L`` on an
``N x N`` grid, ``steps`` steps in one ``lax.scan`` (one compiled call), each step one
solve from ``x = 0`` to ``rtol``; a small ``dt`` makes each solve take 1-2 iterations,
where a fixed cost per solve (the report's residual, the loop's set-up) shows most.
Competitors run in interleaved rounds; the table reports medians and ratios measured in
the same run. Every variant is checked first: the final state against SciPy's
``spsolve`` stepping, to the solves' tolerance.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_short_solves.py \\
        [--N 256] [--steps 100] [--dt 0.01] [--rounds 7]

A stored factor's solve, per call (``--factor``): the cost of one custom call of jaxdia's
LAPACK handlers, side by side with what else does the same solve. Each loop takes
``calls`` steps ``x <- A^-1 x + b`` (see :func:`in_fori_loop`): ``lu_factor(A)``'s
``solve`` in a compiled ``fori_loop`` against ``jax.lax.linalg.tridiagonal_solve``'s
factor-and-solve in the same loop (tridiagonal, n = 200 and 1000); against SciPy's
``dgbtrs`` (a band of 5, n = 1000) called from a loop in C (compiled here with ``cc``;
the row is left out without a compiler) and from a Python loop through ``ctypes``;
``lineax.linear_solve`` with ``jaxdia.BandedSolver`` and a stored state against
``lu.solve`` in the same loop (``--parts lineax``); and eager ``lu.solve(b)`` calls (``b``
a JAX array, then a NumPy one) against ``scipy.sparse.linalg.splu(A).solve(b)`` in the
same rounds (``--parts eager``). Every loop is first checked against SciPy's steps. Each
row gives the ratio of the median wall times, of the fastest rounds and of the median CPU
times (``time.process_time``, which leaves out waiting for a core on a loaded machine).

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_short_solves.py \\
        --factor [--calls 2000] [--rounds 7] [--parts loops,lineax,eager]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from typing import NamedTuple

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.sparse.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg.cython_lapack  # noqa: E402
import scipy.linalg.lapack as lapack  # noqa: E402
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


# -- a stored factor's solve, per call ----------------------------------------------------


def banded_matrix(n: int, width: int) -> sp.dia_array:
    """A diagonally dominant matrix with offsets ``-width .. width`` (rows with pivoting
    would be solved the same way; the values only need a well-conditioned solve)."""
    rng = np.random.default_rng(n + width)
    offsets = list(range(-width, width + 1))
    data = rng.standard_normal((len(offsets), n))
    data[width] += 2.0 * len(offsets)
    return sp.dia_array((data, offsets), shape=(n, n))


def in_fori_loop(step: Callable, calls: int) -> Callable:
    """``calls`` steps ``x <- step(x) + b`` from ``x = b`` in one compiled ``fori_loop``
    (``b`` the last operand). Adding ``b`` keeps ``x`` of order 1: repeated solves alone
    shrink it to subnormal numbers and then zeros, which solves that skip zero entries
    (LAPACK's reference ``?tbsv``, jaxdia's narrow-band loops) would race through."""
    return jax.jit(
        lambda *operands: jax.lax.fori_loop(
            0, calls, lambda _, x: step(*operands[:-1], x) + operands[-1], operands[-1]
        )
    )


class Gbtrs:
    """SciPy's ``dgbtrs`` (through its Cython export, the pointer jaxdia's handlers get
    too) on the LU factor of ``S`` from ``dgbtrf``, every argument prepared once; the
    same steps as :func:`in_fori_loop`, ``x <- A^-1 x + b``."""

    def __init__(self, S: sp.dia_array, width: int):
        n = S.shape[0]
        ab = np.zeros((3 * width + 1, n))
        dense = S.toarray()
        for j in range(n):
            for i in range(max(0, j - width), min(n, j + width + 1)):
                ab[2 * width + i - j, j] = dense[i, j]
        lu, pivots, info = lapack.dgbtrf(ab, width, width)
        assert info == 0
        self.lu = np.asfortranarray(lu)
        self.pivots = np.asfortranarray(pivots + 1, dtype=np.int32)
        capsule = scipy.linalg.cython_lapack.__pyx_capi__["dgbtrs"]
        name = ctypes.pythonapi.PyCapsule_GetName
        name.restype, name.argtypes = ctypes.c_char_p, [ctypes.py_object]
        pointer = ctypes.pythonapi.PyCapsule_GetPointer
        pointer.restype, pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
        self.address = pointer(capsule, name(capsule))
        self.n, self.width = n, width
        # n, kl, nrhs, ldab, info
        self.scalars = np.array([n, width, 1, 3 * width + 1, 0], np.int32)
        self.letter = np.array([ord("N")], np.uint8)

    def ctypes_loop(self) -> Callable:
        """``loop(b, calls)``: ``dgbtrs`` called from a Python loop through ``ctypes``
        (``PYFUNCTYPE``: the loop keeps the GIL; ``x += b`` by NumPy)."""
        dgbtrs = ctypes.PYFUNCTYPE(None, *[ctypes.c_void_p] * 11)(self.address)
        n_, kl, nrhs, ldab, info_ = (self.scalars.ctypes.data + 4 * i for i in range(5))
        trans, factor, rows = self.letter.ctypes.data, self.lu.ctypes.data, self.pivots.ctypes.data

        def loop(b, calls):
            x = np.array(b, order="F")
            solution = x.ctypes.data
            for _ in range(calls):
                dgbtrs(trans, n_, kl, kl, nrhs, factor, ldab, rows, solution, n_, info_)
                x += b
            assert self.scalars[4] == 0, "dgbtrs: info != 0"
            return x

        return loop

    def c_loop(self, directory: str) -> Callable | None:
        """``loop(b, calls)``: the whole loop in C (:data:`C_LOOP`, compiled here by
        ``cc -O2``), one ``ctypes`` call per loop; None without a C compiler."""
        source = os.path.join(directory, "gbtrs_loop.c")
        library = os.path.join(directory, "gbtrs_loop.so")
        with open(source, "w") as file:
            file.write(C_LOOP)
        try:
            subprocess.run(
                ["cc", "-O2", "-shared", "-fPIC", "-o", library, source],
                check=True,
                capture_output=True,
            )
        except (OSError, subprocess.CalledProcessError):
            return None
        run = ctypes.CDLL(library).gbtrs_loop
        run.restype = ctypes.c_int
        run.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        run.argtypes += [ctypes.c_void_p] * 4

        def loop(b, calls):
            b = np.ascontiguousarray(b, dtype=np.float64)
            x = b.copy()
            info = run(
                self.address,
                self.n,
                self.width,
                calls,
                self.lu.ctypes.data,
                self.pivots.ctypes.data,
                b.ctypes.data,
                x.ctypes.data,
            )
            assert info == 0, f"dgbtrs: info = {info}"
            return x

        return loop


#: ``calls`` steps ``x <- A^-1 x + b`` by ``dgbtrs`` (a band of ``kl`` sub- and
#: superdiagonals, ``gbtrf``'s factor ``lu``, 1-based ``pivots``); LAPACK's ``info``.
C_LOOP = r"""
typedef void gbtrs_t(char *, int *, int *, int *, int *, double *, int *, int *, double *,
                     int *, int *);
int gbtrs_loop(void *routine, int n, int kl, int calls, double *lu, int *pivots,
               const double *b, double *x) {
    gbtrs_t *gbtrs = (gbtrs_t *)routine;
    char trans = 'N';
    int ku = kl, nrhs = 1, ldab = 3 * kl + 1, info = 0;
    for (int call = 0; call < calls && info == 0; call++) {
        gbtrs(&trans, &n, &kl, &ku, &nrhs, lu, &ldab, pivots, x, &n, &info);
        for (int i = 0; i < n; i++) x[i] += b[i];
    }
    return info;
}
"""


class Timing(NamedTuple):
    """Seconds per call: the median and the fastest of the rounds, and the median CPU
    time (``time.process_time``: every thread of this process, XLA's included; on a
    loaded machine it leaves out the time spent waiting for a core)."""

    median: float
    best: float
    cpu: float

    def per(self, calls: int) -> Timing:
        return Timing(self.median / calls, self.best / calls, self.cpu / calls)


def time_calls(variants: dict[str, Callable[[], object]], rounds: int) -> dict[str, Timing]:
    """Each variant's median and fastest time and median CPU time over ``rounds``
    interleaved rounds."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    cpu: dict[str, list[float]] = {name: [] for name in variants}
    for run in variants.values():
        jax.block_until_ready(run())  # compiled and warm
    rng = np.random.default_rng(2)
    for _ in range(rounds):
        for name in rng.permutation(list(variants)):
            start, start_cpu = time.perf_counter(), time.process_time()
            jax.block_until_ready(variants[name]())
            times[name].append(time.perf_counter() - start)
            cpu[name].append(time.process_time() - start_cpu)
    return {
        name: Timing(statistics.median(values), min(values), statistics.median(cpu[name]))
        for name, values in times.items()
    }


def iterated(S: sp.dia_array, b: np.ndarray, steps: int) -> np.ndarray:
    """SciPy's ``x <- A^-1 x + b``, ``steps`` times from ``x = b``: what every loop of the
    table computes (checked with a few steps before timing)."""
    solve, x = spla.factorized(S.tocsc()), b
    for _ in range(steps):
        x = solve(x) + b
    return x


CHECKED_STEPS = 3


def check_loop(make: Callable[[int], Callable[[], object]], S: sp.dia_array, b) -> None:
    """``make(steps)()``: a loop of ``steps`` steps, against :func:`iterated`."""
    got = np.asarray(make(CHECKED_STEPS)())
    np.testing.assert_allclose(got, iterated(S, np.asarray(b), CHECKED_STEPS), rtol=1e-10)


#: ``(case, jaxdia's variant, its time per call, the other, its time per call)``.
Row = tuple[str, str, Timing, str, Timing]

#: The parts of the ``--factor`` table (``--parts``).
PARTS = ("loops", "lineax", "eager")


def stored(steps: int) -> Callable:
    """``lu.solve`` in :func:`in_fori_loop`."""
    return in_fori_loop(lambda lu, x: lu.solve(x), steps)


def factor_rows(calls: int, rounds: int, parts: tuple[str, ...] = PARTS) -> list[Row]:
    """The rows of the ``parts`` asked for, in :data:`PARTS`' order."""
    rows = []
    if "loops" in parts:
        rows += loop_rows(calls, rounds)
    if "lineax" in parts:
        rows += lineax_rows(calls, rounds)
    if "eager" in parts:
        rows += eager_rows(max(calls // 10, 1), rounds)
    return rows


def loop_rows(calls: int, rounds: int) -> list[Row]:
    """A stored factor's solve in a compiled loop against JAX's tridiagonal solve and
    SciPy's ``dgbtrs`` (from C and through ``ctypes``)."""
    rows = []

    def lax_tridiagonal(steps):
        return in_fori_loop(
            lambda dl, d, du, x: jax.lax.linalg.tridiagonal_solve(dl, d, du, x[:, None])[:, 0],
            steps,
        )

    for n in (200, 1000):
        S = banded_matrix(n, 1)
        lu = jaxdia.lu_factor(jaxdia.DiaMatrix.from_scipy(S))
        b = np.random.default_rng(n).standard_normal(n)
        dl = np.concatenate([[0.0], S.diagonal(-1)])
        du = np.concatenate([S.diagonal(1), [0.0]])
        d = S.diagonal()
        check_loop(lambda steps: lambda: stored(steps)(lu, b), S, b)
        check_loop(lambda steps: lambda: lax_tridiagonal(steps)(dl, d, du, b), S, b)
        ours, theirs = stored(calls), lax_tridiagonal(calls)
        median = time_calls(
            {"stored": lambda: ours(lu, b), "lax": lambda: theirs(dl, d, du, b)}, rounds
        )
        rows.append(
            (
                f"tridiagonal, n = {n}, {calls} solves in a compiled `fori_loop`",
                "`lu_factor(A).solve(b)` (stored factor)",
                median["stored"].per(calls),
                "`jax.lax.linalg.tridiagonal_solve` (factor + solve)",
                median["lax"].per(calls),
            )
        )
    n, width = 1000, 2
    S = banded_matrix(n, width)
    lu = jaxdia.lu_factor(jaxdia.DiaMatrix.from_scipy(S))
    b = np.random.default_rng(5).standard_normal(n)
    gbtrs = Gbtrs(S, width)
    loops = {"ctypes": gbtrs.ctypes_loop()}
    with tempfile.TemporaryDirectory() as directory:
        c_loop = gbtrs.c_loop(directory)
    if c_loop is not None:
        loops["C"] = c_loop
    check_loop(lambda steps: lambda: stored(steps)(lu, b), S, b)
    for loop in loops.values():
        check_loop(lambda steps, loop=loop: lambda: loop(b, steps), S, b)
    ours = stored(calls)
    variants = {"stored": lambda: ours(lu, b)}
    variants.update({name: lambda loop=loop: loop(b, calls) for name, loop in loops.items()})
    median = time_calls(variants, rounds)
    for name, label in (("C", "a C loop"), ("ctypes", "a Python loop through `ctypes`")):
        if name in median:
            rows.append(
                (
                    f"band of 5, n = {n}, {calls} solves",
                    "`lu_factor(A).solve(b)` in a compiled `fori_loop`",
                    median["stored"].per(calls),
                    f"SciPy's `dgbtrs` from {label}",
                    median[name].per(calls),
                )
            )
    return rows


def lineax_rows(calls: int, rounds: int) -> list[Row]:
    """``lineax.linear_solve`` with ``BandedSolver`` and a stored state against
    ``lu.solve`` in the same compiled loop."""
    import lineax as lx

    rows = []
    for n, width in ((1000, 1), (1000, 2)):
        S = banded_matrix(n, width)
        A = jaxdia.DiaMatrix.from_scipy(S)
        lu = jaxdia.lu_factor(A)
        operator, solver = jaxdia.DiaLinearOperator(A), jaxdia.BandedSolver()
        state = solver.init(operator, {})
        b = np.random.default_rng(7).standard_normal(n)

        def linear_solve(steps):
            return in_fori_loop(
                lambda state, x: lx.linear_solve(operator, x, solver, state=state).value, steps
            )

        check_loop(lambda steps: lambda: stored(steps)(lu, b), S, b)
        check_loop(lambda steps: lambda: linear_solve(steps)(state, b), S, b)
        ours, theirs = linear_solve(calls), stored(calls)
        median = time_calls(
            {"lineax": lambda: ours(state, b), "stored": lambda: theirs(lu, b)}, rounds
        )
        rows.append(
            (
                f"{'tridiagonal' if width == 1 else 'band of 5'}, n = {n}, {calls} solves in a "
                "compiled `fori_loop`",
                "`lineax.linear_solve(op, b, BandedSolver(), state=state)`",
                median["lineax"].per(calls),
                "`lu.solve(b)`",
                median["stored"].per(calls),
            )
        )
    return rows


def eager_rows(eager_calls: int, rounds: int) -> list[Row]:
    """``eager_calls`` eager ``lu.solve(b)`` calls (``b`` a JAX array, then a NumPy one)
    against ``splu(A).solve(b)``, interleaved in the same rounds."""
    rows = []
    for n, width in ((1000, 1), (1000, 2)):
        S = banded_matrix(n, width)
        lu = jaxdia.lu_factor(jaxdia.DiaMatrix.from_scipy(S))
        reference = spla.splu(S.tocsc())
        b = np.random.default_rng(6).standard_normal(n)
        expected = spla.spsolve(S.tocsc(), b)
        np.testing.assert_allclose(lu.solve(b), expected, rtol=1e-10)
        np.testing.assert_allclose(reference.solve(b), expected, rtol=1e-10)
        b_device = jnp.asarray(b)

        def eager():
            for _ in range(eager_calls):
                x = lu.solve(b_device)
            return x

        def eager_numpy():
            for _ in range(eager_calls):
                x = lu.solve(b)
            return x

        def scipy_eager():
            for _ in range(eager_calls):
                x = reference.solve(b)
            return x

        median = time_calls(
            {"eager": eager, "eager NumPy": eager_numpy, "splu": scipy_eager}, rounds
        )
        case = f"{'tridiagonal' if width == 1 else 'band of 5'}, n = {n}, eager calls"
        for name, label in (
            ("eager", "`lu.solve(b)`"),
            ("eager NumPy", "`lu.solve(b)`, NumPy `b`"),
        ):
            rows.append(
                (
                    case,
                    label,
                    median[name].per(eager_calls),
                    "`splu(A).solve(b)`",
                    median["splu"].per(eager_calls),
                )
            )
    return rows


def factor_table(calls: int, rounds: int, parts: tuple[str, ...] = PARTS) -> None:
    rows = factor_rows(calls, rounds, parts)
    print(
        f"A stored factor's solve, per call; medians of {rounds} interleaved rounds; "
        f"jax {jax.__version__}, float64; best / best: the ratio of the fastest rounds; CPU: "
        f"of the median CPU times; load average {os.getloadavg()[0]:.1f} at the end"
    )
    print("\n| case | jaxdia | per call | other | per call | jaxdia / other | best / best | CPU |")
    print("|---|---|---:|---|---:|---:|---:|---:|")
    for case, ours, t_ours, theirs, t_theirs in rows:
        print(
            f"| {case} | {ours} | {t_ours.median * 1e6:.1f} µs | {theirs} | "
            f"{t_theirs.median * 1e6:.1f} µs | {t_ours.median / t_theirs.median:.2f} | "
            f"{t_ours.best / t_theirs.best:.2f} | {t_ours.cpu / t_theirs.cpu:.2f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--N", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--dt", type=float, default=0.01)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--factor", action="store_true", help="the stored factor's table")
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument(
        "--parts", default=",".join(PARTS), help=f"the --factor table's parts, of {PARTS}"
    )
    args = parser.parse_args()
    if args.factor:
        parts = tuple(args.parts.split(","))
        unknown = set(parts) - set(PARTS)
        if unknown:
            parser.error(f"--parts: unknown {sorted(unknown)}, choose from {PARTS}")
        factor_table(args.calls, args.rounds, parts)
        return
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
