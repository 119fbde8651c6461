"""Banded solves by block cyclic reduction against LAPACK, the ``lax.scan``
factorization and SciPy, on CPU, and the sequential depth of the GPU program.

1. **Batches**: ``jax.jit(jax.vmap(jaxdia.solve_banded))`` on ``B`` systems of size ``n``
   (tridiagonal, pentadiagonal and 7-diagonal, diagonally dominant, float64) per shape,
   against a Python loop of ``scipy.linalg.solve_banded`` and, for tridiagonal batches,
   JAX's batched ``lax.linalg.tridiagonal_solve`` (LAPACK's ``?gtsv``, the diagonals
   prepared outside the timing); with ``--cyclic`` also block cyclic reduction forced
   (what batches of 8 or more systems ran on CPU before), with its compile time. The
   implementation column is ``jaxdia._dispatch.oneshot_implementation``'s choice.
2. **One large system**: ``lu_factor(A).solve(b)`` in one compiled call with the method
   forced (``method=``): cyclic reduction (``"parallel"``, what a
   GPU/TPU runs), the ``lax.scan`` LU (``"scan"``, what they ran before: the proxy for a
   GPU's sequential loop) and LAPACK (``"lapack"``, CPU's default).
3. **Sequential depth on GPU**: the ``while`` loops of ``lu_factor(A).solve(b)`` lowered
   for ``cuda`` with the scan (before) and with the default (after): their count and trip
   counts, read as the structural tests read them.

Every result is checked against SciPy before timing; medians of interleaved rounds, each
round's time the best of three.
Produced with::

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_parallel_banded.py

(``--quick``: smaller sizes; ``--batched``: only the batch table, which the README's
batched-CPU table comes from, with ``--cyclic``; ``--sweep``: instead, every one-shot
implementation forced (``?gtsv``, LAPACK's loop, the scan, cyclic reduction) over bands of
3-7 diagonals, batches of 1-1000 systems and 8-256 rows: what the CPU rule of
``jaxdia._dispatch.oneshot_implementation`` was chosen from.)
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.linalg as sla  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia._kernels.band_layouts import GB  # noqa: E402


def band(n: int, width: int, batch: tuple[int, ...] = (), seed: int = 0) -> np.ndarray:
    """SciPy's ``ab`` layout (rows: offsets ``width .. -width``), diagonally dominant."""
    rng = np.random.default_rng(seed)
    ab = rng.uniform(-1, 1, (*batch, 2 * width + 1, n))
    ab[..., width, :] = 2 * (2 * width + 1)
    return ab


def as_matrix(ab: np.ndarray, width: int) -> jaxdia.DiaMatrix:
    n = ab.shape[-1]
    # SciPy's ab[u + i - j, j] == A[i, j] is DIA's data[k, j] for offset j - i = u - row.
    return jaxdia.DiaMatrix(jnp.asarray(ab), tuple(range(width, -width - 1, -1)), (n, n))


def median_times(runs: dict, rounds: int, best_of: int = 3) -> dict[str, float]:
    """The median over interleaved rounds of each run's time, a round's time the best of
    ``best_of`` timings (on a shared machine a timing that a preemption lands in is
    dropped rather than averaged in)."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    rng = np.random.default_rng(1)
    for _ in range(rounds):
        for name in rng.permutation(list(runs)):
            best = float("inf")
            for _ in range(best_of):
                start = time.perf_counter()
                runs[name]()
                best = min(best, time.perf_counter() - start)
            times[name].append(best)
    return {name: statistics.median(values) for name, values in times.items()}


def timed(runs: dict, rounds: int) -> dict[str, float]:
    """:func:`median_times` of calls repeated to at least 5 ms per timing (one call for
    the slow ones), per call."""
    repeats = {}
    for name, run in runs.items():
        run()
        start = time.perf_counter()
        run()
        repeats[name] = max(1, int(5e-3 / max(time.perf_counter() - start, 1e-7)))
    loops = {
        name: lambda run=run, k=repeats[name]: [run() for _ in range(k)]
        for name, run in runs.items()
    }
    return {name: t / repeats[name] for name, t in median_times(loops, rounds).items()}


BATCH_SHAPES = ((8, 100), (8, 1000), (8, 10_000), (64, 100), (64, 1000), (1000, 100), (1000, 1000))
BANDS = ((1, "tridiagonal"), (2, "pentadiagonal"), (3, "7-diagonal"))


def batch_problem(width: int, count: int, n: int):
    """``count`` random banded systems of ``n`` rows: the DiaMatrix, LAPACK's bands, the
    right-hand sides and SciPy's solutions (the oracle)."""
    ab = band(n, width, (count,))
    b = np.random.default_rng(2).standard_normal((count, n))
    expected = np.stack([sla.solve_banded((width, width), ab[i], b[i]) for i in range(count)])
    return as_matrix(ab, width), ab, b, expected


