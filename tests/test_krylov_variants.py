"""jaxdia.cg / jaxdia.bicgstab with ``variant="fused"`` (one reduction per step) against
the standard loops and SciPy; batches; a ShardedDiaMatrix on one device. The sharded
programs' collective counts are checked on 8 devices (tests/sharded/)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

from .helpers import convection_diffusion, poisson, relative_error


def scipy_iterations(solver, S, b, rtol, M=None):
    """SciPy's solution and iteration count (its callback runs once per iteration)."""
    count = [0]

    def callback(_):
        count[0] += 1

    x, _ = solver(S.tocsr(), b, rtol=rtol, atol=0.0, maxiter=100_000, M=M, callback=callback)
    return x, count[0]


def badly_scaled(n, spread, seed=0):
    """``D (T + 1e-3 I) D`` for the 1-D Laplacian ``T`` and a shuffled diagonal ``D^2``
    spanning ``10^spread``: SPD with condition number near ``10^(spread + 2)``."""
    rng = np.random.default_rng(seed)
    d = np.logspace(-spread / 2, spread / 2, n)
    rng.shuffle(d)
    root = sp.diags_array(np.sqrt(d))
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))
    return (root @ (T + 1e-3 * sp.eye_array(n)) @ root).todia()


@pytest.mark.parametrize("preconditioner", ["none", "multigrid"])
def test_fused_cg_matches_standard_and_scipy(preconditioner):
    side = 16
    S = poisson(side, 2).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(1).standard_normal(side * side)
    M = {
        "none": None,
        "jacobi": jaxdia.jacobi(A),
        "multigrid": jaxdia.multigrid(A, (side, side)),
    }[preconditioner]
    exact = spla.spsolve(S.tocsc(), b)
    standard = jaxdia.cg(A, b, M=M, rtol=1e-10)
    fused = jaxdia.cg(A, b, M=M, rtol=1e-10, variant="fused")
    assert int(fused[1].iterations) == int(standard[1].iterations)
    assert bool(fused[1].converged)
    assert relative_error(fused[0], exact) < 1e-9
    if preconditioner == "none":
        assert abs(int(fused[1].iterations) - scipy_iterations(spla.cg, S, b, 1e-10)[1]) <= 1


@pytest.mark.parametrize("spread, extra", [(4, 0.25), (6, 0.5)])
def test_fused_cg_on_ill_conditioned_problems(spread, extra):
    """Condition numbers about 2e6 and 2e8: with Jacobi the same iterations as standard
    CG and SciPy; unpreconditioned, a badly scaled problem costs the fused recurrence
    more iterations (the stability note in jaxdia.cg's docstring), bounded here."""
    S = badly_scaled(300, spread)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(2).standard_normal(300)
    exact = spla.spsolve(S.tocsc(), b)
    _, scipy_count = scipy_iterations(spla.cg, S, b, 1e-8, M=sp.diags_array(1 / S.diagonal()))
    x, info = jaxdia.cg(A, b, M=jaxdia.jacobi(A), rtol=1e-8, variant="fused")
    assert bool(info.converged) and abs(int(info.iterations) - scipy_count) <= 2
    assert relative_error(x, exact) < 1e-8
    _, standard = jaxdia.cg(A, b, rtol=1e-8, maxiter=100_000)
    x, fused = jaxdia.cg(A, b, rtol=1e-8, maxiter=100_000, variant="fused")
    assert bool(fused.converged) and relative_error(x, exact) < 1e-6
    assert (
        int(standard.iterations) <= int(fused.iterations) <= (1 + extra) * int(standard.iterations)
    )


