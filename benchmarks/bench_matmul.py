"""``A @ X`` on CPU: jaxdia against SciPy, jax.experimental.sparse and dense, side by side.

Every case checks each competitor against SciPy first, compiles, then times all of them
interleaved (round-robin, medians of repeats, ``block_until_ready``) so that load from
other processes hits them alike; ratios are to SciPy DIA measured in the same rounds.

jaxdia is timed three ways:

* ``call``: one ``jax.jit(lambda A, X: A @ X)`` call, a fresh output buffer each time;
* ``donate``: the same, with the previous output donated so that XLA writes into it
  (``donate_argnums`` with ``keep_unused=True``: the product does not read the donated
  argument, and without it JAX drops the argument and allocates a fresh output anyway);
* ``loop``: ``R`` products chained inside one ``lax.fori_loop`` (time / ``R``), what a
  solver iteration sees.

GB/s counts useful traffic only: ``(n_diags * n + 2 * n * c) * itemsize`` (data read once,
X read once, Y written once, ``c`` columns). ``copy`` is a NumPy streaming copy of two
128 MiB arrays (read + write counted) timed in the same rounds: the machine's bandwidth.
``xla scale`` (n >= 1e5) is XLA's own per-call cost and streaming speed on the case's
output: a jitted ``Y * 2`` of an array shaped like ``Y`` (fresh output, read + write
counted). ``r at copy`` is the ratio a product moving the useful bytes at the ``copy``
bandwidth would reach: once the working set exceeds the caches, a target below it cannot
be met by any implementation.

Usage::

    python benchmarks/bench_matmul.py              # full run (7-8 minutes on 2 cores)
    python benchmarks/bench_matmul.py --quick      # a subset (2-4 minutes)
    python benchmarks/bench_matmul.py --only-jaxdia --quick   # jaxdia, SciPy DIA and copy
    python benchmarks/bench_matmul.py --profile 5pt,1e6,float64,1 --seconds 10
        # runs one case's jitted product in a loop, e.g. under `perf record`

Writes a markdown table (``--markdown``) and a plot of GB/s against n (``--plot``).
"""

from __future__ import annotations

import argparse
import functools
import gc
import math
import os
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax import lax
from jax.experimental import sparse as jsparse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import jaxdia  # noqa: E402

jax.config.update("jax_enable_x64", True)

STENCILS = ("tri", "5pt", "7pt", "band27")
COPY_BYTES = 128 << 20
# Cases whose X would exceed this many bytes are not run (RAM and time).
MAX_X_BYTES = 256 << 20


def stencil_offsets(name: str, n: int) -> tuple[int, ...]:
    if name == "tri":
        return (-1, 0, 1)
    if name == "5pt":  # 2-D grid sqrt(n) x sqrt(n)
        s = int(round(math.sqrt(n)))
        return (-s, -1, 0, 1, s)
    if name == "7pt":  # 3-D grid cbrt(n)^3
        s = int(round(n ** (1 / 3)))
        return (-s * s, -s, -1, 0, 1, s, s * s)
    if name == "band27":
        return tuple(range(-13, 14))
    raise ValueError(name)


def make_problem(name, n, dtype, cols, batch=(), seed=0):
    """Random data in [-1, 1] / n_diags (chained products stay bounded), random X."""
    offsets = stencil_offsets(name, n)
    rng = np.random.default_rng(seed)
    data = rng.random(
        (*batch, len(offsets), n), dtype=np.float64 if dtype == np.float64 else np.float32
    )
    data = ((2 * data - 1) / len(offsets)).astype(dtype)
    x = rng.random((*batch, n, cols), dtype=np.float32).astype(dtype)
    if cols == 1:
        x = x[..., 0]
    return offsets, data, x


def useful_bytes(n_diags, n, cols, itemsize, batch=1):
    return batch * (n_diags * n + 2 * n * cols) * itemsize


# -- timing --------------------------------------------------------------------------------