def batches(shapes, rounds: int, cyclic: bool) -> list[str]:
    """One row per band and ``(B, n)``: the median time per batch of each path."""
    from jaxdia._dispatch import oneshot_implementation

    rows = []
    for width, label in BANDS:
        for count, n in shapes:
            A, ab, b, expected = batch_problem(width, count, n)
            offsets, shape = A.offsets, A.shape
            data, rhs = A.data, jnp.asarray(b)

            def compiled(method: str):
                def solve(d, b):
                    A = jaxdia.DiaMatrix(d, offsets, shape)
                    return jaxdia.solve_banded(A, b, method=method)

                start = time.perf_counter()
                program = jax.jit(jax.vmap(solve)).lower(data, rhs).compile()
                return program, time.perf_counter() - start

            programs = {"jaxdia": compiled("auto")}
            if cyclic:
                programs["cyclic reduction"] = compiled("parallel")
            runs = {}
            for name, (program, _) in programs.items():
                got = np.asarray(program(data, rhs))
                assert np.abs(got - expected).max() <= 1e-10 * np.abs(expected).max(), name
                runs[name] = lambda program=program: jax.block_until_ready(program(data, rhs))
            if width == 1:
                du = jnp.asarray(np.pad(ab[:, 0, 1:], ((0, 0), (0, 1))))
                d = jnp.asarray(ab[:, 1])
                dl = jnp.asarray(np.pad(ab[:, 2, :-1], ((0, 0), (1, 0))))
                library = jax.jit(jax.lax.linalg.tridiagonal_solve)
                columns = rhs[..., None]
                got = np.asarray(library(dl, d, du, columns))[..., 0]
                assert np.abs(got - expected).max() <= 1e-10 * np.abs(expected).max()
                runs["jax"] = lambda: jax.block_until_ready(library(dl, d, du, columns))
            runs["scipy"] = lambda ab=ab, b=b, count=count, width=width: [
                sla.solve_banded((width, width), ab[i], b[i]) for i in range(count)
            ]
            median = timed(runs, rounds)
            chosen = oneshot_implementation(
                "cpu", "auto", n, (width, width), count, n * GB.band_columns((width, width))
            )

            def ms(seconds: float) -> str:
                return f"{seconds * 1e3:,.3f} ms" if seconds < 0.01 else f"{seconds * 1e3:,.1f} ms"

            jax_cells = (
                f"{ms(median['jax'])} | {median['jaxdia'] / median['jax']:.2f}"
                if "jax" in median
                else "- | -"
            )
            cyclic_cell = (
                f" {ms(median['cyclic reduction'])} ({programs['cyclic reduction'][1]:.1f} s) |"
                if cyclic
                else ""
            )
            rows.append(
                f"| {count} x {label}, n = {n:,} | {chosen} | {ms(median['jaxdia'])} "
                f"({programs['jaxdia'][1]:.1f} s) |{cyclic_cell} {jax_cells} | "
                f"{ms(median['scipy'])} | {median['jaxdia'] / median['scipy']:.2f} |"
            )
            print(rows[-1], flush=True)
    return rows


SWEEP_BATCHES = (1, 8, 64, 256, 1000)
SWEEP_ROWS = (8, 16, 32, 64, 128, 256)
#: Cyclic reduction compiles for seconds per shape: swept where it could win.
SWEEP_CYCLIC = (64, 64)  # up to this many systems of up to this many rows


