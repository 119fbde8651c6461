"""Krylov solvers on a ShardedDiaMatrix (8 fake CPU devices): JAX's cg, gmres and bicgstab
and jaxdia.cg/bicgstab (standard and fused) against SciPy, with Jacobi, gradients through
the solve, a 2-D mesh of rows and right-hand sides, and the collectives of one compiled
iteration.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse.linalg as spla
from jax.scipy.sparse import linalg as jla
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import jaxdia

from .helpers import (
    auto_mesh,
    close,
    collective_bytes,
    expect_error,
    explicit_mesh_of,
    krylov_iteration_traffic,
    loop_traffic,
    poisson_2d,
    put,
    scipy_of,
    spec_of,
)


def test_hlo_of_grad_and_cg_has_no_all_gather():
    A = poisson_2d(16)
    S = jaxdia.shard(A, auto_mesh(), "rows")
    b = S.shard_vector(np.ones(256))
    solve = jax.jit(lambda S, b: jla.cg(S, b, tol=1e-10, maxiter=500)[0])
    hlo = solve.lower(S, b).compile().as_text()
    assert "collective-permute" in hlo and "all-gather" not in hlo
    loss = jax.jit(jax.grad(lambda S, b: jnp.sum(jnp.sin(S @ b)), argnums=(0, 1)))
    hlo = loss.lower(S, b).compile().as_text()
    assert "collective-permute" in hlo and "all-gather" not in hlo


def test_cg_poisson_matches_unsharded_and_scipy():
    for side in (16, 15):  # 256 rows (divisible by 8) and 225 rows (padded to 232)
        A = poisson_2d(side)
        n = side * side
        S = jaxdia.shard(A, auto_mesh(), "rows")
        rhs = np.random.default_rng(side).standard_normal(n)
        x_sharded, _ = jax.jit(lambda S, b: jla.cg(S, b, tol=1e-12, maxiter=1000))(
            S, S.shard_vector(rhs)
        )
        assert x_sharded.sharding.spec == PartitionSpec("rows"), x_sharded.sharding
        assert not np.any(np.asarray(x_sharded)[n:])
        x_plain, _ = jax.jit(lambda A, b: jla.cg(A, b, tol=1e-12, maxiter=1000))(A, rhs)
        close(S.unshard_vector(x_sharded), x_plain, 1e-9)
        close(S.unshard_vector(x_sharded), spla.spsolve(scipy_of(A).tocsc(), rhs), 1e-9)


def test_gmres_and_bicgstab():
    rng = np.random.default_rng(9)
    A = jaxdia.DiaMatrix(np.asarray(poisson_2d(8).data), (-8, -1, 0, 1, 8), (64, 64))
    data = np.asarray(A.data).copy()
    data[3] += 0.3 * rng.standard_normal(64)  # nonsymmetric
    A = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    S = jaxdia.shard(A, auto_mesh(), "rows")
    rhs = rng.standard_normal(64)
    expected = spla.spsolve(scipy_of(A).tocsc(), rhs)
    for solver in (jla.gmres, jla.bicgstab):
        x, _ = jax.jit(lambda S, b: solver(S, b, tol=1e-12, atol=0.0, maxiter=500))(
            S, S.shard_vector(rhs)
        )
        close(S.unshard_vector(x), expected, 1e-8)


def test_grad_through_cg():
    """d/d(data) and d/d(b) of a loss of cg's solution, sharded vs unsharded."""
    side = 8
    A = poisson_2d(side)
    mesh = auto_mesh()
    rhs = np.random.default_rng(11).standard_normal(side * side)

    def sharded(d, b):
        S = jaxdia.shard(jaxdia.DiaMatrix(d, A.offsets, A.shape), mesh, "rows")
        x, _ = jla.cg(S, S.shard_vector(b), tol=1e-13, maxiter=500)
        return jnp.sum(S.unshard_vector(x) ** 2)

    def plain(d, b):
        x, _ = jla.cg(jaxdia.DiaMatrix(d, A.offsets, A.shape), b, tol=1e-13, maxiter=500)
        return jnp.sum(x**2)

    got = jax.jit(jax.grad(sharded, argnums=(0, 1)))(A.data, rhs)
    want = jax.jit(jax.grad(plain, argnums=(0, 1)))(A.data, rhs)
    for g, w in zip(got, want):
        close(g, w, 1e-8)


def _solve_on(mesh, S, b, solver, jacobi=False):
    """``solver(S, b)`` under jit; on Explicit axes inside ``jax.sharding.auto_axes``
    (JAX's Krylov solvers call jnp.vdot, which Explicit-sharded vectors refuse). The
    preconditioner is built inside, from the matrix the region sees."""

    def solve(S, b):
        M = jaxdia.jacobi(S) if jacobi else None
        return solver(S, b, tol=1e-12, atol=0.0, maxiter=500, M=M)[0]

    if AxisType.Explicit in mesh.axis_types:
        solve = jax.sharding.auto_axes(solve, out_sharding=S.vector_sharding)
    return jax.jit(solve)