def interleaved(fns: dict, budget_s: float, min_reps=5, max_reps=200):
    """Median seconds per call of each function, timed in rounds.

    Each round calls every function once, in a fresh random order (what runs just before
    a call, e.g. a multi-threaded dense product, can slow it down). Fast functions are
    called ``inner`` times per round so that one timing spans >= 1 ms.
    """
    est = {}
    for name, fn in fns.items():
        fn()  # warm (compiled already; touches the output allocator)
        t0 = time.perf_counter()
        fn()
        est[name] = max(time.perf_counter() - t0, 1e-7)
    inner = {k: max(1, int(1e-3 / v)) for k, v in est.items()}
    per_round = sum(est[k] * inner[k] for k in fns)
    reps = int(min(max_reps, max(min_reps, budget_s / per_round)))
    times = {k: [] for k in fns}
    order = list(fns)
    shuffle = np.random.default_rng(0).shuffle
    for _ in range(reps):
        shuffle(order)
        for name in order:
            fn = fns[name]
            t0 = time.perf_counter()
            for _ in range(inner[name]):
                fn()
            times[name].append((time.perf_counter() - t0) / inner[name])
    return {k: float(np.median(v)) for k, v in times.items()}, reps


def blocking(fn, *args):
    return lambda: jax.block_until_ready(fn(*args))


