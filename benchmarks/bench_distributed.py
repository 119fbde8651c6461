"""Preconditioned CG on 8 fake CPU devices: collectives per iteration and iteration counts.

Usage::

    python benchmarks/bench_distributed.py [--quick] [--only collectives iterations]

Part 1 reads the collectives of one iteration of ``jaxdia.cg`` on a ``ShardedDiaMatrix``
from the compiled ``while`` loop (body and condition, each run once per iteration:
``loop_traffic`` in ``tests/sharded/helpers.py``), for Jacobi, Chebyshev (plain and with a
deep halo) and multigrid (plain and with deep-halo smoothing) preconditioners, with
``variant="standard"`` and ``variant="fused"``. Each solve is first checked against
SciPy's ``spsolve``.

Part 2 compares the CG iterations (to ``rtol=1e-8``) of ``jaxdia.multigrid`` on a matrix
sharded over 2, 4 and 8 devices with those on one device, for 2-D and 3-D Poisson grids of
growing size. The fake devices share this machine's cores, so no times are reported: what
the compiled program holds and how many iterations it takes do not depend on the load.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from jax.sharding import AxisType  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jaxdia  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.sharded.helpers import loop_traffic  # noqa: E402

KINDS = ("all-reduce", "collective-permute", "all-gather")


def poisson(grid: tuple[int, ...]) -> sp.csr_array:
    """The 5-/7-point Laplacian on ``grid`` (the last axis fastest)."""
    total = sp.csr_array((int(np.prod(grid)),) * 2)
    for axis, size in enumerate(grid):
        one = 2 * sp.eye_array(size) - sp.eye_array(size, k=1) - sp.eye_array(size, k=-1)
        factors = [sp.eye_array(s) if a != axis else one for a, s in enumerate(grid)]
        term = factors[0]
        for factor in factors[1:]:
            term = sp.kron(term, factor)
        total = total + term
    return sp.csr_array(total)


def mesh_of(devices: int):
    return jax.make_mesh(
        (devices,), ("rows",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:devices]
    )


def label(grid):
    return " x ".join(map(str, grid))


def part_collectives(quick: bool):
    grids = [(256, 256)] if quick else [(256, 256), (32, 32, 32)]
    print("## Collectives per CG iteration (jaxdia.cg, 8 fake CPU devices, float64)\n")
    print("| grid | preconditioner | variant | all-reduce | collective-permute | all-gather |")
    print("|---|---|---|---:|---:|---:|")
    for grid in grids:
        A = poisson(grid)
        rhs = np.random.default_rng(0).standard_normal(A.shape[0])
        want = spla.spsolve(A.tocsc(), rhs)
        S = jaxdia.shard(jaxdia.DiaMatrix.from_scipy(A.todia()), mesh_of(8), "rows")
        b = S.shard_vector(rhs)
        preconditioners = {
            "jacobi": jaxdia.jacobi(S),
            "chebyshev(4)": jaxdia.chebyshev(S, 4),
            "chebyshev(4, deep_halo)": jaxdia.chebyshev(S, 4, deep_halo=True),
            "multigrid": jaxdia.multigrid(S, grid),
            "multigrid(deep_halo)": jaxdia.multigrid(S, grid, deep_halo=True),
        }
        for name, M in preconditioners.items():
            for variant in ("standard", "fused"):
                solve = jax.jit(
                    lambda S, b, M, variant=variant: jaxdia.cg(
                        S, b, M=M, rtol=1e-9, maxiter=2000, variant=variant
                    )
                )
                compiled = solve.lower(S, b, M).compile()
                x, info = compiled(S, b, M)
                error = np.max(np.abs(np.asarray(S.unshard_vector(x)) - want))
                assert bool(info.converged) and error < 1e-6 * np.max(np.abs(want)), (
                    name,
                    variant,
                    info,
                    error,
                )
                traffic = loop_traffic(compiled.as_text())
                counts = [str(traffic.get(kind, {"count": 0})["count"]) for kind in KINDS]
                print(f"| {label(grid)} | {name} | {variant} | {' | '.join(counts)} |")
    print()


def part_iterations(quick: bool):
    grids = [(128, 128), (256, 256), (32, 32, 32)]
    if not quick:
        grids += [(512, 512), (64, 64, 64)]
    print("## Multigrid-CG iterations to rtol=1e-8: sharded vs one device (float64)\n")
    print("| grid | n | 1 device | 2 devices | 4 devices | 8 devices | sharded levels (8) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for grid in grids:
        A = poisson(grid)
        rhs = np.random.default_rng(1).standard_normal(A.shape[0])
        dia = jaxdia.DiaMatrix.from_scipy(A.todia())
        _, info = jaxdia.cg(dia, rhs, M=jaxdia.multigrid(dia, grid), rtol=1e-8)
        row = [str(int(info.iterations))]
        levels = 0
        for devices in (2, 4, 8):
            S = jaxdia.shard(dia, mesh_of(devices), "rows")
            M = jaxdia.multigrid(S, grid)
            assert isinstance(M, jaxdia.ShardedMultigrid)
            _, info = jaxdia.cg(S, S.shard_vector(rhs), M=M, rtol=1e-8)
            assert bool(info.converged), (grid, devices, info)
            row.append(str(int(info.iterations)))
            levels = M.sharded_levels
        print(f"| {label(grid)} | {A.shape[0]:,} | {' | '.join(row)} | {levels} |")
    print()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smaller sizes only")
    parser.add_argument("--only", nargs="*", default=["collectives", "iterations"])
    args = parser.parse_args()
    print(f"jax {jax.__version__}, {jax.device_count()} devices\n")
    if "collectives" in args.only:
        part_collectives(args.quick)
    if "iterations" in args.only:
        part_iterations(args.quick)


if __name__ == "__main__":
    main()