def test_krylov_solves_with_jacobi_on_both_axis_types():
    """cg and gmres with jaxdia.jacobi(S) on a ShardedDiaMatrix, Explicit and Auto: the
    SciPy solution, the vectors' sharding, zero padding rows."""
    side = 15
    A = poisson_2d(side)  # 225 rows, padded to 232
    data = np.asarray(A.data).copy()
    data[2] *= np.linspace(1.0, 3.0, side * side)  # a diagonal Jacobi can improve on
    A = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    rhs = np.random.default_rng(25).standard_normal(side * side)
    expected = spla.spsolve(scipy_of(A).tocsc(), rhs)
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of(kind=kind)
        S = jaxdia.shard(A, mesh, "rows")
        M = jaxdia.jacobi(S)
        diagonal = S.diagonal()
        assert spec_of(diagonal) == ("rows",) and diagonal.shape == (S.padded_size,)
        close(np.asarray(diagonal)[: side * side], A.diagonal())
        assert np.all(np.asarray(diagonal)[side * side :] == 1.0)
        b = S.shard_vector(rhs)
        close(S.unshard_vector(M(b)), rhs / np.asarray(A.diagonal()))
        for solver in (jla.cg, jla.gmres):
            x = _solve_on(mesh, S, b, solver, jacobi=True)(S, b)
            assert spec_of(x) == ("rows",), x.sharding
            assert not np.any(np.asarray(x)[side * side :])
            close(S.unshard_vector(x), expected, 1e-9)
    # grad through shard and a preconditioned cg, all inside one auto_axes region.
    mesh = explicit_mesh_of()

    def loss(d, b, sharded=True):
        A_ = jaxdia.DiaMatrix(d, A.offsets, A.shape)
        S = jaxdia.shard(A_, mesh, "rows") if sharded else A_
        b = S.shard_vector(b) if sharded else b
        x = jla.cg(S, b, tol=1e-13, maxiter=500, M=jaxdia.jacobi(S))[0]
        return jnp.sum((S.unshard_vector(x) if sharded else x) ** 2)

    region = jax.sharding.auto_axes(loss, out_sharding=NamedSharding(mesh, PartitionSpec()))
    with jax.set_mesh(mesh):
        got = jax.jit(jax.grad(region, argnums=(0, 1)))(A.data, rhs)
    want = jax.grad(functools.partial(loss, sharded=False), argnums=(0, 1))(A.data, rhs)
    for g, w in zip(got, want):
        close(g, w, 1e-8)
    zero = jaxdia.DiaMatrix(np.ones((1, 16)), (1,), (16, 16))
    try:
        jaxdia.jacobi(jaxdia.shard(zero, explicit_mesh_of(), "rows"))
    except ValueError as error:
        assert "diagonal must be nonzero, but it is 0 at index 0" in str(error), error
    else:
        raise AssertionError("jacobi accepted a sharded matrix with a zero diagonal")


def test_cg_iteration_communication():
    """One PCG iteration on 8 devices, read from the compiled loop: the halo rows of one
    product (2 collective-permutes) and 3 scalar all-reduces, on both axis types."""
    for side in (32, 64):
        A = poisson_2d(side)  # 5-point stencil: halo of side rows each way
        for kind in (AxisType.Explicit, AxisType.Auto):
            mesh = explicit_mesh_of(kind=kind)
            S = jaxdia.shard(A, mesh, "rows")
            b = S.shard_vector(np.ones(side * side))
            hlo = _solve_on(mesh, S, b, jla.cg, jacobi=True).lower(S, b).compile().as_text()
            per_iteration = loop_traffic(hlo)
            assert "all-gather" not in hlo
            assert per_iteration["collective-permute"] == {
                "count": 2,
                "sent": 2 * side * 8,
                "received": 2 * side * 8,
            }, per_iteration
            assert per_iteration["all-reduce"] == {"count": 3, "sent": 24, "received": 24}, (
                per_iteration
            )
            print(f"  cg iteration, {side}x{side} grid, {kind}: {per_iteration}")


