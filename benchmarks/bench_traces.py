"""Offset traces: jaxdia against NumPy, jnp.trace and SciPy (seed question 003).

Run from the repository root:

    PYTHONPATH=. .venv/bin/python benchmarks/bench_traces.py [--quick] [--out FILE]

Every competitor is checked against the oracle first, compiled (called once), then timed
in interleaved rounds: each round calls every competitor, in a random order, once
untimed and then ``inner`` times back to back, each call timed (``block_until_ready`` on
JAX results). The table reports the median and the best of those calls and their ratios
to the reference row of its case; competitors 100x slower or more are timed apart, 3
calls each. The markdown report is printed and, with ``--out``, written to a file.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import time
from functools import partial

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia import traces  # noqa: E402


def timed(fn, rounds, inner):
    """``(median, best)`` seconds per call of each competitor, rounds interleaved.

    Every call is timed on its own; the median is over all calls of all rounds. Each
    round runs the competitors in a fresh random order, and each turn starts with an
    untimed call: whoever ran right after NumPy paid 2-4x for its calls here, so a fixed
    order would hand that cost to one competitor.
    """
    samples = {name: [] for name in fn}
    order = list(fn)
    shuffle = random.Random(0).shuffle
    for _ in range(rounds):
        shuffle(order)
        for name in order:
            call = fn[name]
            call()
            for _ in range(inner):
                start = time.perf_counter()
                call()
                samples[name].append(time.perf_counter() - start)
    return {name: (statistics.median(s), min(s)) for name, s in samples.items()}


def compare(competitors, slow, expected, rounds, inner):
    """Checks every competitor, times the fast ones interleaved, the slow ones 3 times."""
    for name, call in {**competitors, **slow}.items():
        check(name, call(), expected)
    return {**timed(competitors, rounds, inner), **timed(slow, 3, 1)}


def ready(f):
    return lambda: jax.block_until_ready(f())


def check(name, got, expected, rtol=1e-9):
    got = np.asarray(got)
    if not np.allclose(got, expected, rtol=rtol, atol=rtol * np.abs(expected).max()):
        raise AssertionError(f"{name} is wrong: {got} != {expected}")


# -- case 1: one dense 1000x1000 matrix, q = 5 ---------------------------------------------


def dense_single(n, q, rounds, inner):
    rng = np.random.default_rng(0)
    mat_np = rng.uniform(size=(n, n))
    mat = jnp.asarray(mat_np)
    expected = np.array([np.trace(mat_np, offset=k) for k in range(q)])

    def numpy_list():
        return np.array([np.trace(mat_np, offset=k) for k in range(q)])

    def numpy_strided():  # diagonal k is flat[k::n + 1], n - k long
        flat = mat_np.reshape(-1)
        return np.array([flat[k : n * (n - k) : n + 1].sum() for k in range(q)])

    @partial(jax.jit, static_argnums=1)
    def jnp_trace_list(mat, q):  # the user's get_traces_jax_0
        return jnp.array([jnp.trace(mat, offset=i) for i in range(q)])

    @partial(jax.jit, static_argnums=1)
    def jnp_trace_vmap(mat, q):
        # The user's vmap failed on older JAX (static offset); jax 0.10's jnp.trace takes a
        # traced offset, through an O(n^2) mask per offset.
        return jax.vmap(lambda i: jnp.trace(mat, offset=i))(jnp.arange(q))

    @partial(jax.jit, static_argnums=1)
    def pad_roll(mat, q):  # the user's get_traces_jax_1
        n = mat.shape[0]
        padded = jnp.pad(mat, ((0, 0), (0, n - 1)), "constant")
        shifts = jax.vmap(lambda v, i: jnp.roll(v, -i))(padded, jnp.arange(n))[:, :n]
        return jnp.sum(shifts, axis=0)[:q]

    traces_jit = jax.jit(traces, static_argnums=1)

    competitors = {
        "NumPy: `[np.trace(M, k) for k in range(q)]`": numpy_list,
        "NumPy: strided slices `M.ravel()[k::n+1].sum()`": numpy_strided,
        "jaxdia: `jaxdia.traces(M, q)`": ready(lambda: traces(mat, q)),
        "jaxdia: `jit(traces)(M, q)`": ready(lambda: traces_jit(mat, q)),
    }
    slow = {
        "JAX: list of `jnp.trace` (the user's get_traces_jax_0)": ready(
            lambda: jnp_trace_list(mat, q)
        ),
        "JAX: `vmap(lambda i: jnp.trace(M, offset=i))(arange(q))` (the user's "
        "get_traces_jax_broken)": ready(lambda: jnp_trace_vmap(mat, q)),
        "JAX: pad + roll (the user's get_traces_jax_1)": ready(lambda: pad_roll(mat, q)),
    }
    return compare(competitors, slow, expected, rounds, inner)


# -- case 2: 1000 matrices of 100x100, q = 5 -----------------------------------------------


def dense_batched(count, n, q, rounds, inner):
    rng = np.random.default_rng(1)
    mats_np = rng.uniform(size=(count, n, n))
    mats = jnp.asarray(mats_np)
    expected = np.stack([np.trace(mats_np, k, axis1=-2, axis2=-1) for k in range(q)], -1)

    vmapped = jax.jit(jax.vmap(lambda m: traces(m, q)))
    jnp_batched = jax.jit(
        lambda m: jnp.stack([jnp.trace(m, k, axis1=-2, axis2=-1) for k in range(q)], -1)
    )
    competitors = {
        "NumPy: batched `np.trace(M, k, axis1=-2, axis2=-1)`": lambda: np.stack(
            [np.trace(mats_np, k, axis1=-2, axis2=-1) for k in range(q)], -1
        ),
        "jaxdia: `traces(M, q)` on the (1000, 100, 100) batch": ready(lambda: traces(mats, q)),
        "jaxdia: `jit(vmap(lambda m: traces(m, q)))`": ready(lambda: vmapped(mats)),
    }
    slow = {
        "NumPy: loop over matrices": lambda: np.array(
            [[np.trace(m, k) for k in range(q)] for m in mats_np]
        ),
        "JAX: batched `jnp.trace` (jitted)": ready(lambda: jnp_batched(mats)),
    }
    return compare(competitors, slow, expected, rounds, inner)


# -- case 3: a DiaMatrix with n = 1e6 ------------------------------------------------------


def dia_large(n, offsets, rounds, inner):
    rng = np.random.default_rng(2)
    S = sp.dia_array((rng.uniform(size=(len(offsets), n)), offsets), shape=(n, n))
    A = jaxdia.DiaMatrix.from_scipy(S)
    expected = np.array([S.diagonal(k).sum() for k in offsets])
    traces_jit = jax.jit(lambda A: A.traces(offsets))
    competitors = {
        "SciPy: `[S.diagonal(k).sum() for k in offsets]`": lambda: np.array(
            [S.diagonal(k).sum() for k in offsets]
        ),
        "SciPy: `[S.trace(k) for k in offsets]`": lambda: np.array([S.trace(k) for k in offsets]),
        "jaxdia: `A.traces(offsets)`": ready(lambda: A.traces(offsets)),
        "jaxdia: `jit(lambda A: A.traces(offsets))(A)`": ready(lambda: traces_jit(A)),
    }
    return compare(competitors, {}, expected, rounds, inner)


# -- report --------------------------------------------------------------------------------


def shown(seconds):
    return f"{seconds * 1e6:,.1f} us" if seconds < 1e-2 else f"{seconds * 1e3:,.2f} ms"


def table(title, results, reference):
    base, base_best = results[reference]
    lines = [
        f"**{title}**",
        "",
        "| implementation | median call | vs reference | best call | vs reference |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, (median, best) in results.items():
        mark = " (reference)" if name == reference else ""
        lines.append(
            f"| {name}{mark} | {shown(median)} | {median / base:.2f}x "
            f"| {shown(best)} | {best / base_best:.2f}x |"
        )
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--out", help="also write the markdown report to this file")
    args = parser.parse_args()
    rounds = 5 if args.quick else 21
    load = os.getloadavg()[0]

    single = dense_single(1000, 5, rounds, inner=20)
    batched = dense_batched(1000, 100, 5, rounds, inner=5)
    dia = dia_large(10**6, (-3, -1, 0, 1, 2), rounds, inner=5)

    sections = [
        table(
            "One dense 1000x1000 float64 matrix, q = 5",
            single,
            "NumPy: `[np.trace(M, k) for k in range(q)]`",
        ),
        table(
            "1000 dense 100x100 float64 matrices, q = 5",
            batched,
            "NumPy: batched `np.trace(M, k, axis1=-2, axis2=-1)`",
        ),
        table(
            "DiaMatrix, n = 1e6, 5 diagonals (-3, -1, 0, 1, 2), float64",
            dia,
            "SciPy: `[S.diagonal(k).sum() for k in offsets]`",
        ),
    ]

    def ratio(results, ours, reference):  # of the medians
        return results[ours][0] / results[reference][0]

    single_ratio = ratio(
        single, "jaxdia: `jaxdia.traces(M, q)`", "NumPy: `[np.trace(M, k) for k in range(q)]`"
    )
    batched_ratio = ratio(
        batched,
        "jaxdia: `traces(M, q)` on the (1000, 100, 100) batch",
        "NumPy: batched `np.trace(M, k, axis1=-2, axis2=-1)`",
    )
    dia_ratio = ratio(
        dia, "jaxdia: `A.traces(offsets)`", "SciPy: `[S.diagonal(k).sum() for k in offsets]`"
    )
    targets = [
        f"- single 1000x1000 within 3x of the NumPy list: {single_ratio:.2f}x, "
        + ("met" if single_ratio <= 3 else "NOT met"),
        f"- batched (`traces` on the batch) faster than NumPy's batched `np.trace`: "
        f"{batched_ratio:.2f}x, " + ("met" if batched_ratio < 1 else "NOT met"),
        f"- `DiaMatrix.traces` faster than SciPy's loop: {dia_ratio:.2f}x, "
        + ("met" if dia_ratio < 1 else "NOT met"),
    ]
    command = "PYTHONPATH=. .venv/bin/python benchmarks/bench_traces.py " + " ".join(sys.argv[1:])
    machine = (
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load average "
        f"{load:.1f} at start; Python {platform.python_version()}, jax {jax.__version__}, "
        f"numpy {np.__version__}, scipy {scipy.__version__}; {rounds} interleaved rounds"
    )
    report = "\n\n".join(
        [
            f"Command: `{command.strip()}`",
            f"Machine: {machine}.",
            *sections,
            "Targets:",
            "\n".join(targets),
        ]
    )
    print(report)
    if args.out:
        with open(args.out, "w") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
