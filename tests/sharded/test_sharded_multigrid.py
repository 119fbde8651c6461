"""jaxdia.multigrid on a ShardedDiaMatrix (8 and 4 fake CPU devices) against one device:
the grids and levels, a V-cycle, the CG iterations, SciPy's solution, and the collectives
of one compiled iteration (halos and transfer planes on the sharded levels, one all-gather
of the gathered level's residual); odd planes per device, deep halos, errors. The tests
marked ``full`` (``make test-full``) run the full sizes of benchmarks/README.md.
"""

from __future__ import annotations

import contextlib
import math

import jax
import numpy as np
import pytest
import scipy.sparse.linalg as spla
from jax.sharding import AxisType

import jaxdia

from .helpers import (
    close,
    collective_traffic,
    expect_error,
    explicit_mesh_of,
    jump,
    loop_traffic,
    looped,
    poisson,
    poisson_2d,
    put,
    scipy_of,
    spec_of,
)


def _multigrid_case(name):
    """(matrix, grid) of the sharded multigrid checks (the jumping coefficient is
    tests/grids.py's)."""

    grid = {"poisson-2d": (32, 32), "poisson-3d": (16, 8, 8), "jump-2d": (32, 32)}[name]
    matrix = jump(grid) if name.startswith("jump") else poisson(grid)
    return jaxdia.DiaMatrix.from_scipy(matrix), grid


def test_sharded_multigrid_matches_one_device():
    """jaxdia.multigrid on 8 devices: the levels and V-cycle of one device, the same CG
    iterations, and a compiled iteration that exchanges only halos and transfer planes
    on the sharded levels, plus one all-gather of the gathered level's residual."""
    cases = [  # problem, mesh axis type, the matrix as given: sharded or column-sharded
        ("poisson-2d", AxisType.Explicit, "shard"),
        ("poisson-3d", AxisType.Auto, "shard"),
        ("jump-2d", AxisType.Explicit, "columns"),
    ]
    for name, kind, given in cases:
        A, grid = _multigrid_case(name)
        n = A.shape[0]
        rhs = np.random.default_rng(41).standard_normal(n)
        one = jaxdia.multigrid(A, grid)
        _, one_info = jaxdia.cg(A, rhs, M=one, rtol=1e-8)
        mesh = explicit_mesh_of(kind=kind)
        S = jaxdia.shard(A, mesh, "rows")
        operand = (
            S
            if given == "shard"
            else jaxdia.DiaMatrix(put(A.data, mesh, None, "rows"), A.offsets, A.shape)
        )
        with jax.set_mesh(mesh) if given == "columns" else contextlib.nullcontext():
            M = jaxdia.multigrid(operand, grid, gather_below=32)
        assert isinstance(M, jaxdia.ShardedMultigrid) and M.grids == one.grids, (name, M)
        assert 1 <= M.sharded_levels < len(M.grids)
        b = S.shard_vector(rhs)
        if name == "poisson-2d":  # the levels and one cycle (each another compilation)
            for got, want in zip(M.levels, one.levels):
                dense = got.to_dia() if isinstance(got, jaxdia.ShardedDiaMatrix) else got
                close(dense.todense(), want.todense(), 1e-12)
            y = M(b)
            assert spec_of(y) == ("rows",), y.sharding
            close(S.unshard_vector(y), one(rhs), 1e-12)
        solve = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-8, variant="fused"))
        if name == "poisson-2d":  # smoothing with deep halos: one exchange per smoothing
            deep = jaxdia.multigrid(S, grid, gather_below=32, deep_halo=True)
            compiled = solve.lower(S, b, deep).compile()
            _, deep_info = compiled(S, b, deep)
            assert int(deep_info.iterations) == int(one_info.iterations), deep_info
            deep_traffic = loop_traffic(compiled.as_text())["collective-permute"]
            # The CG product's 2, then per sharded level 2 smoothings and 2 transfers.
            assert deep_traffic["count"] == 2 + deep.sharded_levels * (2 * 2 + 2), deep_traffic
            print(f"  poisson-2d, deep halos: collective-permutes {deep_traffic}")
        compiled = solve.lower(S, b, M).compile()
        x, info = compiled(S, b, M)
        assert abs(int(info.iterations) - int(one_info.iterations)) <= 1, (name, info, one_info)
        close(S.unshard_vector(x), spla.spsolve(scipy_of(A).tocsc(), rhs), 1e-6)
        # Per iteration: the CG product's halo; per sharded level, 2 * sweeps products
        # (their halos), one plane out for restriction and one back for interpolation;
        # one all-gather of the gathered level's residual; CG's one all-reduce.
        itemsize = 8
        halo_bytes = 2 * sum(S.halo) * itemsize  # one product of the finest level, as sent
        expected_permutes, expected_bytes = 2, halo_bytes // 2
        for level in range(M.sharded_levels):
            level_grid = M.grids[level]
            plane = math.prod(level_grid[1:])
            lower, upper = M.levels[level].halo
            expected_permutes += 2 * 2 * M.sweeps + (2 if 0 in M.coarsening[level] else 0)
            expected_bytes += 2 * M.sweeps * (lower + upper) * itemsize
            if 0 in M.coarsening[level]:
                coarse_plane = math.prod(M.grids[level + 1][1:])
                expected_bytes += (plane + coarse_plane) * itemsize
        gathered = math.prod(M.grids[M.sharded_levels]) // 8 * itemsize
        traffic = loop_traffic(compiled.as_text())
        assert traffic["collective-permute"]["count"] == expected_permutes, (name, traffic)
        assert traffic["collective-permute"]["sent"] == expected_bytes, (name, traffic)
        assert traffic["all-gather"] == {"count": 1, "sent": gathered, "received": 7 * gathered}
        assert traffic["all-reduce"]["count"] == 1, traffic
        assert collective_traffic(compiled.as_text())["all-gather"]["count"] == 1
        print(
            f"  {name}: {M.sharded_levels} of {len(M.grids)} levels sharded, "
            f"{int(info.iterations)} iterations (one device {int(one_info.iterations)}), {traffic}"
        )