def test_fused_bicgstab_matches_scipy(preconditioned=True):
    side = 20
    S = convection_diffusion(side).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = np.random.default_rng(3).standard_normal(side * side)
    M = jaxdia.jacobi(A) if preconditioned else None
    exact = spla.spsolve(S.tocsc(), b)
    _, count = scipy_iterations(
        spla.bicgstab, S, b, 1e-10, M=sp.diags_array(1 / S.diagonal()) if preconditioned else None
    )
    _, standard = jaxdia.bicgstab(A, b, M=M, rtol=1e-10)
    x, fused = jaxdia.bicgstab(A, b, M=M, rtol=1e-10, variant="fused")
    assert bool(fused.converged) and relative_error(x, exact) < 1e-8
    assert abs(int(fused.iterations) - int(standard.iterations)) <= 2
    assert abs(int(fused.iterations) - count) <= max(2, count // 10)


def test_fused_bicgstab_on_a_badly_scaled_problem():
    """Row scaling spanning 1e4, Jacobi-preconditioned: within 15% of the standard loop
    (the recurrence for ``rho`` rounds differently; 81 against 73 iterations here)."""
    side = 24
    rng = np.random.default_rng(4)
    scale = np.logspace(-2, 2, side * side)
    rng.shuffle(scale)
    S = (sp.diags_array(scale) @ convection_diffusion(side)).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rng.standard_normal(side * side)
    _, standard = jaxdia.bicgstab(A, b, M=jaxdia.jacobi(A), rtol=1e-8)
    x, fused = jaxdia.bicgstab(A, b, M=jaxdia.jacobi(A), rtol=1e-8, variant="fused")
    assert bool(fused.converged)
    assert relative_error(x, spla.spsolve(S.tocsc(), b)) < 1e-6
    assert abs(int(fused.iterations) - int(standard.iterations)) <= 0.15 * int(standard.iterations)


@pytest.mark.parametrize("variant", ["standard", "fused"])
def test_batched_systems_stop_on_their_own(variant):
    """Each system of a batch takes the iterations it takes alone, for CG and BiCGStab:
    also one that stops half way through a BiCGStab iteration while others go on."""
    n = 40
    T = sp.diags_array([-1.2, 2.5, -0.8], offsets=[-1, 0, 1], shape=(n, n))
    N = jaxdia.DiaMatrix.from_scipy(T.todia())
    H = jaxdia.DiaMatrix.from_scipy(poisson(n, 1).todia())
    rng = np.random.default_rng(5)
    b = np.stack([T @ np.eye(n)[0], rng.standard_normal(n), np.zeros(n)])
    for solve, A, rtol in (
        (jaxdia.bicgstab, N, 1e-3),
        (jaxdia.bicgstab, N, 1e-9),
        (jaxdia.cg, H, 1e-8),
    ):
        x, info = solve(A, b, rtol=rtol, variant=variant)
        for i in range(len(b)):
            xi, one = solve(A, b[i], rtol=rtol, variant=variant)
            assert int(info.iterations[i]) == int(one.iterations), (solve, rtol, i)
            np.testing.assert_allclose(x[i], xi, rtol=1e-12, atol=1e-12)
        assert bool(np.all(info.converged))


def test_fused_cg_complex_hermitian_and_grad():
    n = 30
    rng = np.random.default_rng(6)
    upper = 0.4 * (rng.standard_normal(n) + 1j * rng.standard_normal(n))
    S = sp.diags_array(
        [np.conj(upper[:-1]), 2.5 * np.ones(n), upper[:-1]], offsets=[-1, 0, 1], shape=(n, n)
    ).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rng.standard_normal(n) + 1j * rng.standard_normal(n)
    x, info = jaxdia.cg(A, b, rtol=1e-12, variant="fused")
    assert bool(info.converged)
    assert relative_error(x, spla.spsolve(S.tocsc(), b)) < 1e-10

    def loss(data, variant):
        A_ = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        return jnp.sum(jnp.abs(jaxdia.cg(A_, b, rtol=1e-12, variant=variant)[0]) ** 2)

    got = jax.jit(jax.grad(loss), static_argnums=1)(A.data, "fused")
    want = jax.grad(loss)(A.data, "standard")
    np.testing.assert_allclose(got, want, rtol=1e-8, atol=1e-10)


def test_variant_is_checked():
    A = jaxdia.eye(3)
    for solve in (jaxdia.cg, jaxdia.bicgstab):
        with pytest.raises(ValueError, match=r"variant must be one of \('standard', 'fused'\)"):
            solve(A, np.ones(3), variant="pipelined")


def test_sharded_matrix_on_one_device():
    """jaxdia.cg and jaxdia.bicgstab take a ShardedDiaMatrix (and its vectors)."""
    side = 10
    S = poisson(side, 2).todia()
    mesh = jax.make_mesh((1,), ("rows",))
    sharded = jaxdia.shard(jaxdia.DiaMatrix.from_scipy(S), mesh, "rows")
    b = np.random.default_rng(7).standard_normal(side * side)
    exact = spla.spsolve(S.tocsc(), b)
    for solve in (jaxdia.cg, jaxdia.bicgstab):
        x, info = solve(
            sharded, sharded.shard_vector(b), M=jaxdia.jacobi(sharded), rtol=1e-10, variant="fused"
        )
        assert bool(info.converged), solve
        assert relative_error(sharded.unshard_vector(x), exact) < 1e-8
    # A stack of right-hand sides goes through the sharded product as one block.
    B = np.stack([b, 2 * b])
    X, _ = jaxdia.cg(sharded, jnp.stack([sharded.shard_vector(v) for v in B]), rtol=1e-10)
    np.testing.assert_allclose(X[1], 2 * X[0], rtol=1e-9, atol=1e-12)
    with pytest.raises(TypeError, match=r"jaxdia.DiaMatrix \(or ShardedDiaMatrix\)"):
        jaxdia.cg(object(), np.ones(3))
