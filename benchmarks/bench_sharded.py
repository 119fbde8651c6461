"""Sharded DIA products on 8 fake CPU devices: communication volume and weak scaling.

Usage::

    python benchmarks/bench_sharded.py [--quick] [--only bytes paper cg scaling]

Three ways to compute ``A @ x`` with the rows of ``A`` and ``x`` split over 8 devices:

* ``halo``: ``jaxdia.shard`` (``shard_map`` + ``ppermute`` of ``max|offset|`` rows with
  each neighbour);
* ``all-gather``: the same local product, but each device first all-gathers ``x``;
* ``XLA auto``: the unsharded ``DiaMatrix @ x`` under ``jit`` with sharded ``data`` and
  ``x``, left to XLA's SPMD partitioner.

Part 1 reads the bytes each device sends and receives per product from the compiled HLO
(also for a plain ``DiaMatrix`` whose ``data`` columns are split over an ``Explicit`` axis,
which jaxdia multiplies with its own halo exchange) and extrapolates the halo and
all-gather designs to ``n = 1e9`` rows on 64 devices. Part 3 reads the communication of
one iteration of ``jax.scipy.sparse.linalg.cg`` (plain, with ``jaxdia.jacobi`` and with
``jaxdia.chebyshev``) on a
``ShardedDiaMatrix`` from the compiled loop, on ``Explicit`` and ``Auto`` axes.
Part 4 is a weak-scaling table on the fake devices. They share this machine's cores, so
the times measure the overhead of the sharded program (halo slicing, collectives,
``shard_map``), not a speed-up: with ``P`` fake devices on ``C`` cores, perfect weak
scaling shows time growing like ``P / C``.

Every design is checked against SciPy before it is measured or counted.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from jax import lax  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxdia  # noqa: E402
from jaxdia._kernels.primitives import spmm  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jax.scipy.sparse import linalg as jla  # noqa: E402

from tests.sharded.helpers import collective_traffic, loop_traffic  # noqa: E402

AXIS = "rows"


def mesh_of(devices: int, kind=AxisType.Auto):
    return jax.make_mesh((devices,), (AXIS,), axis_types=(kind,), devices=jax.devices()[:devices])


def stencil(shape: tuple[int, ...]) -> jaxdia.DiaMatrix:
    """The (2d+1)-point Laplacian on a grid of ``shape`` (row-major), as a DiaMatrix."""
    matrix = None
    for side in shape:
        one = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
        matrix = (
            one
            if matrix is None
            else (sp.kron(matrix, sp.eye_array(side)) + sp.kron(sp.eye_array(matrix.shape[0]), one))
        )
    return jaxdia.DiaMatrix.from_scipy(matrix.todia())


# -- the three designs ------------------------------------------------------------------------


def halo_design(S):
    return jax.jit(lambda S, v: S @ v)


def allgather_design(S):
    """Each device gathers all of ``x``, then computes its rows exactly as ``halo`` does."""
    lower, upper = S.halo
    rows = S.rows_per_shard
    local_offsets = tuple(k + lower for k in S.offsets)
    width = lower + rows + upper

    def local(window, block):
        everything = lax.all_gather(block, AXIS, tiled=True)  # (N, c) on every device
        everything = jnp.pad(everything, [(lower, upper), (0, 0)])
        start = lax.axis_index(AXIS) * rows
        extended = lax.dynamic_slice_in_dim(everything, start, width, axis=0)
        return spmm(window[0], extended, offsets=local_offsets, shape=(rows, width))

    spec = PartitionSpec(AXIS)
    product = jax.shard_map(local, mesh=S.mesh, in_specs=(spec, spec), out_specs=spec)
    return jax.jit(lambda S, v: product(S.windows, v.reshape(-1, 1))[:, 0])


def auto_design(A, mesh):
    """``DiaMatrix @ x`` under jit with sharded operands; XLA partitions it."""
    data = jax.device_put(A.data, NamedSharding(mesh, PartitionSpec(None, AXIS)))
    offsets, shape = A.offsets, A.shape
    product = jax.jit(lambda d, v: jaxdia.DiaMatrix(d, offsets, shape) @ v)
    return data, product


def check_and_count(A, devices):
    """Checks the designs against SciPy; returns {design: collective traffic}."""
    mesh = mesh_of(devices)
    S = jaxdia.shard(A, mesh, AXIS)
    n = A.shape[0]
    assert S.padded_size == n, "pick sizes divisible by the device count here"
    x = np.random.default_rng(0).standard_normal(n)
    expected = sp.dia_array((np.asarray(A.data), A.offsets), shape=A.shape) @ x
    xs = S.shard_vector(x)
    data, auto = auto_design(A, mesh)
    # The same plain product on an Explicit axis: jaxdia reads the sharding from the types
    # and exchanges the output halos itself (jaxdia/_sharded_products.py).
    explicit = mesh_of(devices, AxisType.Explicit)
    data_e, plain_e = auto_design(A, explicit)
    x_e = jax.device_put(x, NamedSharding(explicit, PartitionSpec(AXIS)))
    runs = {
        "halo (jaxdia.shard)": (halo_design(S), (S, xs)),
        "all-gather": (allgather_design(S), (S, xs)),
        "XLA auto": (auto, (data, xs)),
        "plain DiaMatrix, Explicit axis": (plain_e, (data_e, x_e)),
    }
    traffic = {}
    for name, (fn, args) in runs.items():
        np.testing.assert_allclose(np.asarray(fn(*args)), expected, rtol=1e-12, atol=1e-12)
        traffic[name] = collective_traffic(fn.lower(*args).compile().as_text())
    return S, traffic


def describe(totals):
    return ", ".join(f"{e['count']} {kind}" for kind, e in sorted(totals.items())) or "none"


def kib(nbytes):
    return f"{nbytes / 1024:,.1f}"


def part_bytes(quick: bool):
    cases = [("2-D 5-point, 256 x 256", (256, 256)), ("3-D 7-point, 32^3", (32, 32, 32))]
    if not quick:
        cases.append(("3-D 7-point, 64^3", (64, 64, 64)))
    print("## Bytes per device and product (8 fake CPU devices, float64, one vector)\n")
    print(
        "| matrix | n | halo rows (lower, upper) | design | collectives | sent KiB | received KiB |"
    )
    print("|---|---:|---|---|---|---:|---:|")
    for label, grid in cases:
        A = stencil(grid)
        S, traffic = check_and_count(A, 8)
        for design, totals in traffic.items():
            sent = sum(e["sent"] for e in totals.values())
            received = sum(e["received"] for e in totals.values())
            print(
                f"| {label} | {A.shape[0]:,} | {S.halo} | {design} | {describe(totals)} "
                f"| {kib(sent)} | {kib(received)} |"
            )
    print()


def part_extrapolation():
    n, devices, itemsize = 10**9, 64, 8
    side = round(n ** (1 / 3))
    rows = n // devices
    halo = 2 * side * side * itemsize
    gather = (devices - 1) * rows * itemsize
    local = (7 * rows + 2 * rows) * itemsize  # data (7 diagonals) + x + y, read/written once
    print("## On paper: n = 1e9 rows (1000^3 grid, 7-point stencil), 64 devices, float64\n")
    print("| quantity per device and product | halo design | all-gather design |")
    print("|---|---:|---:|")
    print(f"| rows per device | {rows:,} | {rows:,} |")
    print(
        f"| bytes received | {halo / 1e6:,.0f} MB (2 x {side * side:,} rows) "
        f"| {gather / 1e9:,.2f} GB (63 x {rows:,} rows) |"
    )
    print(f"| extra memory for x | {halo / 1e6:,.0f} MB | {(n * itemsize) / 1e9:,.0f} GB |")
    print(f"| local HBM traffic (data + x + y) | {local / 1e9:.2f} GB | {local / 1e9:.2f} GB |")
    for link, rate in (("NVLink, ~400 GB/s", 400e9), ("InfiniBand NDR, ~50 GB/s", 50e9)):
        print(
            f"| time to move it over {link} | {halo / rate * 1e3:.2f} ms "
            f"| {gather / rate * 1e3:,.0f} ms |"
        )
    print(
        f"| local product at ~4 TB/s HBM | {local / 4e12 * 1e3:.2f} ms "
        f"| {local / 4e12 * 1e3:.2f} ms |"
    )
    print(
        f"\nRatio of bytes moved: {gather / halo:,.0f}x. The halo is n^(2/3) rows per side, "
        "independent of the device count, while the all-gather grows with n.\n"
    )


def part_cg(quick: bool):
    """Communication of one CG iteration, read from the compiled while loop."""
    cases = [("2-D 5-point, 256 x 256", (256, 256)), ("3-D 7-point, 32^3", (32, 32, 32))]
    if not quick:
        cases.append(("3-D 7-point, 64^3", (64, 64, 64)))
    print("## Communication per CG iteration (8 fake CPU devices, float64, one vector)\n")
    print(
        "| matrix | halo rows (lower, upper) | axis type | preconditioner | collectives per "
        "iteration | halo KiB sent | all-reduce bytes |"
    )
    print("|---|---|---|---|---|---:|---:|")
    for label, grid in cases:
        A = stencil(grid)
        n = A.shape[0]
        rhs = np.random.default_rng(2).standard_normal(n)
        expected = None
        for kind in (AxisType.Explicit, AxisType.Auto):
            mesh = mesh_of(8, kind)
            S = jaxdia.shard(A, mesh, AXIS)
            b = S.shard_vector(rhs)
            preconditioners = {
                "none": lambda A: None,
                "jaxdia.jacobi": jaxdia.jacobi,
                "jaxdia.chebyshev(degree=4)": lambda A: jaxdia.chebyshev(A, 4),
            }
            for name, preconditioner in preconditioners.items():

                def solve(S, b, preconditioner=preconditioner):
                    return jla.cg(S, b, tol=1e-10, maxiter=20, M=preconditioner(S))[0]

                if kind == AxisType.Explicit:  # JAX's cg needs Auto axes (jnp.vdot)
                    solve = jax.sharding.auto_axes(solve, out_sharding=S.vector_sharding)
                solve = jax.jit(solve)
                x = np.asarray(S.unshard_vector(solve(S, b)))
                if expected is None:
                    expected = x
                # Every variant agrees (20 iterations, not converged: the same iterates
                # for the same preconditioner).
                plain = jax.jit(
                    lambda A, b, preconditioner=preconditioner: jla.cg(
                        A, b, tol=1e-10, maxiter=20, M=preconditioner(A)
                    )[0]
                )(A, jnp.asarray(rhs))
                np.testing.assert_allclose(x, np.asarray(plain), rtol=1e-9, atol=1e-9)
                traffic = loop_traffic(solve.lower(S, b).compile().as_text())
                permute = traffic.get("collective-permute", {"sent": 0})
                reduce = traffic.get("all-reduce", {"sent": 0})
                print(
                    f"| {label} | {S.halo} | {kind.name} | {name} | {describe(traffic)} "
                    f"| {kib(permute['sent'])} | {reduce['sent']} |"
                )
    print()


def timed(fn, args, repeats, inner):
    """Best seconds per product, ``inner`` products chained inside one jitted loop.

    The best of ``repeats``, not the median: other processes share these cores, and what
    is measured is the program's own overhead.
    """
    S_or_data, x = args

    @jax.jit
    def loop(S_or_data, x):
        return lax.fori_loop(0, inner, lambda _, v: 0.1 * fn(S_or_data, v), x)

    loop(S_or_data, x).block_until_ready()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        loop(S_or_data, x).block_until_ready()
        times.append((time.perf_counter() - start) / inner)
    return float(np.min(times))


def part_weak_scaling(quick: bool):
    side, planes = (16, 16) if quick else (32, 32)
    repeats, inner = (3, 5) if quick else (9, 20)
    rows = side * side * planes
    print(
        f"## Weak scaling on fake CPU devices ({side} x {side} x {planes} planes = "
        f"{rows:,} rows per device, 7-point stencil, float64)\n"
    )
    print(
        f"{os.cpu_count()} CPU cores shared by all fake devices: times grow with the device "
        "count even when scaling is perfect. Microseconds per product, best of "
        f"{repeats} x {inner} chained products.\n"
    )
    print("| devices | n | unsharded, 1 device | halo | all-gather | XLA auto | halo / unsharded |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for devices in (1, 2, 4, 8):
        A = stencil((side, side, planes * devices))
        mesh = mesh_of(devices)
        S = jaxdia.shard(A, mesh, AXIS)
        x = np.random.default_rng(1).standard_normal(A.shape[0])
        xs = S.shard_vector(x)
        data, auto = auto_design(A, mesh)
        plain = jax.jit(lambda A, v: A @ v)
        results = {
            "plain": timed(plain, (A, jnp.asarray(x)), repeats, inner),
            "halo": timed(halo_design(S), (S, xs), repeats, inner),
            "all-gather": timed(allgather_design(S), (S, xs), repeats, inner),
            "auto": timed(auto, (data, xs), repeats, inner),
        }
        us = {k: v * 1e6 for k, v in results.items()}
        print(
            f"| {devices} | {A.shape[0]:,} | {us['plain']:,.0f} | {us['halo']:,.0f} "
            f"| {us['all-gather']:,.0f} | {us['auto']:,.0f} "
            f"| {results['halo'] / results['plain']:.2f} |"
        )
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repeats")
    parts = ("bytes", "paper", "cg", "scaling")
    parser.add_argument("--only", choices=parts, nargs="+", default=parts, help="parts to run")
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {len(jax.devices())} fake CPU devices\n")
    if "bytes" in args.only:
        part_bytes(args.quick)
    if "paper" in args.only:
        part_extrapolation()
    if "cg" in args.only:
        part_cg(args.quick)
    if "scaling" in args.only:
        part_weak_scaling(args.quick)


if __name__ == "__main__":
    main()
