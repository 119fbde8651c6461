"""Compile time: of the products against the number of diagonals, and of the solvers.

Products (the default section): ``A @ X``, ``A.T @ X``, ``A.traces`` and the gradient
with respect to the data, for 1, 27, 200 and 1000 diagonals. Few diagonals compile to
unrolled, fused loops (one piece per diagonal, the fastest code); beyond a threshold the
products loop over the diagonals, the transpose and the traces gather, so compile time
stops growing. Each measurement jits a fresh function (no cache hit) and splits the first
call into tracing + lowering and XLA compilation; ``run`` is the median of later calls
(compiled code, for the cost of each formulation).

Solvers (``--solvers``): each case in a fresh Python process (nothing cached, as a user's
first call): ``jax.jit(f).trace(...).lower()`` and ``.compile()`` timed apart (wall and
CPU seconds of the process), the first call of the compiled program, then the median of
3 calls, the fusions of the optimized program (one compiled loop nest each: what XLA
CPU's compile time follows), and the process's peak resident memory
(``resource.getrusage``) beside its resident memory after the imports and the
operator's construction.

What the budgets bound: the **compile** column, XLA's compilation of the program that
gives the first result (wall seconds, a quiet machine), as the budgets were set: the
first multigrid-CG solve of the 2-D 1000^2 problem with the setup in the jitted call
within 2 s, 3-D 100^3 within 3 s, ``eigsh``'s within 0.5 s. The **first result** column
is what a user waits for in all, in a fresh process after the imports and the problem's
construction: trace + lower, compile and the first run (wall and CPU seconds). The
``*_call`` cases are eager calls (no ``jax.jit`` around them, as a port calls): their
first result is the first call's, its trace and compile the sums of JAX's compile events
(``jax.monitoring``) during it, its first run the rest (the run, checks on the host,
transfers), and ``run`` the median of later calls.

Cases: multigrid-CG on the 2-D 1000^2 and
3-D 100^3 Poisson problems (setup in the call), ``eigsh`` of the harmonic oscillator
(n = 2048, k = 20, ``which="SA"``), and ``expm_multiply`` of ``-i H`` for the
transverse-field Ising chain of 10, 12 and 14 sites built with ``jaxdia.kron``
(offsets ``0, +-2^k``), at ``t = 1`` and on 101 times in ``[0, 5]``, against SciPy's
``expm_multiply`` on the same operator (CSR) in the same process.

Products of two DIA matrices (``--products``): ``A @ B`` against the number of
diagonals (3-103 in a contiguous band, and the 2-D stencil offsets ``-N, -1, 0, 1, N``)
at n = 300, 1e4 and 1e6 in float64 and float32, beside the form it had before, one
static slice per pair of diagonals (``unrolled_product`` below, measured in the same
run, interleaved); ``A.T @ A`` at n = 300; and the least-squares solve of a tall banded
problem whose band drifts across 13-103 diagonals through lineax's
``jaxdia.BandedSolver`` (the target: at most 3 s of compilation at 103 diagonals),
beside NumPy's dense ``lstsq`` on the same problem.

With ``--profile`` the solver cases report instead where XLA's compile time goes: its
phases as ``jax.profiler`` records them (HLO passes, the fusion emitters, LLVM's code
generation; summed over XLA's threads) and the number of fusions in the optimized
program, one compiled loop nest each, which is what the time follows.

The multigrid cases run twice: with the setup inside the jitted call, and as a port
does, ``M = jaxdia.multigrid(A, grid)`` first (eager: on the host for a concrete ``A``)
and the jitted solve taking ``M`` as an argument.

Solves against n (``--solves-vs-n``): on the present platform (a TPU, a GPU or the
CPU), float32, x64 off (as on an accelerator), each case in a fresh process with a
timeout: seconds of trace + lower and of XLA's compile (nothing runs: the arguments are
``jax.ShapeDtypeStruct``s, so n = 1e7 allocates nothing), the StableHLO's lines and
bytes, its largest dense constant (elements) and the compiled program's bytes, for
``solve_banded``, ``lu_factor`` + solve, ``cho_factor`` + solve, ``slogdet`` and its
gradient, ``selected_inverse``, a periodic ``solve_banded`` (corners ``+-(n - 1)``), the
BDF integration of ``solve_ivp`` (the Jacobian, the factor of ``I - c J`` and the loop:
one program) and multigrid-CG on the 2-D Poisson problem of side ``sqrt(n)`` (setup in the
call; ``multigrid_M``: ``M`` an argument), at ``--sizes`` n and ``--band-diagonals``
diagonals (multigrid: its 5-point stencil only), with the compiled program's generated
code and temporaries (``memory_analysis()``); ``--profile`` adds the compiler's four
slowest events. A program whose size, code, temporaries or compile time grow with n
beyond the ``log2 n`` levels of a reduction is the bug this table shows. With
``--platform tpu`` (or ``cuda``, ``cpu``) the programs are lowered for that platform from
this machine and not compiled: trace + lower seconds, the StableHLO's size and its
largest constant, what ``tests/test_program_size.py`` bounds.
Rows go to ``--markdown FILE`` as each case ends, so a killed run keeps them.

Usage::

    python benchmarks/bench_compile.py [--n 2000] [--markdown FILE]
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_compile.py --solvers [--markdown FILE]
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_compile.py --solvers --profile
    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_compile.py --products [--markdown FILE]
    python benchmarks/bench_compile.py --solves-vs-n [--sizes 1e3,1e6] \
        [--band-diagonals 3,21] [--cases solve_banded,lu] [--timeout 300] \
        [--platform tpu] [--markdown FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import jaxdia  # noqa: E402

jax.config.update("jax_enable_x64", True)

DIAGONALS = (1, 27, 200, 1000)


def programs(offsets):
    """A new function object each call, so jit's cache never hits."""
    return {
        "A @ X": lambda A, X: A @ X,
        "A.T @ X": lambda A, X: A.T @ X,
        "A.traces(all)": lambda A, X: A.traces(list(offsets)),
        "grad wrt data": jax.grad(lambda A, X: jnp.sum(A @ X).real),
    }