class Copy:
    """NumPy streaming copy between two large preallocated arrays (bandwidth reference)."""

    def __init__(self):
        self.src = np.ones(COPY_BYTES // 8)
        self.dst = np.empty_like(self.src)
        np.copyto(self.dst, self.src)

    def __call__(self):
        np.copyto(self.dst, self.src)

    def gbps(self, seconds):
        return 2 * self.src.nbytes / seconds / 1e9


# -- competitors ----------------------------------------------------------------------------


@functools.cache
def _jitted():
    return jax.jit(lambda A, X: A @ X)


def donating(product, A, X, first):
    """Calls ``product(A, X)`` writing into the previous result's buffer, blocking.

    ``product`` is jitted again with the previous result as a third, donated argument.
    It is unused, so ``keep_unused=True`` is needed: JAX otherwise drops the argument
    (donating nothing) and XLA allocates a fresh output on every call. The first call
    checks that the output really is written into the donated buffer.
    """
    donate = jax.jit(lambda A, X, Y: product(A, X), donate_argnums=2, keep_unused=True)
    state = [first]
    pointer = first.unsafe_buffer_pointer()
    state[0] = donate(A, X, first)
    if state[0].unsafe_buffer_pointer() != pointer:
        raise AssertionError("the donated output buffer was not reused")

    def call():
        state[0] = donate(A, X, state[0])
        state[0].block_until_ready()

    return call


@functools.cache
def _looped(reps):
    return jax.jit(lambda A, X: lax.fori_loop(0, reps, lambda i, Y: A @ Y, X))


def jaxdia_competitors(A, X, loop_reps):
    call = _jitted()
    out = {"jaxdia call": blocking(call, A, X)}
    out["jaxdia donate"] = donating(call, A, X, call(A, X))
    looped = _looped(loop_reps)
    loop = blocking(looped, A, X)
    out["jaxdia loop"] = lambda: loop()  # divided by loop_reps afterwards
    return out


def check(name, result, expected, dtype):
    result = np.asarray(result, dtype=np.float64)
    tol = 2e-4 if np.dtype(dtype) == np.float32 else 1e-10
    scale = np.abs(expected).max() + 1e-30
    err = np.abs(result.reshape(expected.shape) - expected).max() / scale
    if not err <= tol:
        raise AssertionError(f"{name}: relative error {err:.2e} > {tol}")


SLOW_SPARSE_ENTRIES = 3e7  # BCOO/BCSR skipped beyond this many n_diags * n * cols


def run_case(stencil, n, dtype, cols, args, copy, rows):
    dtype = np.dtype(dtype)
    if n * cols * dtype.itemsize > MAX_X_BYTES:
        return
    offsets, data, x = make_problem(stencil, n, dtype, cols)
    S = sp.dia_array((data, np.array(offsets)), shape=(n, n))
    expected = S @ x.astype(np.float64) if dtype == np.float32 else S @ x
    A = jaxdia.DiaMatrix.from_scipy(S)
    X = jnp.asarray(x)
    fns = {"scipy dia": lambda: S @ x}
    notes = []
    loop_reps = 20 if n <= 100_000 else 5
    jd = jaxdia_competitors(A, X, loop_reps)
    check("jaxdia", jd["jaxdia call"](), expected, dtype)
    fns.update(jd)
    if not args.only_jaxdia:
        C = S.tocsr()
        fns["scipy csr"] = lambda: C @ x
        check("scipy csr", C @ x, expected, dtype)
        entries = len(offsets) * n * cols
        if entries <= SLOW_SPARSE_ENTRIES:
            mv = jax.jit(lambda M, v: M @ v)
            for label, cls in (("bcoo", jsparse.BCOO), ("bcsr", jsparse.BCSR)):
                M = cls.from_scipy_sparse(C)
                check(label, mv(M, X), expected, dtype)
                fns[label] = blocking(mv, M, X)
        else:
            notes.append("bcoo/bcsr skipped (slow)")
        if n <= 10_000:
            D = jnp.asarray(S.toarray())
            dot = jax.jit(jnp.dot)
            check("dense", dot(D, X), expected, dtype)
            fns["dense"] = blocking(dot, D, X)
    if n >= 1_000_000:
        fns["copy"] = copy
    if n >= 100_000:
        fns["xla scale"] = blocking(jax.jit(lambda y: y * 2), jnp.zeros((n, cols), dtype))
    if n <= 10_000:
        trivial = jax.jit(lambda v: v + 1)
        one = jnp.ones(1, dtype)
        fns["trivial jit"] = blocking(trivial, one)
    with jax.transfer_guard("disallow"):  # no host transfers on the timed jitted path
        times, reps = interleaved(fns, args.budget)
    times["jaxdia loop"] /= loop_reps
    nbytes = useful_bytes(len(offsets), n, cols, dtype.itemsize)
    base = times["scipy dia"]
    for impl, t in times.items():
        if impl == "copy":
            gbps = copy.gbps(t)
        elif impl == "xla scale":  # reads and writes an array shaped like Y
            gbps = 2 * n * cols * dtype.itemsize / t / 1e9
        elif impl == "trivial jit":
            gbps = float("nan")
        else:
            gbps = nbytes / t / 1e9
        rows.append(
            dict(
                kind="matmul",
                stencil=stencil,
                n=n,
                dtype=dtype.name,
                cols=cols,
                impl=impl,
                seconds=t,
                gbps=gbps,
                ratio=t / base,
                reps=reps,
                note="; ".join(notes),
            )
        )
    print_rows(rows[-len(times) :])


def run_vmap(stencil, n, dtype, args, rows, batch=64):
    """64 matrices with the same offsets, one vector each."""
    dtype = np.dtype(dtype)
    offsets, data, x = make_problem(stencil, n, dtype, 1, batch=(batch,))
    mats = [sp.dia_array((data[b], np.array(offsets)), shape=(n, n)) for b in range(batch)]
    expected = np.stack([M @ x[b] for b, M in enumerate(mats)])
    A = jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))
    X = jnp.asarray(x)
    f = jax.jit(jax.vmap(lambda A, v: A @ v))
    check("jaxdia vmap", f(A, X), expected, dtype)
    block = sp.block_diag(mats, format="dia")
    xflat = x.reshape(-1)
    check("block diag", block @ xflat, expected.reshape(-1), dtype)

    def loop():
        return [M @ x[b] for b, M in enumerate(mats)]

    like_y = jnp.zeros((batch, n), dtype)
    fns = {
        "scipy loop": loop,
        "scipy block-diag dia": lambda: block @ xflat,
        "jaxdia vmap": blocking(f, A, X),
        "jaxdia vmap donate": donating(f, A, X, f(A, X)),
        "xla scale": blocking(jax.jit(lambda y: y * 2), like_y),
    }
    times, reps = interleaved(fns, args.budget)
    nbytes = useful_bytes(len(offsets), n, 1, dtype.itemsize, batch)
    base = times["scipy loop"]
    for impl, t in times.items():
        moved = 2 * like_y.nbytes if impl == "xla scale" else nbytes
        rows.append(
            dict(
                kind="vmap64",
                stencil=stencil,
                n=n,
                dtype=dtype.name,
                cols=1,
                impl=impl,
                seconds=t,
                gbps=moved / t / 1e9,
                ratio=t / base,
                reps=reps,
                note=f"block-diag dia has {len(block.offsets)} offsets",
            )
        )
    print_rows(rows[-len(times) :])


# -- memory ----------------------------------------------------------------------------------


def _rss_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    return -1