def mappings() -> int:
    """The process's memory mappings (Linux; 0 elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


def sweep(rounds: int) -> None:
    """Each one-shot implementation forced on every band, batch and size of the sweep:
    the measurements ``oneshot_implementation``'s CPU rule stands on. Beside each compile
    time, the memory mappings the compiled program added."""

    chooser = jaxdia._dispatch.oneshot_implementation
    names = ("gtsv", "lapack", "scan", "parallel")
    print(
        "| band | B | n | chosen | "
        + " | ".join(f"{name} (compile, mappings)" for name in names)
        + " | SciPy loop | fastest |\n|---|---:|---:|---|"
        + "---:|" * (len(names) + 1)
        + "---|"
    )
    for width, label in BANDS:
        for count in SWEEP_BATCHES:
            for n in SWEEP_ROWS:
                A, ab, b, expected = batch_problem(width, count, n)
                offsets, shape = A.offsets, A.shape
                data, rhs = A.data, jnp.asarray(b)

                def solve(d, b):
                    return jaxdia.solve_banded(jaxdia.DiaMatrix(d, offsets, shape), b)

                runs, compiles, maps = {}, {}, {}
                for name in names:
                    if name == "gtsv" and width > 1:
                        continue
                    if name == "parallel" and (count > SWEEP_CYCLIC[0] or n > SWEEP_CYCLIC[1]):
                        continue
                    jaxdia._dispatch.oneshot_implementation = lambda *_, name=name: name
                    try:
                        start, before = time.perf_counter(), mappings()
                        program = jax.jit(jax.vmap(solve)).lower(data, rhs).compile()
                        compiles[name] = time.perf_counter() - start
                        maps[name] = mappings() - before
                    finally:
                        jaxdia._dispatch.oneshot_implementation = chooser
                    got = np.asarray(program(data, rhs))
                    assert np.abs(got - expected).max() <= 1e-10 * np.abs(expected).max(), name
                    runs[name] = lambda program=program: jax.block_until_ready(program(data, rhs))
                runs["scipy"] = lambda ab=ab, b=b, count=count, width=width: [
                    sla.solve_banded((width, width), ab[i], b[i]) for i in range(count)
                ]
                median = timed(runs, rounds)
                cells = [
                    f"{median[name] * 1e3:.3f} ms ({compiles[name]:.1f} s, {maps[name]:+})"
                    if name in median
                    else "-"
                    for name in names
                ]
                fastest = min(compiles, key=median.__getitem__)
                widths = (width, width)
                chosen = chooser("cpu", "auto", n, widths, count, n * GB.band_columns(widths))
                print(
                    f"| {label} | {count} | {n} | {chosen} | {' | '.join(cells)} | "
                    f"{median['scipy'] * 1e3:.3f} ms | {fastest} |",
                    flush=True,
                )


def forced(method: str):
    """``lu_factor(A).solve(b)``, compiled with ``method`` forced."""

    @jax.jit
    def run(A, b):
        return jaxdia.lu_factor(A, method=method).solve(b)

    return run


def single(n: int, width: int, rounds: int, scan: bool) -> str:
    ab = band(n, width, seed=3)
    b = jnp.asarray(np.random.default_rng(4).standard_normal(n))
    A = as_matrix(ab, width)
    expected = sla.solve_banded((width, width), ab, np.asarray(b))
    methods = ["parallel", "lapack"] + (["scan"] if scan else [])
    runs, compiles = {}, {}
    for method in methods:
        fn = forced(method)
        start = time.perf_counter()
        compiled = fn.lower(A, b).compile()
        compiles[method] = time.perf_counter() - start
        got = np.asarray(compiled(A, b))
        assert np.abs(got - expected).max() <= 1e-9 * np.abs(expected).max(), method
        runs[method] = lambda compiled=compiled: jax.block_until_ready(compiled(A, b))
    median = median_times(runs, rounds)
    scan_cell = (
        f"{median['scan'] * 1e3:.1f} ms | {median['scan'] / median['parallel']:.1f}x"
        if scan
        else "not run | -"
    )
    return (
        f"| n = {n:.0e}, band ({width}, {width}) | {median['lapack'] * 1e3:.2f} ms | "
        f"{median['parallel'] * 1e3:.2f} ms ({compiles['parallel']:.1f} s) | "
        f"{median['parallel'] / median['lapack']:.1f} | {scan_cell} |"
    )


def depth(n: int, width: int) -> str:
    from tests.test_lowering import while_loops

    A = as_matrix(band(n, width, seed=5), width)
    b = jnp.ones(n)

    def loops(method: str):
        factor_and_solve = lambda A, b: jaxdia.lu_factor(A, method=method).solve(b)  # noqa: E731
        return while_loops(factor_and_solve, A, b, platform="cuda")

    before, after = loops("scan"), loops("parallel")

    def describe(found):
        trips = [max(c, default=0) for c in found]
        return f"{len(found)} loops, trip counts {trips}" if found else "no loop"

    return f"| n = {n}, band ({width}, {width}) | {describe(before)} | {describe(after)} |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batched", action="store_true", help="only the batch table")
    parser.add_argument("--cyclic", action="store_true", help="also cyclic reduction forced")
    parser.add_argument("--sweep", action="store_true", help="only the CPU rule's sweep")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if args.sweep:
        sweep(args.rounds)
        return
    shapes = ((8, 100), (64, 100), (200, 200)) if args.quick else BATCH_SHAPES
    sizes = (10**4,) if args.quick else (10**5, 10**6)
    print(
        f"jax {jax.__version__}, float64, OPENBLAS_NUM_THREADS="
        f"{os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}, medians of {args.rounds} "
        "interleaved rounds (each the best of 3); time per batch (compile)\n"
    )
    cyclic = " cyclic reduction (compile) |" if args.cyclic else ""
    print(
        f"| batch | implementation | jaxdia vmap(solve_banded) (compile) |{cyclic} "
        "JAX tridiagonal_solve | jaxdia / JAX | SciPy loop | jaxdia / SciPy |\n"
        f"|---|---|---:|{'---:|' if args.cyclic else ''}---:|---:|---:|---:|"
    )
    batches(shapes, args.rounds, args.cyclic)
    if args.batched:
        return
    print(
        "\n| one system | LAPACK (host) | cyclic reduction (compile) | vs LAPACK | "
        "lax.scan LU | scan / cyclic reduction |\n|---|---:|---:|---:|---:|---:|"
    )
    for n in sizes:
        for width in (2, 10):
            print(single(n, width, args.rounds, scan=n <= 10**5))
    print("\n| program for cuda | before (lax.scan) | after (cyclic reduction) |\n|---|---|---|")
    for width in (1, 2, 10):
        print(depth(10**5, width))


if __name__ == "__main__":
    main()