def test_two_d_mesh_rows_and_right_hand_sides():
    """Rows over one mesh axis, a block of right-hand sides over the other: S @ B and a
    solve per column keep both splits and gather nothing; the same for a plain DiaMatrix
    with its columns split (Explicit)."""
    A = poisson_2d(16)
    n = 256
    rhs = np.random.default_rng(26).standard_normal((n, 6))
    expected = np.linalg.solve(scipy_of(A).toarray(), rhs)
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of((4, 2), ("rows", "rhs"), kind)
        S = jaxdia.shard(A, mesh, "rows")
        B = put(S.shard_vector(rhs), mesh, "rows", "rhs")
        assert spec_of(S.shard_vector(B[:n])) == ("rows", "rhs")
        with jax.set_mesh(mesh):
            product = jax.jit(lambda S, B: S @ B)
            Y = product(S, B)
            assert spec_of(Y) == ("rows", "rhs"), Y.sharding
            close(S.unshard_vector(Y), scipy_of(A) @ rhs)
            # 16 halo rows each way, 3 of the 6 columns on each device.
            traffic = collective_bytes(product.lower(S, B).compile().as_text())
            assert traffic == {"collective-permute": 2 * 16 * 3 * 8}, traffic

            def solve(S, B):
                M = jaxdia.jacobi(S)
                one = lambda b: jla.cg(S, b, tol=1e-12, maxiter=500, M=M)[0]  # noqa: E731
                return jax.vmap(one, in_axes=1, out_axes=1)(B)

            if kind == AxisType.Explicit:
                solve = jax.sharding.auto_axes(
                    solve, out_sharding=NamedSharding(mesh, B.sharding.spec)
                )
            solve = jax.jit(solve)
            X = solve(S, B)
            assert spec_of(X) == ("rows", "rhs"), X.sharding
            close(S.unshard_vector(X), expected, 1e-9)
            assert "all-gather" not in solve.lower(S, B).compile().as_text()
            if kind == AxisType.Explicit:
                plain = jaxdia.DiaMatrix(put(A.data, mesh, None, "rows"), A.offsets, A.shape)
                Bp = put(rhs, mesh, "rows", "rhs")
                product = jax.jit(lambda A, B: A @ B)
                Y = product(plain, Bp)
                assert spec_of(Y) == ("rows", "rhs"), Y.sharding
                close(Y, scipy_of(A) @ rhs)
                traffic = collective_bytes(product.lower(plain, Bp).compile().as_text())
                assert traffic == {"collective-permute": 2 * 16 * 3 * 8}, traffic


def test_jaxdia_solvers_on_a_sharded_matrix():
    """jaxdia.cg and jaxdia.bicgstab take a ShardedDiaMatrix directly on both axis types
    (no auto_axes region): SciPy's solution, sharded results; variant="fused" compiles
    to one all-reduce per CG iteration (3 standard) and two per BiCGStab iteration (3
    standard with Jacobi: one iteration per loop body), with the product's halo exchange
    unchanged."""
    side = 32
    A = poisson_2d(side)
    data = np.asarray(A.data).copy()
    data[3] *= 0.7  # nonsymmetric, for BiCGStab
    N = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    rhs = np.random.default_rng(40).standard_normal(side * side)
    expected = {
        "cg": spla.spsolve(scipy_of(A).tocsc(), rhs),
        "bicgstab": spla.spsolve(scipy_of(N).tocsc(), rhs),
    }
    # Standard BiCGStab with a small M (Jacobi) runs one iteration per loop body, whose
    # independent reductions compile into 3 all-reduces; fused: one per half step.
    counts = {("cg", "standard"): {3}, ("cg", "fused"): {1}, ("bicgstab", "standard"): {3}}
    counts["bicgstab", "fused"] = {2}
    # Every method and variant on Explicit axes; one on Auto axes (bench_sharded.py shows
    # the compiled loops are the same on both).
    runs = [(AxisType.Explicit, *key) for key in counts] + [(AxisType.Auto, "cg", "fused")]
    for kind, method, variant in runs:
        S = jaxdia.shard(A if method == "cg" else N, explicit_mesh_of(kind=kind), "rows")
        b = S.shard_vector(rhs)
        solve = functools.partial(getattr(jaxdia, method), rtol=1e-10, variant=variant)
        compiled = jax.jit(lambda S, b, M: solve(S, b, M=M)).lower(S, b, jaxdia.jacobi(S))  # noqa: B023
        compiled = compiled.compile()
        x, info = compiled(S, b, jaxdia.jacobi(S))
        assert bool(info.converged) and spec_of(x) == ("rows",), (method, variant)
        close(S.unshard_vector(x), expected[method], 1e-8)
        hlo = compiled.as_text()
        assert "all-gather" not in hlo, (method, variant, kind)
        # Standard BiCGStab with Jacobi runs one iteration per loop body, the fused one
        # a half iteration per body.
        half_steps = (method, variant) == ("bicgstab", "fused")
        traffic = krylov_iteration_traffic(hlo, half_steps=half_steps)
        assert traffic["all-reduce"]["count"] in counts[method, variant], traffic
        assert traffic["collective-permute"]["count"] == (4 if method == "bicgstab" else 2)
        print(f"  {method} {variant} {kind}: {int(info.iterations)} iterations, {traffic}")
    # The eager jacobi on a sharded matrix, and a length-n b that needs padding.
    S = jaxdia.shard(poisson_2d(15), explicit_mesh_of(), "rows")
    expect_error(ValueError, r"A.shard_vector\(b\)", lambda: jaxdia.cg(S, np.ones(225)))
