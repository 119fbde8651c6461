"""Chebyshev preconditioners on a ShardedDiaMatrix (8 fake CPU devices): the unsharded
polynomial and solve, and the halo exchanges of one compiled CG iteration, plain and with
a deep halo.
"""

from __future__ import annotations

import jax
import numpy as np
import scipy.sparse.linalg as spla
from jax.scipy.sparse import linalg as jla
from jax.sharding import AxisType

import jaxdia

from .helpers import (
    close,
    expect_error,
    explicit_mesh_of,
    loop_traffic,
    poisson_2d,
    scipy_of,
    spec_of,
)


def test_chebyshev_on_a_sharded_matrix():
    """jaxdia.chebyshev(S): Gershgorin's bound and the polynomial from sharded products
    only; preconditioned cg matches the unsharded solve on both axis types, and one
    iteration adds (degree - 1) halo exchanges and no all-reduce to Jacobi-CG's."""
    side, degree = 16, 4
    A = poisson_2d(side)
    rhs = np.random.default_rng(31).standard_normal(side * side)
    unsharded = jaxdia.chebyshev(A, degree)
    expected = jla.cg(A, rhs, tol=1e-12, maxiter=500, M=unsharded)[0]
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of(kind=kind)
        S = jaxdia.shard(A, mesh, "rows")
        M = jaxdia.chebyshev(S, degree)
        close(M.upper, unsharded.upper)
        b = S.shard_vector(rhs)
        close(S.unshard_vector(M(b)), unsharded(rhs), 1e-12)

        def solve(S, b):
            return jla.cg(S, b, tol=1e-12, atol=0.0, maxiter=500, M=jaxdia.chebyshev(S, degree))[0]

        if kind == AxisType.Explicit:
            solve = jax.sharding.auto_axes(solve, out_sharding=S.vector_sharding)
        compiled = jax.jit(solve).lower(S, b).compile()
        x = compiled(S, b)
        assert spec_of(x) == ("rows",), x.sharding
        close(S.unshard_vector(x), expected, 1e-9)
        hlo = compiled.as_text()
        assert "all-gather" not in hlo
        per_iteration = loop_traffic(hlo)
        assert per_iteration["collective-permute"]["count"] == 2 * degree, per_iteration
        assert per_iteration["all-reduce"]["count"] == 3, per_iteration
        print(f"  chebyshev-cg iteration, degree {degree}, {kind}: {per_iteration}")


def test_deep_halo_chebyshev():
    """jaxdia.chebyshev(S, 4, deep_halo=True): the same polynomial after one exchange, so
    a CG iteration has 4 collective-permutes (its product's 2, then 2) instead of 8,
    sending the same bytes (chebyshev_on_a_sharded_matrix counts the 8)."""
    side, degree = 32, 4
    A = poisson_2d(side)
    rhs = np.random.default_rng(42).standard_normal(side * side)
    S = jaxdia.shard(A, explicit_mesh_of(), "rows")
    b = S.shard_vector(rhs)
    deep, plain = jaxdia.chebyshev(S, degree, deep_halo=True), jaxdia.chebyshev(S, degree)
    y = deep(b)
    assert spec_of(y) == ("rows",), y.sharding
    close(y, plain(b), 1e-12)
    compiled = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-10)).lower(S, b, deep)
    compiled = compiled.compile()
    x, info = compiled(S, b, deep)
    close(S.unshard_vector(x), spla.spsolve(scipy_of(A).tocsc(), rhs), 1e-8)
    traffic = loop_traffic(compiled.as_text())
    halo = 2 * side * 8  # one product's halo rows, as sent
    assert traffic["collective-permute"] == {
        "count": 4,
        "sent": degree * halo,
        "received": degree * halo,
    }, traffic
    print(f"  deep-halo chebyshev-cg: {int(info.iterations)} iterations, {traffic}")
    expect_error(
        TypeError,
        "deep_halo=True is for a ShardedDiaMatrix",
        lambda: jaxdia.chebyshev(A, 4, deep_halo=True),
    )