def measure(fn, A, X):
    t0 = time.perf_counter()
    lowered = jax.jit(fn).trace(A, X).lower()
    t1 = time.perf_counter()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    jax.block_until_ready(compiled(A, X))
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        jax.block_until_ready(compiled(A, X))
        runs.append(time.perf_counter() - t)
    return t1 - t0, t2 - t1, statistics.median(runs)


# -- solvers, each in a fresh process ---------------------------------------------------------

#: case name -> (description, budget in seconds of compile, peak memory budget in MB or None)
SOLVER_CASES = {
    "multigrid_2d": ("multigrid-CG, 2-D Poisson 1000^2, setup in the call", 2.0, None),
    "multigrid_3d": ("multigrid-CG, 3-D Poisson 100^3, setup in the call", 3.0, None),
    "multigrid_2d_eager": ("multigrid-CG, 2-D Poisson 1000^2, M built before", 2.0, None),
    "multigrid_3d_eager": ("multigrid-CG, 3-D Poisson 100^3, M built before", 3.0, None),
    "eigsh": ("eigsh, oscillator n = 2048, k = 20, 'SA'", 0.5, None),
    "eigsh_call": ("eigsh, oscillator n = 2048, k = 20, 'SA', eager call", 0.5, None),
    **{
        f"expm_{sites}{grid}": (
            f"expm_multiply, Ising chain {sites} sites, " + ("101 times" if grid else "t = 1"),
            3.0 if sites == 12 else None,
            300 if sites == 12 else None,
        )
        for sites in (10, 12, 14)
        for grid in ("", "_grid")
    },
}


def ising_chain(sites: int, field: float = 1.0):
    """``H = -sum Z_i Z_(i+1) - field sum X_i`` on an open chain, built with
    ``jaxdia.kron`` as a port would (and with ``scipy.sparse.kron`` for SciPy)."""
    X, Z = np.array([[0.0, 1.0], [1.0, 0.0]]), np.array([[1.0, 0.0], [0.0, -1.0]])

    def build(kron, eye, X, Z):
        def site(op, i):
            return kron(kron(eye(2**i), op), eye(2 ** (sites - i - 1)))

        H = -field * site(X, 0)
        for i in range(1, sites):
            H = H - field * site(X, i)
        for i in range(sites - 1):
            H = H - site(Z, i) @ site(Z, i + 1)
        return H

    import scipy.sparse as sp

    ours = build(
        jaxdia.kron, jaxdia.eye, jaxdia.DiaMatrix.from_dense(X), jaxdia.DiaMatrix.from_dense(Z)
    )
    theirs = build(
        lambda a, b: sp.kron(a, b, format="csr"), sp.eye_array, sp.csr_array(X), sp.csr_array(Z)
    )
    return ours, theirs


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _problem(case: str):
    """``(f, args, reference)``: the jitted function's body, its arguments, and SciPy's
    call on the same problem (or None)."""
    import scipy.sparse as sp
    import scipy.sparse.linalg as spla

    if case.startswith("multigrid"):
        from pyamg.gallery import poisson

        grid = (1000, 1000) if "_2d" in case else (100, 100, 100)
        A = jaxdia.DiaMatrix.from_scipy(poisson(grid, format="dia"))
        b = jnp.asarray(np.random.default_rng(0).standard_normal(A.shape[0]))
        if case.endswith("eager"):  # as a port does: M = multigrid(A, grid), then solves
            start = time.perf_counter()
            M = jax.block_until_ready(jaxdia.multigrid(A, grid))
            SETUP["eager_setup"] = time.perf_counter() - start
            return (lambda A, M, b: jaxdia.cg(A, b, M=M, rtol=1e-8, maxiter=1000)), (A, M, b), None

        def solve(A, b):
            return jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid), rtol=1e-8, maxiter=1000)

        return solve, (A, b), None
    if case.startswith("eigsh"):
        n = 2048
        x = np.linspace(-10, 10, n)
        dx = x[1] - x[0]
        off = np.full(n - 1, -0.5 / dx**2)
        S = sp.diags_array([off, 1 / dx**2 + x**2 / 2, off], offsets=[-1, 0, 1]).todia()
        A = jaxdia.DiaMatrix.from_scipy(S)
        return (
            lambda A: jaxdia.eigsh(A, k=20, which="SA"),
            (A,),
            lambda: spla.eigsh(S, k=20, which="SA"),
        )
    sites = int(case.split("_")[1])
    grid = dict(start=0.0, stop=5.0, num=101) if case.endswith("grid") else {}
    H, S = ising_chain(sites)
    psi = np.zeros(2**sites, complex)
    psi[0] = 1
    A, SA = -1j * H, (-1j * S).tocsr()
    return (
        lambda A, psi: jaxdia.expm_multiply(A, psi, **grid),
        (A, jnp.asarray(psi)),
        lambda: spla.expm_multiply(SA, psi, **grid),
    )