def _reset_peak_rss():
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def memory_report(n, dtype, lines):
    """Peak memory of one jitted matvec: XLA's temp bytes and the process RSS high-water."""
    dtype = np.dtype(dtype)
    offsets, data, x = make_problem("band27", n, dtype, 1)
    A = jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))
    X = jnp.asarray(x)
    del data, x
    gc.collect()
    f = jax.jit(lambda A, X: A @ X)
    compiled = f.lower(A, X).compile()
    stats = compiled.memory_analysis()
    operands = A.data.nbytes + X.nbytes + n * dtype.itemsize
    compiled(A, X).block_until_ready()  # warm-up, then measure a fresh call
    gc.collect()
    before = _rss_bytes("VmRSS")
    reset = _reset_peak_rss()
    y = compiled(A, X).block_until_ready()
    peak = _rss_bytes("VmHWM") - before if reset else float("nan")
    temp = stats.temp_size_in_bytes if stats is not None else float("nan")
    total = (operands + temp) / operands
    lines.append(
        f"| {n:.0e} | {dtype.name} | 27 | {operands / 2**20:.0f} MiB | "
        f"{temp / 2**20:.2f} MiB | {total:.3f}x | {peak / 2**20:.0f} MiB "
        f"(y is {y.nbytes / 2**20:.0f} MiB) |"
    )
    print(lines[-1])
    del y


# -- dispatch ----------------------------------------------------------------------------------


def dispatch_report(args, lines):
    """n = 1e4: jaxdia per call (jitted, and eager ``A @ X``) vs a trivial jitted call; no
    re-tracing, no host transfers."""
    n = 10_000
    trivial = jax.jit(lambda v: v + 1)
    one = jnp.ones(1)
    for stencil in ("tri", "band27"):
        offsets, data, x = make_problem(stencil, n, np.float64, 1)
        S = sp.dia_array((data, np.array(offsets)), shape=(n, n))
        A = jaxdia.DiaMatrix.from_scipy(S)
        X = jnp.asarray(x)
        traces = [0]

        def product(A, X):
            traces[0] += 1
            return A @ X

        f = jax.jit(product)
        f(A, X).block_until_ready()
        with jax.transfer_guard("disallow"):
            times, _ = interleaved(
                {
                    "trivial": blocking(trivial, one),
                    "jaxdia": blocking(f, A, X),
                    "eager": lambda: (A @ X).block_until_ready(),
                    "scipy dia": lambda: S @ x,
                },
                args.budget,
            )
        lines.append(
            f"| {stencil} | {times['trivial'] * 1e6:.1f} | {times['jaxdia'] * 1e6:.1f} | "
            f"{(times['jaxdia'] - times['trivial']) * 1e6:.1f} | {times['eager'] * 1e6:.1f} | "
            f"{times['scipy dia'] * 1e6:.1f} | {traces[0]} |"
        )
        print(lines[-1])


# -- output ---------------------------------------------------------------------------------


def print_rows(rows):
    for r in rows:
        print(
            f"{r['kind']:7s} {r['stencil']:7s} n={r['n']:<8.0e} {r['dtype']:8s} c={r['cols']:<3d} "
            f"{r['impl']:22s} {r['seconds'] * 1e3:10.3f} ms {r['gbps']:7.2f} GB/s "
            f"ratio {r['ratio']:6.2f} {r['note']}",
            flush=True,
        )


# The columns of the table and the lines of the plot, in order.
IMPLEMENTATIONS = [
    "jaxdia call",
    "jaxdia donate",
    "jaxdia loop",
    "scipy dia",
    "scipy csr",
    "bcoo",
    "bcsr",
    "dense",
    "copy",
    "xla scale",
]