def test_sharded_multigrid_errors_are_clear():
    mesh = explicit_mesh_of()
    A, grid = _multigrid_case("poisson-2d")
    S = jaxdia.shard(A, mesh, "rows")
    expect_error(
        ValueError,
        r"grid\[0\] = 12 is not a multiple of the 8 devices",
        lambda: jaxdia.multigrid(jaxdia.shard(poisson_2d(12), mesh, "rows"), (12, 12)),
    )
    T = jaxdia.shard(poisson_2d(24), mesh, "rows")
    expect_error(
        ValueError,
        r"the hierarchy has one level .* \(lower max_coarse\)",
        lambda: jaxdia.multigrid(jaxdia.shard(poisson_2d(16), mesh, "rows"), (16, 16)),
    )
    expect_error(
        TypeError, "coarsening='auto'", lambda: jaxdia.multigrid(S, grid, coarsening="auto")
    )
    # Coarsening the fast axis first keeps the shards aligned whatever their planes.
    M = jaxdia.multigrid(T, (24, 24), coarsening=[(1,), (1,)], gather_below=8)
    assert M.sharded_levels == 2, M


def sharded_multigrid_like_one_device(matrix, grid, devices, kind, smoother, **options):
    """jaxdia.multigrid on ``devices`` devices against one device: the same grids and
    levels, one V-cycle to rounding, the same iterations of fused CG, and SciPy's
    solution. Returns the sharded multigrid and the compiled solve's HLO text."""
    A = jaxdia.DiaMatrix.from_scipy(matrix)
    rhs = np.random.default_rng(43).standard_normal(A.shape[0])
    sharded_only = {k: options.pop(k) for k in ("gather_below",) if k in options}
    one = jaxdia.multigrid(A, grid, smoother=smoother, **options)
    _, one_info = jaxdia.cg(A, rhs, M=one, rtol=1e-8, variant="fused")
    mesh = jax.make_mesh((devices,), ("rows",), axis_types=(kind,), devices=jax.devices()[:devices])
    S = jaxdia.shard(A, mesh, "rows")
    M = jaxdia.multigrid(S, grid, smoother=smoother, **options, **sharded_only)
    case = (grid, devices, kind.name, smoother, options, sharded_only)
    assert isinstance(M, jaxdia.ShardedMultigrid) and M.grids == one.grids, (case, M)
    for got, want in zip(M.levels, one.levels):
        got = got.to_dia() if isinstance(got, jaxdia.ShardedDiaMatrix) else got
        if got.shape[0] <= 4096:
            close(got.todense(), want.todense(), 1e-12)
        else:  # the full tier's fine levels: their products (dense would take gigabytes)
            v = np.random.default_rng(got.shape[0]).standard_normal(got.shape[0])
            close(got @ v, want @ v, 1e-12)
    b = S.shard_vector(rhs)
    want = np.asarray(one(rhs))
    scale = np.abs(want).max()
    close(S.unshard_vector(M(b)) / scale, want / scale, 1e-12)
    solve = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-8, variant="fused"))
    compiled = solve.lower(S, b, M).compile()
    x, info = compiled(S, b, M)
    assert spec_of(x) == ("rows",), (case, x.sharding)
    assert int(info.iterations) == int(one_info.iterations), (case, info, one_info)
    expected = spla.spsolve(matrix.tocsc(), rhs)
    scale = np.abs(expected).max()
    close(S.unshard_vector(x) / scale, expected / scale, 1e-6)
    print(
        f"  {grid} on {devices} devices ({kind.name}, {smoother}, {options | sharded_only}): "
        f"{M.sharded_levels} of {len(M.grids)} levels sharded, {int(info.iterations)} iterations"
    )
    return M, compiled.as_text()