#: What a case measured before the timed compilation (the eager setup of ``M``).
SETUP: dict = {}

#: XLA's compile phases as the profiler names them: (column, event name prefix).
PHASES = (
    ("HLO passes", "HLO passes "),
    ("fusion emitters", "FusionCompiler::Compile"),
    ("LLVM codegen", "JitCompiler::Compile"),
)


def compile_profiled(lowered) -> tuple[object, dict]:
    """``lowered.compile()`` under ``jax.profiler.trace``: the executable and the
    seconds of each of XLA's :data:`PHASES` (summed over its threads)."""
    import glob
    import gzip
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        with jax.profiler.trace(directory):
            compiled = lowered.compile()
        (path,) = glob.glob(f"{directory}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
    phases = dict.fromkeys((column for column, _ in PHASES), 0.0)
    for event in events:
        for column, prefix in PHASES:
            if event.get("ph") == "X" and event["name"].startswith(prefix):
                phases[column] += event["dur"] / 1e6
    return compiled, phases


def run_call(f, args) -> dict:
    """An eager case: the first call of ``f(*args)`` (wall and CPU), JAX's trace and
    compile events during it (wall), and the median of 3 later calls."""
    events: dict[str, float] = {"trace": 0.0, "compile": 0.0}
    names = {  # JAX's duration events (jax/_src/dispatch.py)
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "trace",
        "/jax/core/compile/backend_compile_duration": "compile",
    }

    def listen(event: str, duration: float, **_) -> None:
        if event in names:
            events[names[event]] += duration

    jax.monitoring.register_event_duration_secs_listener(listen)
    cpu, wall = time.process_time(), time.perf_counter()
    jax.block_until_ready(f(*args))
    first_cpu, first_wall = time.process_time() - cpu, time.perf_counter() - wall
    result = {
        "lower_wall": events["trace"],
        "compile_wall": events["compile"],
        "first_run_wall": first_wall - events["trace"] - events["compile"],
        "first_wall": first_wall,
        "first_cpu": first_cpu,
    }
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(f(*args))
        runs.append(time.perf_counter() - start)
    result["run"] = statistics.median(runs)
    return result


def run_case(case: str, profile: bool = False) -> dict:
    """One solver case, measured in this (fresh) process (``profile``: XLA's phases, the
    compile time then includes the profiler's own)."""
    f, args, reference = _problem(case)
    jax.block_until_ready(args)
    baseline = _rss_mb()
    if case.endswith("_call"):
        result = run_call(f, args)
        result.update(baseline_mb=baseline, peak_mb=_rss_mb())
        _time_reference(result, reference)
        return result
    cpu, wall = time.process_time(), time.perf_counter()
    lowered = jax.jit(f).trace(*args).lower()
    lower_cpu, lower_wall = time.process_time() - cpu, time.perf_counter() - wall
    cpu, wall = time.process_time(), time.perf_counter()
    compiled, phases = compile_profiled(lowered) if profile else (lowered.compile(), {})
    compile_cpu, compile_wall = time.process_time() - cpu, time.perf_counter() - wall
    peak = _rss_mb()
    cpu, wall = time.process_time(), time.perf_counter()
    jax.block_until_ready(compiled(*args))
    run_cpu, run_wall = time.process_time() - cpu, time.perf_counter() - wall
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        runs.append(time.perf_counter() - start)
    result = {
        "lower_wall": lower_wall,
        "lower_cpu": lower_cpu,
        "compile_wall": compile_wall,
        "compile_cpu": compile_cpu,
        "first_run_wall": run_wall,
        "first_wall": lower_wall + compile_wall + run_wall,
        "first_cpu": lower_cpu + compile_cpu + run_cpu,
        "fusions": compiled.as_text().count(" fusion("),
        "run": statistics.median(runs),
        "baseline_mb": baseline,
        "peak_mb": peak,
        **SETUP,
    }
    if profile:
        result["phases"] = phases
    _time_reference(result, reference)
    return result


def _time_reference(result: dict, reference) -> None:
    """SciPy's median time of 3 calls of the same problem, into ``result``."""
    if reference is not None:
        reference()
        times = []
        for _ in range(3):
            start = time.perf_counter()
            reference()
            times.append(time.perf_counter() - start)
        result["scipy"] = statistics.median(times)


def solver_table(cases, profile: bool = False) -> list[str]:
    lines = [
        f"jax {jax.__version__}, {os.cpu_count()} cores, float64/complex128; one fresh "
        "process per case. Seconds; peak: the process's peak resident memory (after "
        "compiling; 'base': after the imports and the operator's construction). "
        "'M built before': `jaxdia.multigrid(A, grid)` called eagerly (its wall time in "
        "brackets after the case), then the jitted CG with `M` as an argument. The budgets "
        "bound the compile column (wall, quiet machine); first result: trace + lower, "
        "compile and the first run, wall / CPU ('call' cases: an eager first call, its "
        "CPU time only in all).",
        "",
        "| case | trace + lower | compile (wall / CPU) | budget | first run | first result "
        "(wall / CPU) | fusions | run | SciPy | peak MB (base) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    if profile:
        lines = [
            f"jax {jax.__version__}, {os.cpu_count()} cores; one fresh process per case. "
            "Seconds of XLA's compile phases as `jax.profiler` records them, summed over "
            "XLA's threads (so more than the wall time), and the fusions (one compiled "
            "loop nest each) of the optimized program.",
            "",
            "| case | compile (wall) | "
            + " | ".join(column for column, _ in PHASES)
            + " | fusions |",
            "|---|---:|" + "---:|" * len(PHASES) + "---:|",
        ]
    print("\n".join(lines), flush=True)
    for case in cases:
        name, budget, memory = SOLVER_CASES[case]
        output = subprocess.run(
            [sys.executable, __file__, "--case", case] + (["--profile"] if profile else []),
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        ).stdout
        r = json.loads(output.strip().splitlines()[-1])
        if "eager_setup" in r:
            name += f" ({r['eager_setup']:.2f})"
        if profile:
            phases = " | ".join(f"{r['phases'][column]:.2f}" for column, _ in PHASES)
            lines.append(f"| {name} | {r['compile_wall']:.2f} | {phases} | {r['fusions']} |")
            print(lines[-1], flush=True)
            continue
        scipy_time = f"{r['scipy']:.3f}" if "scipy" in r else "-"
        budget_text = f"<= {budget:g}" if budget else "-"
        if memory:
            budget_text += f", <= {memory} MB"
        compile_cpu = f"{r['compile_cpu']:.2f}" if "compile_cpu" in r else "-"
        lines.append(
            f"| {name} | {r['lower_wall']:.2f} | {r['compile_wall']:.2f} / {compile_cpu} | "
            f"{budget_text} | {r['first_run_wall']:.2f} | {r['first_wall']:.2f} / "
            f"{r['first_cpu']:.2f} | {r.get('fusions', '-')} | {r['run']:.3f} | {scipy_time} | "
            f"{r['peak_mb']:.0f} ({r['baseline_mb']:.0f}) |"
        )
        print(lines[-1], flush=True)
    return lines


# -- products of DIA matrices (--products) ----------------------------------------------------

#: Diagonals of the contiguous bands of ``A @ B``; None: the 2-D stencil ``-N, -1, 0, 1, N``.
PRODUCT_DIAGONALS = (3, 5, 13, 27, 53, 103, None)
PRODUCT_SIZES = (300, 10_000, 1_000_000)
#: The unrolled reference compiles for minutes beyond this many diagonals (n = 1e6: 27).
UNROLLED_MAX = 53
#: Diagonals of the drifting least-squares problems (lineax's BandedSolver).
LSTSQ_DIAGONALS = (13, 23, 33, 53, 103)


def unrolled_product(A, B):
    """``A @ B`` as jaxdia computed it before: one static slice per pair of diagonals,
    each result diagonal the sum of its pairs' padded rows (the program grows with the
    pairs)."""
    import functools

    (m, n), p = A.shape, B.shape[1]
    dtype = jnp.result_type(A.dtype, B.dtype)
    wide = jnp.float32 if dtype.itemsize <= 2 else dtype
    terms = {}
    for ia, a in enumerate(A.offsets):
        for ib, b in enumerate(B.offsets):
            c = a + b
            low, high = max(0, c, b), min(p, m + c, n + b)
            if low < high:
                product = A.data[ia, low - b : high - b].astype(wide) * B.data[ib, low:high].astype(
                    wide
                )
                terms.setdefault(c, []).append(jnp.pad(product, (low, p - high)))
    offsets = tuple(sorted(terms))
    rows = [functools.reduce(jnp.add, terms[c]).astype(dtype) for c in offsets]
    return jaxdia.DiaMatrix(jnp.stack(rows), offsets, (m, p))


def _compiled(fn, *args):
    """``(compiled, trace + lower s, compile s, StableHLO lines)`` of a fresh ``jax.jit``."""
    start = time.perf_counter()
    lowered = jax.jit(fn).trace(*args).lower()
    traced = time.perf_counter()
    compiled = lowered.compile()
    return (
        compiled,
        traced - start,
        time.perf_counter() - traced,
        len(lowered.as_text().splitlines()),
    )


def _interleaved_ms(calls, *args, budget=2.0):
    """Median wall ms of each compiled call, the calls alternating round by round (so a
    change of the machine's load hits all alike); at least 3 rounds, up to ``budget``
    seconds."""
    for call in calls:
        jax.block_until_ready(call(*args))
    times = [[] for _ in calls]
    spent = 0.0
    while len(times[0]) < 3 or (spent < budget and len(times[0]) < 100):
        for call, kept in zip(calls, times):
            start = time.perf_counter()
            jax.block_until_ready(call(*args))
            kept.append(time.perf_counter() - start)
            spent += kept[-1]
    return [1e3 * statistics.median(kept) for kept in times]


def product_rows(sizes, dtypes=(np.float64, np.float32)):
    """The ``A @ B`` table: jaxdia's product and the unrolled reference."""
    rng = np.random.default_rng(0)
    lines = [
        f"jax {jax.__version__}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}. "
        "`A @ B` of two n x n DIA matrices under `jax.jit`: trace + lower and XLA compile "
        "in seconds, StableHLO lines, run in ms (median, the two forms interleaved); "
        "'unrolled': one static slice per pair of diagonals, the form before.",
        "",
        "| dtype | n | diagonals | pairs | compile (trace + XLA) | lines | run ms "
        "| unrolled compile | unrolled lines | unrolled run ms | run / unrolled |",
        "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for dtype in dtypes:
        for n in sizes:
            for count in PRODUCT_DIAGONALS:
                if count is not None and n >= 1_000_000 and count > 53:
                    continue  # 2.5 GB and tens of seconds a call
                if count is None:
                    side = int(round(n**0.5))
                    offsets, name = (-side, -1, 0, 1, side), f"stencil +-1, +-{side}"
                else:
                    offsets = tuple(range(-(count // 2), count - count // 2))
                    name = f"band {count}"
                A, B = (
                    jaxdia.DiaMatrix(
                        rng.standard_normal((len(offsets), n)).astype(dtype), offsets, (n, n)
                    )
                    for _ in range(2)
                )
                ours, lower, compile_, size = _compiled(lambda A, B: A @ B, A, B)
                calls = [ours]
                limit = 27 if n >= 1_000_000 else UNROLLED_MAX
                reference = "| - | - | - | - |"
                if len(offsets) <= limit:
                    theirs, lower2, compile2, size2 = _compiled(unrolled_product, A, B)
                    calls.append(theirs)
                run = _interleaved_ms(calls, A, B)
                if len(calls) == 2:
                    reference = (
                        f"| {lower2 + compile2:.2f} | {size2} | {run[1]:.3f} "
                        f"| {run[0] / run[1]:.2f} |"
                    )
                lines.append(
                    f"| {np.dtype(dtype).name} | {n} | {name} | {len(offsets) ** 2} "
                    f"| {lower + compile_:.2f} | {size} | {run[0]:.3f} {reference}"
                )
                print(lines[-1], flush=True)
    return lines


def transpose_product_rows(n=300):
    """``A.T @ A`` of an n x n band (the issue's measure): compile seconds and lines."""
    lines = [
        "",
        f"`A.T @ A`, n = {n}, float64: trace + compile seconds and StableHLO lines, "
        "jaxdia's against the unrolled reference.",
        "",
        "| diagonals | compile | lines | unrolled compile | unrolled lines |",
        "|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for count in (5, 13, 27, 53, 103):
        offsets = tuple(range(-(count // 2), count - count // 2))
        A = jaxdia.DiaMatrix(np.ones((count, n)), offsets, (n, n))
        _, lower, compile_, size = _compiled(lambda A: A.T @ A, A)
        reference = "- | - |"
        if count <= UNROLLED_MAX:
            _, lower2, compile2, size2 = _compiled(lambda A: unrolled_product(A.T, A), A)
            reference = f"{lower2 + compile2:.2f} | {size2} |"
        lines.append(f"| {count} | {lower + compile_:.2f} | {size} | {reference}")
        print(lines[-1], flush=True)
    return lines


def drifting_problem(count, n=200):
    """A tall banded least-squares problem: ``m = n + count - 3`` observations, each
    seeing 3 neighbouring unknowns, so that its DIA band drifts across about ``count``
    diagonals; the dense matrix and a right-hand side too."""
    m = n + count - 3
    rows = np.arange(m)
    first = (rows * (n - 3)) // (m - 1)
    dense = np.zeros((m, n))
    rng = np.random.default_rng(count)
    for t in range(3):
        dense[rows, first + t] = rng.standard_normal(m) + 2
    return jaxdia.DiaMatrix.from_dense(dense), dense, rng.standard_normal(m)


def least_squares_rows():
    """The least-squares solve through lineax (``BandedSolver``) and ``lstsq_banded``:
    compile wall and CPU seconds, lines, run ms, beside NumPy's dense ``lstsq``."""
    import lineax as lx

    lines = [
        "",
        "Least squares of a 200-unknown problem whose band drifts across the diagonals "
        "(float64): `lx.linear_solve(DiaLinearOperator(A), b, BandedSolver())` and "
        "`jaxdia.lstsq_banded` under `jax.jit`, seconds (XLA compile: wall / CPU of the "
        "process), StableHLO lines, run ms; NumPy's dense `lstsq` on the same problem.",
        "",
        "| diagonals | lineax trace + lower | lineax compile (wall / CPU) | lines | run ms "
        "| lstsq_banded compile | NumPy ms | max error |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for count in LSTSQ_DIAGONALS:
        A, dense, b = drifting_problem(count)
        b = jnp.asarray(b)

        def solve(A, b):
            return lx.linear_solve(jaxdia.DiaLinearOperator(A), b, jaxdia.BandedSolver()).value

        start, cpu = time.perf_counter(), time.process_time()
        lowered = jax.jit(solve).trace(A, b).lower()
        lower = time.perf_counter() - start
        start, cpu = time.perf_counter(), time.process_time()
        compiled = lowered.compile()
        compile_, compile_cpu = time.perf_counter() - start, time.process_time() - cpu
        _, lower2, compile2, _ = _compiled(jaxdia.lstsq_banded, A, b)
        (run,) = _interleaved_ms([compiled], A, b, budget=1.0)
        reference = np.linalg.lstsq(dense, np.asarray(b), rcond=None)[0]
        timings = []
        for _ in range(5):
            start = time.perf_counter()
            np.linalg.lstsq(dense, np.asarray(b), rcond=None)
            timings.append(time.perf_counter() - start)
        error = float(np.max(np.abs(np.asarray(compiled(A, b)) - reference)))
        lines.append(
            f"| {A.n_diags} | {lower:.2f} | {compile_:.2f} / {compile_cpu:.2f} "
            f"| {len(lowered.as_text().splitlines())} | {run:.2f} | {lower2 + compile2:.2f} "
            f"| {1e3 * statistics.median(timings):.2f} | {error:.1e} |"
        )
        print(lines[-1], flush=True)
    return lines


def products_section(sizes):
    return product_rows(sizes) + transpose_product_rows() + least_squares_rows()


# -- solves against n, each case in a fresh process -------------------------------------------

#: case name -> description; ``multigrid*`` take no number of diagonals.
SOLVE_CASES = {
    "solve_banded": "`solve_banded(A, b)`",
    "lu": "`lu_factor(A).solve(b)`",
    "cho": "`cho_factor(A).solve(b)`",
    "slogdet": "`slogdet(A)`",
    "grad_slogdet": "`grad` of `slogdet(A)[1]`",
    "selected_inverse": "`selected_inverse(A)`",
    "periodic": "`solve_banded(A, b)`, corners `+-(n - 1)` too",
    "bdf": "`solve_ivp(f, ..., jac_offsets)` (BDF)",
    "multigrid": "multigrid-CG, setup in the call",
    "multigrid_M": "multigrid-CG, `M` an argument",
}
SIZES = (1e3, 1e4, 1e5, 1e6, 1e7)
BAND_DIAGONALS = (3, 5, 11, 21)


def _largest_constant(lowered) -> int:
    """Elements of the largest dense (not splat) constant of a lowered program."""
    from jax.interpreters.mlir import ir

    largest = 0

    def walk(operation) -> None:
        nonlocal largest
        for region in operation.regions:
            for block in region.blocks:
                for op in block.operations:
                    if op.operation.name == "stablehlo.constant":
                        value = ir.DenseElementsAttr(op.operation.attributes["value"])
                        if not value.is_splat:
                            shape = ir.RankedTensorType(value.type).shape
                            largest = max(largest, int(np.prod(shape, dtype=np.int64)))
                    walk(op.operation)

    walk(lowered.compiler_ir("stablehlo").operation)
    return largest


def _solve_problem(case: str, n: int, diagonals: int):
    """``(f, args)`` of a case: abstract arguments (``jax.ShapeDtypeStruct``s)."""
    dtype = np.float32
    if case.startswith("multigrid"):
        side = max(round(n**0.5), 4)
        size = side * side
        offsets = (-side, -1, 0, 1, side)
        A = jax.eval_shape(
            lambda d: jaxdia.DiaMatrix(d, offsets, (size, size)),
            jax.ShapeDtypeStruct((5, size), dtype),
        )
        b = jax.ShapeDtypeStruct((size,), dtype)
        grid = (side, side)
        if case == "multigrid":
            return (lambda A, b: jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid), maxiter=1000)), (A, b)
        M = jax.eval_shape(lambda A: jaxdia.multigrid(A, grid), A)
        return (lambda A, M, b: jaxdia.cg(A, b, M=M, maxiter=1000)), (A, M, b)
    offsets = tuple(range(-(diagonals // 2), diagonals - diagonals // 2))
    if case == "periodic":
        offsets = (-(n - 1), *offsets, n - 1)
    A = jax.eval_shape(
        lambda d: jaxdia.DiaMatrix(d, offsets, (n, n)),
        jax.ShapeDtypeStruct((len(offsets), n), dtype),
    )
    b = jax.ShapeDtypeStruct((n,), dtype)
    if case in ("solve_banded", "periodic"):
        return jaxdia.solve_banded, (A, b)
    if case == "lu":
        return (lambda A, b: jaxdia.lu_factor(A).solve(b)), (A, b)
    if case == "cho":
        return (lambda A, b: jaxdia.cho_factor(A).solve(b)), (A, b)
    if case == "slogdet":
        return jaxdia.slogdet, (A,)
    if case == "grad_slogdet":
        return jax.grad(lambda A: jaxdia.slogdet(A)[1]), (A,)
    if case == "selected_inverse":
        return (lambda A: jaxdia.selected_inverse(A).data), (A,)
    if case == "bdf":

        def fun(t, y):  # a stencil of these offsets: y' = -2 y + mean of the neighbours
            before = max(-offsets[0], 0)
            padded = jnp.pad(y, (before, max(offsets[-1], 0)))
            near = [padded[before + o : before + o + n] for o in offsets if o]  # y[i + o]
            return -2.0 * y + sum(near) / max(len(near), 1)

        def integrate(y0):
            return jaxdia.solve_ivp(fun, (0.0, 1.0), y0, jac_offsets=offsets).y

        return integrate, (b,)
    raise ValueError(f"unknown case {case!r}")


#: An abstract device for lowering to a GPU this machine lacks (``--platform cuda``).
ABSTRACT_GPU = "NVIDIA H100"


def _lower(f, args, platform: str | None):
    """``jax.jit(f)`` traced and lowered, for ``platform`` (tracing chooses what that
    platform runs: ``jaxdia._dispatch.default_platform`` patched) or the present one."""
    if platform is None:
        return jax.jit(f).trace(*args).lower()
    from jaxdia import _dispatch

    _dispatch.default_platform = lambda: "gpu" if platform == "cuda" else platform
    context = contextlib.nullcontext()
    if platform == "cuda" and jax.default_backend() != "gpu":
        device = jax.sharding.AbstractDevice(
            device_kind=ABSTRACT_GPU, num_cores=None, platform=platform
        )
        context = jax.sharding.use_abstract_mesh(
            jax.sharding.AbstractMesh((), (), abstract_device=device)
        )
    with context:
        return jax.jit(f).trace(*args).lower(lowering_platforms=(platform,))


def run_solve_case(
    case: str, n: int, diagonals: int, profile: bool = False, platform: str | None = None
) -> dict:
    """One case of the solves-against-n table, measured in this (fresh) process; with
    ``platform`` (another than the present one) lowered for it and not compiled."""
    jax.config.update("jax_enable_x64", False)
    f, args = _solve_problem(case, n, diagonals)
    cpu, wall = time.process_time(), time.perf_counter()
    lowered = _lower(f, args, platform)
    lower_cpu, lower_wall = time.process_time() - cpu, time.perf_counter() - wall
    text = lowered.as_text()
    result = {
        "lower_wall": lower_wall,
        "lower_cpu": lower_cpu,
        "lines": text.count("\n"),
        "bytes": len(text),
        "largest_constant": _largest_constant(lowered),
        "phases": [],
    }
    if platform is not None:
        return result
    cpu, wall = time.process_time(), time.perf_counter()
    compiled, phases = compile_phases(lowered) if profile else (lowered.compile(), [])
    compile_cpu, compile_wall = time.process_time() - cpu, time.perf_counter() - wall
    memory = compiled.memory_analysis()
    return result | {
        "compile_wall": compile_wall,
        "compile_cpu": compile_cpu,
        "compiled_bytes": len(compiled.as_text() or ""),
        "code_bytes": getattr(memory, "generated_code_size_in_bytes", -1),
        "temp_bytes": getattr(memory, "temp_size_in_bytes", -1),
        "phases": phases,
    }


def compile_phases(lowered, count: int = 4) -> tuple[jax.stages.Compiled, list]:
    """``lowered.compile()`` under ``jax.profiler.trace``: the executable and the
    ``count`` events of the compiler that took longest in all, ``(name, seconds)``
    (whatever the platform's compiler names them; summed over its threads)."""
    import collections
    import glob
    import gzip
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        with jax.profiler.trace(directory):
            compiled = lowered.compile()
        (path,) = glob.glob(f"{directory}/**/*.trace.json.gz", recursive=True)
        with gzip.open(path) as f:
            events = json.load(f)["traceEvents"]
    totals = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and "compile" not in event["name"].lower():
            totals[event["name"][:60]] += event["dur"] / 1e6
    return compiled, totals.most_common(count)


def _number_list(text: str, kind=float) -> list:
    return [kind(float(item)) for item in text.split(",") if item]


def _solve_row(case: str, diagonals: str, n: int, r: dict, lowered_only: bool) -> str:
    start = f"| {case} | {diagonals} | {n:.0e} | {r['lower_wall']:.2f} ({r['lower_cpu']:.2f}) |"
    sizes = f" {r['lines']} | {r['bytes'] / 1024:.0f} | {r['largest_constant']} |"
    if lowered_only:
        return start + sizes
    return (
        f"{start} {r['compile_wall']:.2f} ({r['compile_cpu']:.2f}) |{sizes} "
        f"{r['compiled_bytes'] / 1024:.0f} | {r['code_bytes'] / 2**20:.1f} | "
        f"{r['temp_bytes'] / 2**20:.1f} |"
    )


_PLATFORM_LINE = (
    "import jax; print(f'platform {jax.default_backend()} ({jax.devices()[0].device_kind})')"
)


def _failure(stderr: str) -> str:
    """The exception's line of a failed case's ``stderr`` (JAX's note on its filtered
    traceback comes after it), else its last line."""
    lines = stderr.strip().splitlines() or ["?"]
    raised = [line for line in lines if re.match(r"^[\w.]+(Error|Exception)\b", line)]
    return (raised or lines)[-1][:160]


def solves_vs_n(
    cases,
    sizes,
    diagonal_counts,
    timeout: float,
    markdown: str | None,
    profile: bool = False,
    platform: str | None = None,
) -> None:
    """The solves-against-n table: one fresh process per case, each row printed (and
    appended to ``markdown``) as it ends; with ``platform``, lowered for it only."""
    # Asked in a process of its own: a TPU is held by one process at a time, so this one
    # must not open it before the cases' processes do.
    where = (
        f"lowered for {platform} (not compiled)"
        if platform
        else subprocess.run(
            [sys.executable, "-c", _PLATFORM_LINE], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    header = [
        f"jax {jax.__version__}, {where}, float32, x64 off, load "
        f"{os.getloadavg()[0]:.1f}; one fresh process per case, timeout {timeout:g} s. "
        "Seconds (wall; CPU seconds of the process in brackets); StableHLO lines and KB; "
        "the largest dense constant in elements"
        + (
            "."
            if platform
            else "; the compiled program's text in KB, its generated code and temporaries "
            "in MB (`memory_analysis()`)."
        ),
        "",
    ]
    if platform:
        header += [
            "| case | diagonals | n | trace + lower | StableHLO lines | KB | largest constant |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
    else:
        header += [
            "| case | diagonals | n | trace + lower | compile | StableHLO lines | KB | "
            "largest constant | compiled KB | code MB | temp MB |"
            + (" slowest phases |" if profile else ""),
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---|" if profile else ""),
        ]
    columns = header[-1].count("|") - 1
    print("\n".join(header), flush=True)
    if markdown:
        with open(markdown, "w") as f:
            f.write("\n".join(header) + "\n")
    for case in cases:
        counts = ["5"] if case.startswith("multigrid") else diagonal_counts
        for diagonals in counts:
            for n in sizes:
                command = [sys.executable, __file__, "--solve-case", f"{case}:{n}:{diagonals}"]
                command += ["--profile"] if profile else []
                command += ["--platform", platform] if platform else []
                environment = {**os.environ, "OPENBLAS_NUM_THREADS": "1"}
                blank = " |" * (columns - 4)
                try:
                    output = subprocess.run(
                        command, capture_output=True, text=True, timeout=timeout, env=environment
                    )
                except subprocess.TimeoutExpired:
                    row = f"| {case} | {diagonals} | {n:.0e} | timeout (> {timeout:g} s) |{blank}"
                else:
                    if output.returncode:
                        reason = _failure(output.stderr)
                        row = f"| {case} | {diagonals} | {n:.0e} | failed: {reason} |{blank}"
                    else:
                        r = json.loads(output.stdout.strip().splitlines()[-1])
                        row = _solve_row(case, diagonals, n, r, platform is not None)
                        if profile and not platform:
                            phases = ", ".join(f"{name} {t:.1f}" for name, t in r["phases"])
                            row += f" {phases} |"
                print(row, flush=True)
                if markdown:
                    with open(markdown, "a") as f:
                        f.write(row + "\n")


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--markdown", default=None)
    p.add_argument("--solvers", nargs="*", default=None, help="solver cases (all if none)")
    p.add_argument(
        "--profile",
        action="store_true",
        help="with --solvers: XLA's compile phases, fusions; with --solves-vs-n: the "
        "compiler's slowest events",
    )
    p.add_argument("--case", default=None, help=argparse.SUPPRESS)  # one, in this process
    p.add_argument(
        "--products", action="store_true", help="A @ B, A.T @ A, least squares vs diagonals"
    )
    p.add_argument(
        "--product-sizes", type=int, nargs="*", default=list(PRODUCT_SIZES), help="with --products"
    )
    p.add_argument("--solves-vs-n", action="store_true", help="the solves' compile time against n")
    p.add_argument("--sizes", default=",".join(f"{n:g}" for n in SIZES), help="n, e.g. 1e3,1e6")
    p.add_argument(
        "--band-diagonals",
        default=",".join(map(str, BAND_DIAGONALS)),
        help="numbers of diagonals of the solves' bands, e.g. 3,21",
    )
    p.add_argument("--cases", default=",".join(SOLVE_CASES), help="of " + ", ".join(SOLVE_CASES))
    p.add_argument("--timeout", type=float, default=600, help="seconds per case")
    p.add_argument(
        "--platform",
        default=None,
        choices=("cpu", "tpu", "cuda"),
        help="with --solves-vs-n: lower for this platform only (its program's size, no compile)",
    )
    p.add_argument("--solve-case", default=None, help=argparse.SUPPRESS)  # case:n:diagonals
    args = p.parse_args()
    if args.products:
        lines = products_section(args.product_sizes)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write("\n".join(lines) + "\n")
        return
    if args.case:
        print(json.dumps(run_case(args.case, args.profile)))
        return
    if args.solve_case:
        case, n, diagonals = args.solve_case.split(":")
        result = run_solve_case(case, int(float(n)), int(diagonals), args.profile, args.platform)
        print(json.dumps(result))
        return
    if args.solves_vs_n:
        cases = [c for c in args.cases.split(",") if c]
        unknown = set(cases) - set(SOLVE_CASES)
        if unknown:
            p.error(f"--cases: unknown {sorted(unknown)}; known: {', '.join(SOLVE_CASES)}")
        sizes = _number_list(args.sizes, int)
        counts = [str(count) for count in _number_list(args.band_diagonals, int)]
        solves_vs_n(cases, sizes, counts, args.timeout, args.markdown, args.profile, args.platform)
        return
    if args.solvers is not None:
        lines = solver_table(args.solvers or list(SOLVER_CASES), args.profile)
        if args.markdown:
            with open(args.markdown, "w") as f:
                f.write("\n".join(lines) + "\n")
        return
    n = args.n
    lines = [
        f"n = {n}, float64, jax {jax.__version__}, {os.cpu_count()} cores. Seconds for "
        "trace + lower and for XLA's compile of a fresh `jax.jit`; `run` is the median "
        "call of the compiled program, in ms.",
        "",
        "| diagonals | function | c | trace + lower | XLA compile | run (ms) |",
        "|---|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    rng = np.random.default_rng(0)
    for count in DIAGONALS:
        offsets = tuple(range(-(count // 2), count - count // 2))
        A = jaxdia.DiaMatrix(rng.standard_normal((count, n)), offsets, (n, n))
        for name, fn in programs(offsets).items():
            for columns in (1, 8):
                if name == "A.traces(all)" and columns > 1:
                    continue
                X = jnp.asarray(rng.standard_normal((n, columns) if columns > 1 else n))
                lower, compile_, run = measure(fn, A, X)
                lines.append(
                    f"| {count} | {name} | {columns} | {lower:.2f} | {compile_:.2f} | "
                    f"{run * 1e3:.2f} |"
                )
                print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