def markdown(rows, copy_gbps):
    """One table row per case: jaxdia (call/donate/loop) and the competitors."""
    impls = IMPLEMENTATIONS
    out = [
        "Times in ms (medians); GB/s of useful traffic in brackets; `r` = time / SciPy DIA "
        "time in the same rounds. `copy` = NumPy streaming copy in the same rounds; "
        "`xla scale` = a jitted `Y * 2` on an array shaped like the output, GB/s of its "
        "read + write (XLA's own per-call cost and streaming speed); `r at copy` = the "
        "ratio of a product running at the `copy` bandwidth (no implementation goes "
        "below it once the working set exceeds the caches).",
        "",
        "| stencil | n | dtype | c | " + " | ".join(impls) + " | jaxdia/copy GB/s | r at copy |",
        "|" + "---|" * (len(impls) + 6),
    ]
    cases = {}
    for r in rows:
        if r["kind"] == "matmul":
            cases.setdefault((r["stencil"], r["n"], r["dtype"], r["cols"]), {})[r["impl"]] = r
    for (stencil, n, dtype, cols), case in cases.items():
        cells = []
        for impl in impls:
            r = case.get(impl)
            if r is None:
                cells.append("–")
            elif impl == "copy":
                cells.append(f"{r['gbps']:.1f} GB/s")
            elif impl.startswith("jaxdia"):
                cells.append(f"{r['seconds'] * 1e3:.3g} ({r['gbps']:.1f}) r={r['ratio']:.2f}")
            else:
                cells.append(f"{r['seconds'] * 1e3:.3g} ({r['gbps']:.1f})")
        copy = case.get("copy", {}).get("gbps", copy_gbps)
        best = max(case[k]["gbps"] for k in ("jaxdia call", "jaxdia loop"))
        call = case["jaxdia call"]
        seconds_at_copy = call["gbps"] * call["seconds"] / copy  # useful bytes / copy GB/s
        r_at_copy = seconds_at_copy / case["scipy dia"]["seconds"]
        out.append(
            f"| {stencil} | {n:.0e} | {dtype} | {cols} | "
            + " | ".join(cells)
            + f" | {best / copy:.0%} | {r_at_copy:.2f} |"
        )
    vm = [r for r in rows if r["kind"] == "vmap64"]
    if vm:
        out += [
            "",
            "vmap over 64 matrices (one vector each); `r` = time / Python loop over SciPy; "
            "`xla scale` = a jitted `Y * 2` on an array shaped like the `(64, n)` output.",
            "",
            "| stencil | n | dtype | scipy loop | scipy block-diag dia | jaxdia vmap | "
            "jaxdia vmap donate | xla scale |",
            "|---|---|---|---|---|---|---|---|",
        ]
        vcases = {}
        for r in vm:
            vcases.setdefault((r["stencil"], r["n"], r["dtype"]), {})[r["impl"]] = r
        for (stencil, n, dtype), case in vcases.items():
            cells = [
                f"{case[i]['seconds'] * 1e3:.3g} ms r={case[i]['ratio']:.2f}"
                for i in (
                    "scipy loop",
                    "scipy block-diag dia",
                    "jaxdia vmap",
                    "jaxdia vmap donate",
                    "xla scale",
                )
            ]
            out.append(f"| {stencil} | {n:.0e} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def plot(rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    mv = [r for r in rows if r["kind"] == "matmul" and r["cols"] == 1]
    if not mv:
        print(f"no matrix-vector results among the selected cases: {path} not written")
        return
    dtypes = sorted({r["dtype"] for r in mv})
    fig, axes = plt.subplots(
        len(dtypes),
        len(STENCILS),
        figsize=(4 * len(STENCILS), 3.3 * len(dtypes)),
        squeeze=False,
        sharey=True,
    )
    impls = IMPLEMENTATIONS
    for i, dtype in enumerate(dtypes):
        for j, stencil in enumerate(STENCILS):
            ax = axes[i][j]
            for impl in impls:
                pts = sorted(
                    (r["n"], r["gbps"])
                    for r in mv
                    if r["dtype"] == dtype and r["stencil"] == stencil and r["impl"] == impl
                )
                if pts and impl != "xla scale":  # its bytes are not the product's
                    style = (
                        "k--" if impl == "copy" else ("-o" if impl.startswith("jaxdia") else ":s")
                    )
                    ax.plot(*zip(*pts), style, label=impl, markersize=4)
            ax.set_xscale("log")
            ax.set_title(f"{stencil}, {dtype}, matvec")
            ax.grid(True, alpha=0.3)
            if j == 0:
                ax.set_ylabel("GB/s of useful traffic")
            if i == len(dtypes) - 1:
                ax.set_xlabel("n")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")


def profile(spec, seconds):
    stencil, n, dtype, cols = spec.split(",")
    n, cols, dtype = int(float(n)), int(cols), np.dtype(dtype)
    offsets, data, x = make_problem(stencil, n, dtype, cols)
    A = jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))
    X = jnp.asarray(x)
    f = jax.jit(lambda A, X: A @ X)
    print(f.lower(A, X).compile().as_text())
    f(A, X).block_until_ready()
    calls, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        f(A, X).block_until_ready()
        calls += 1
    dt = (time.perf_counter() - t0) / calls
    nbytes = useful_bytes(len(offsets), n, cols, dtype.itemsize)
    print(
        f"{calls} calls, {dt * 1e3:.3f} ms each, {nbytes / dt / 1e9:.2f} GB/s (pid {os.getpid()})"
    )