def test_sharded_multigrid_gathered_27_point_level():
    """A gathered 3-D level that is smoothed (not the coarsest) has 27 diagonals, which
    multiply as one loop over them on CPU, inside the gathered levels' shard_map (the
    32^3 grid's on 8 devices: this file's full tier)."""

    M, _ = sharded_multigrid_like_one_device(
        poisson((16, 8, 8)), (16, 8, 8), 8, AxisType.Explicit, "chebyshev", max_coarse=16
    )
    assert M.sharded_levels < len(M.grids) - 1, M
    assert looped(M.levels[M.sharded_levels]), M


@pytest.mark.full  # a minute of compiles: the other sharded hierarchies stay fast
def test_sharded_multigrid_odd_planes_per_device():
    """Grids whose levels split into an odd number of planes per device (grid[0] = P m,
    m odd): the level stays sharded, and the next one is gathered through a restriction
    of the coarse planes each device owns and one all-gather (the levels below are
    replicated). 2-D and 3-D, 1, 3 and 5 planes per device, 8 and 4 devices, down to a
    coarsest level of one unknown; a compiled iteration moves the sharded level's halos,
    one plane each way for the restriction, and the gathered level's residual."""

    cases = [  # matrix, grid, devices, axis type, smoother, options
        (poisson((24, 24)), (24, 24), 8, AxisType.Explicit, "chebyshev", {}),
        (jump((40, 40)), (40, 40), 8, AxisType.Auto, "jacobi", {}),
        (poisson((8, 16)), (8, 16), 8, AxisType.Explicit, "jacobi", {"max_coarse": 1}),
        # 3-D: the gathered level (12, 4, 4) is smoothed with its 27 diagonals.
        (poisson((24, 8, 8)), (24, 8, 8), 8, AxisType.Auto, "chebyshev", {"max_coarse": 16}),
        # Level 1 has 3 planes per device: it stays sharded, level 2 is gathered.
        (
            jump((24, 16)),
            (24, 16),
            4,
            AxisType.Explicit,
            "chebyshev",
            {"max_coarse": 4, "gather_below": 8},
        ),
    ]
    for matrix, grid, devices, kind, smoother, options in cases:
        M, hlo = sharded_multigrid_like_one_device(matrix, grid, devices, kind, smoother, **options)
        last = M.sharded_levels - 1
        assert (M.grids[last][0] // devices) % 2 == 1 and 0 in M.coarsening[last], M
        if grid == (24, 8, 8):
            assert looped(M.levels[M.sharded_levels]), M
        if grid == (24, 16):
            assert M.sharded_levels == 2, M
        if grid == (24, 24):
            # CG's product, 2 * sweeps smoothing products and one plane each way for the
            # restriction (collective-permutes), and one all-gather of the gathered
            # level's residual: each device sends ceil(3 / 2) = 2 coarse planes of 12.
            traffic = loop_traffic(hlo)
            assert traffic["collective-permute"]["count"] == 2 + 2 * 2 * M.sweeps + 2, traffic
            sent = 2 * 12 * 8
            assert traffic["all-gather"] == {"count": 1, "sent": sent, "received": 7 * sent}
            assert traffic["all-reduce"]["count"] == 1, traffic


@pytest.mark.full
def test_full_sharded_multigrid_3d():
    """3-D grids at full size on 8 devices, both smoothers: 32^3 (4 planes per device;
    its gathered level, 16^3, is smoothed with the loop over its 27 diagonals) and 24^3
    (3 planes per device)."""

    for grid, kind, smoother in (
        ((32, 32, 32), AxisType.Explicit, "chebyshev"),
        ((32, 32, 32), AxisType.Auto, "jacobi"),
        ((24, 24, 24), AxisType.Explicit, "chebyshev"),
        ((24, 24, 24), AxisType.Auto, "jacobi"),
    ):
        M, _ = sharded_multigrid_like_one_device(poisson(grid), grid, 8, kind, smoother)
        assert looped(M.levels[M.sharded_levels]), M


@pytest.mark.full
def test_full_sharded_multigrid_2d():
    """2-D grids of benchmarks/bench_distributed.py's sizes on 8 devices, both smoothers,
    and one with 15 planes per device."""

    for matrix, grid, kind, smoother in (
        (poisson((256, 256)), (256, 256), AxisType.Explicit, "chebyshev"),
        (poisson((128, 128)), (128, 128), AxisType.Auto, "jacobi"),
        (jump((120, 120)), (120, 120), AxisType.Explicit, "chebyshev"),
    ):
        sharded_multigrid_like_one_device(matrix, grid, 8, kind, smoother)