def main():
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--quick", action="store_true", help="a subset of the cases")
    p.add_argument("--only-jaxdia", action="store_true", help="jaxdia, SciPy DIA and copy only")
    p.add_argument("--budget", type=float, default=None, help="seconds of timing per case")
    p.add_argument("--markdown", default=None, help="write the tables to this file")
    p.add_argument("--plot", default=None, help="write the GB/s plot (PNG) to this file")
    p.add_argument(
        "--profile",
        default=None,
        metavar="STENCIL,N,DTYPE,COLS",
        help="run one case's jitted product in a loop (for perf/py-spy)",
    )
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--cases", default=None, help="filter, e.g. 'n=1e6' or 'c=8' or 'tri'")
    args = p.parse_args()
    if args.profile:
        profile(args.profile, args.seconds)
        return
    if args.budget is None:
        args.budget = 0.3 if args.quick else 0.6
    print(
        f"jax {jax.__version__}, {os.cpu_count()} CPUs, devices {jax.devices()}, "
        f"GLIBC_TUNABLES={os.environ.get('GLIBC_TUNABLES', '')!r}, "
        f"load average {os.getloadavg()[0]:.1f}"
    )
    copy = Copy()
    copy_t, _ = interleaved({"copy": copy}, 1.0)
    copy_gbps = copy.gbps(copy_t["copy"])
    print(f"NumPy streaming copy: {copy_gbps:.1f} GB/s")
    rows, mem_lines, dispatch_lines = [], [], []
    sizes = [10_000, 100_000, 1_000_000, 4_000_000]
    if args.quick:
        grid = [
            (s, n, d, c)
            for s in ("tri", "band27")
            for n in (100_000, 1_000_000, 4_000_000)
            for d in ("float64",)
            for c in (1,)
        ]
        grid += [(s, 100_000, "float64", c) for s in ("5pt",) for c in (8, 64)]
        vgrid = [("5pt", 10_000, "float64"), ("5pt", 100_000, "float64")]
    else:
        grid = [(s, n, d, 1) for d in ("float32", "float64") for s in STENCILS for n in sizes]
        grid += [
            (s, n, d, c)
            for c in (8, 64)
            for d in ("float32", "float64")
            for s in STENCILS
            for n in sizes[:3]
        ]
        vgrid = [
            (s, n, d) for d in ("float32", "float64") for s in STENCILS for n in (10_000, 100_000)
        ]
    if args.cases:
        f = args.cases
        grid = [g for g in grid if f in f"{g[0]} n={g[1]:.0e} {g[2]} c={g[3]}"]
        vgrid = [g for g in vgrid if f in f"vmap {g[0]} n={g[1]:.0e} {g[2]}"]
    t_start = time.perf_counter()
    print("\n== memory: one jitted matvec, 27 diagonals ==")
    mem_lines += [
        "| n | dtype | diagonals | data + x + y | XLA temp | (operands + temp) / "
        "operands | process RSS peak over a call |",
        "|---|---|---|---|---|---|---|",
    ]
    for dtype in ("float32", "float64"):
        memory_report(4_000_000, dtype, mem_lines)
    print("\n== dispatch at n = 1e4 (µs per call; traces counted over all calls) ==")
    dispatch_lines += [
        "| stencil | trivial jit µs | jaxdia µs | overhead µs | eager `A @ X` µs | scipy dia µs "
        "| traces |",
        "|---|---|---|---|---|---|---|",
    ]
    dispatch_report(args, dispatch_lines)
    print("\n== A @ X ==")
    for stencil, n, dtype, cols in grid:
        run_case(stencil, n, dtype, cols, args, copy, rows)
        gc.collect()
    print("\n== vmap over 64 matrices ==")
    for stencil, n, dtype in vgrid:
        run_vmap(stencil, n, dtype, args, rows)
        gc.collect()
    print(f"\ntotal {time.perf_counter() - t_start:.0f} s")
    text = "\n".join(
        [
            "## Memory",
            "",
            *mem_lines,
            "",
            "## Dispatch (n = 1e4)",
            "",
            *dispatch_lines,
            "",
            "## Products",
            "",
            markdown(rows, copy_gbps),
        ]
    )
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text + "\n")
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
