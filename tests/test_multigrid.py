"""The multigrid preconditioner (jaxdia.multigrid: jaxdia/_linalg/multigrid.py and
multigrid_hierarchy.py) as ``M`` of jaxdia's and JAX's Krylov solvers.

Oracles: coarse operators against ``P^T A P`` built with SciPy, solutions against
``scipy.sparse.linalg.spsolve``, gradients against dense ``jnp.linalg.solve``. Grids are
small, and few distinct ones, since each grid and coarsening compiles its own program.
"""

import math
import re
from unittest import mock

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia import _dispatch
from jaxdia._linalg import multigrid_hierarchy, smoothers, stencil

from .grids import (
    GRID_2D,
    assert_solution,
    convection_diffusion,
    diffusion,
    jump,
    operator_matrix,
    poisson,
    stencil_matrix,
)
from .helpers import dense_f64, in_bounds_mask, rhs

# -- problems --------------------------------------------------------------------------------


def interpolation_1d(n):
    """Linear interpolation from the ``n // 2`` odd points (0-based) of ``n``."""
    nc = n // 2
    P = np.zeros((n, nc))
    for I in range(nc):
        P[2 * I + 1, I] = 1.0
        P[2 * I, I] = 0.5
        if n > 2 * I + 2:
            P[2 * I + 2, I] = 0.5
    return P


def interpolation(grid, axes):
    """The (bi/tri)linear interpolation along ``axes`` (identity along the others)."""
    factors = [interpolation_1d(n) if a in axes else np.eye(n) for a, n in enumerate(grid)]
    return sp.csr_array(
        factors[0] if len(factors) == 1 else sp.kron(factors[0], _kron(factors[1:]))
    )


def _kron(factors):
    out = sp.csr_array(factors[0])
    for f in factors[1:]:
        out = sp.kron(out, f)
    return out


def random_stencil(grid, seed=0):
    """A random (nonsymmetric) 3^dim-point stencil matrix, diagonally dominant."""
    rng = np.random.default_rng(seed)
    coefficients = {d: rng.uniform(-1, 0, grid) for d in stencil.displacements(len(grid)) if any(d)}
    coefficients[(0,) * len(grid)] = 3.0 ** len(grid) + rng.uniform(0, 1, grid)
    return stencil_matrix(grid, coefficients)


GRID_3D = (7, 7, 6)  # coarse (3, 3, 3): 27 distinct offsets
SMALL = (7, 8)  # for the transformations: 3 levels with max_coarse=4, quick to compile


# -- coarse operators ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "grid, problem, coarsening",
    [
        ((9,), random_stencil, "full"),
        (GRID_2D, random_stencil, "full"),
        (GRID_2D, poisson, [(1,), (0, 1)]),
        (GRID_3D, poisson, "full"),
        ((6, 2, 7), random_stencil, [(2,), (0, 1, 2)]),
        ((2, 2), random_stencil, "full"),
    ],
)
def test_coarse_operators_are_galerkin_products(grid, problem, coarsening):
    S = problem(grid)
    M = jaxdia.multigrid(jaxdia.DiaMatrix.from_scipy(S), grid, coarsening=coarsening, max_coarse=1)
    assert len(M.levels) == len(M.coarsening) + 1 >= 2
    fine = S.toarray()
    for level, axes in enumerate(M.coarsening):
        P = interpolation(M.grids[level], axes)
        expected = P.T @ fine @ P
        coarse = M.levels[level + 1]
        assert coarse.shape == expected.shape
        assert len(coarse.offsets) <= 3 ** len(grid)
        np.testing.assert_allclose(dense_f64(coarse), expected, rtol=1e-12, atol=1e-12)
        assert M.grids[level + 1] == tuple(
            n // 2 if a in axes else n for a, n in enumerate(M.grids[level])
        )
        fine = expected
    assert M.levels[0].offsets == tuple(sorted(S.offsets))
    if problem is poisson and coarsening == "full":
        # 5- and 7-point stencils coarsen to 9 and 27 points (grid (3, 3, 3): distinct
        # offsets), and the hierarchy prints as PyAMG's does.
        assert [len(level.offsets) for level in M.levels][:2] == [7, 27]
        assert "operator complexity" in repr(M) and "direct solve" in repr(M)


@pytest.mark.parametrize("grid", [(9,), GRID_2D, pytest.param(GRID_3D, marks=pytest.mark.full)])
def test_galerkin_paths_agree_with_scipy(grid):
    # The setup's two paths (stored cells at the finest level, probing below; the test
    # above checks them in 2-D and 3-D) and the host path of coarsening="auto", on one step.
    S = random_stencil(grid, seed=1)
    A = jaxdia.DiaMatrix.from_scipy(S)
    axes = tuple(range(len(grid)))
    P = interpolation(grid, axes)
    expected = P.T @ S.toarray() @ P
    coarse = multigrid_hierarchy.coarse_grid(grid, axes)
    n = math.prod(grid)

    def by_cells(data, xp):
        cells = stencil.cells_of(jaxdia.DiaMatrix(data, A.offsets, A.shape)._parts, grid, xp)
        step = grid
        for axis in axes:
            cells = multigrid_hierarchy.galerkin_cells(cells, step, axis, xp)
            step = multigrid_hierarchy.coarse_grid(step, (axis,))
        return stencil.stencil_rows(cells, coarse, np.float64, xp)

    def check(rows, by_colour):
        parts = stencil.dia_from_rows(jnp.asarray(rows), coarse, by_colour=by_colour)
        np.testing.assert_allclose(dense_f64(jaxdia.DiaMatrix._wrap(parts)), expected, atol=1e-12)

    check(by_cells(np.asarray(A.data), np), by_colour=False)
    if len(grid) == 1:  # the compiled paths, here on their own (the setup uses them in 2-D, 3-D)
        check(jax.jit(lambda d: by_cells(d, jnp))(A.data), by_colour=False)
        check(jax.jit(lambda A: multigrid_hierarchy.probe(A._parts, grid, axes))(A), by_colour=True)
    x = rhs(n)
    np.testing.assert_allclose(
        np.asarray(multigrid_hierarchy.restrict(jnp.asarray(x).reshape(grid), axes)).ravel(),
        P.T @ x,
    )
    xc = rhs(P.shape[1])
    for scatter in (False, True):  # the interleave's two forms (TPU's: scatters)
        with mock.patch.object(_dispatch, "interleave_by_scatter", lambda platform: scatter):
            fine = multigrid_hierarchy.interpolate(jnp.asarray(xc).reshape(coarse), axes, grid)
        np.testing.assert_allclose(np.asarray(fine).ravel(), P @ xc)


# -- the V-cycle is symmetric positive definite for SPD matrices ----------------------------


@pytest.mark.parametrize(
    "grid, problem, smoother, sweeps",
    [
        (GRID_2D, poisson, "chebyshev", 2),
        (GRID_2D, jump, "jacobi", 1),
        pytest.param(GRID_3D, poisson, "chebyshev", 3, marks=pytest.mark.full),
        ((17,), jump, "jacobi", 2),
    ],
)
def test_vcycle_is_symmetric_positive_definite(grid, problem, smoother, sweeps):
    S = problem(grid)
    A = jaxdia.DiaMatrix.from_scipy(S)
    M = jaxdia.multigrid(A, grid, smoother=smoother, sweeps=sweeps, max_coarse=4)
    assert len(M.levels) >= 3
    matrix = operator_matrix(M, S.shape[0])
    np.testing.assert_allclose(matrix, matrix.T, rtol=1e-10, atol=1e-12 * np.abs(matrix).max())
    eigenvalues = np.linalg.eigvalsh((matrix + matrix.T) / 2)
    assert eigenvalues.min() > 0
    # The smoothers converge in the energy norm, so the spectrum of M A lies in (0, 1];
    # for Poisson it clusters near 1 (a jumping coefficient leaves a few small ones,
    # which conjugate gradients removes in as many iterations).
    spectrum = np.sort(np.linalg.eigvals(matrix @ S.toarray()).real)
    assert spectrum[0] > 0 and spectrum[-1] < 1 + 1e-8
    assert spectrum[3 if problem is jump else 0] > 0.3


def test_vcycle_is_exact_without_coarsening():
    S = jump(GRID_2D)
    M = jaxdia.multigrid(jaxdia.DiaMatrix.from_scipy(S), GRID_2D, max_coarse=500)
    assert M.coarsening == () and len(M.levels) == 1
    b = rhs(S.shape[0])
    np.testing.assert_allclose(np.asarray(M(b)), spla.spsolve(S.tocsc(), b), rtol=1e-10)


@pytest.mark.parametrize(
    "grid, coarsest",
    [
        ((20, 20), (20, 20)),  # at most 500 points: solved directly
        ((40, 40), (20, 20)),  # coarsened at least once
        ((256, 256), (64, 64)),  # 4096 * 65^2 <= 2^25
        ((24, 24, 24), (6, 6, 6)),  # 12^3: 1728 * 157^2 > 2^25
        ((10_000,), (2500,)),
    ],
)
def test_default_coarsest_level(grid, coarsest):
    """max_coarse=None on CPU: coarsen a grid of more than 500 points at least once, then
    until a level of at most 4096 unknowns is cheap to factorize; a number keeps the
    count rule."""
    plan = multigrid_hierarchy.full_plan(grid, None, 100)
    for axes in plan:
        grid = multigrid_hierarchy.coarse_grid(grid, axes)
    assert grid == coarsest
    assert multigrid_hierarchy.full_plan((256, 256), 500, 100) == ((0, 1),) * 4  # down to 16 x 16
    S = poisson((40, 40))
    M = jaxdia.multigrid(jaxdia.DiaMatrix.from_scipy(S), (40, 40))
    assert M.grids == ((40, 40), (20, 20))


@pytest.mark.parametrize(
    "grid, problem, dtype",
    [
        pytest.param((33, 20), "jump", np.float64, marks=pytest.mark.full),
        ((9, 2, 5), "poisson", np.float32),  # an axis of 2: equal offsets summed
        ((37,), "poisson", np.complex128),
    ],
)
def test_eager_setup_matches_the_compiled_setup(grid, problem, dtype):
    """A concrete A's hierarchy is built with NumPy on the host (no program of the
    grid's sizes to compile); under jit the setup is compiled. Both give the same
    levels, smoothing data and coarse factor, for batches too."""
    S = (jump if problem == "jump" else poisson)(grid).astype(dtype)
    if np.dtype(dtype).kind == "c":
        S = S + 0.5j * sp.eye_array(S.shape[0])
    A = jaxdia.DiaMatrix.from_scipy(S.todia())
    A = jaxdia.DiaMatrix(jnp.stack([A.data, 2 * A.data]), A.offsets, A.shape)
    eager = jaxdia.multigrid(A, grid, max_coarse=8)
    compiled = jax.jit(lambda A: jaxdia.multigrid(A, grid, max_coarse=8))(A)
    assert len(eager.levels) >= 2 and eager.grids == compiled.grids
    assert jax.tree.structure(eager) == jax.tree.structure(compiled)
    rtol = 1e-5 if np.dtype(dtype) == np.float32 else 1e-12
    for mine, theirs in zip(jax.tree.leaves(eager), jax.tree.leaves(compiled)):
        assert mine.shape == theirs.shape and mine.dtype == theirs.dtype
        np.testing.assert_allclose(mine, theirs, rtol=rtol, atol=rtol * np.abs(theirs).max())
    b = rhs(A.shape[0])
    np.testing.assert_allclose(eager(b), compiled(b), rtol=rtol * 10)


@pytest.mark.parametrize("steps", [1, 2, 4, 7])
@pytest.mark.parametrize("start", [False, True])
def test_chebyshev_by_ratio_is_chebyshev_steps(steps, start):
    """Multigrid's Chebyshev smoother (coefficients computed once for the interval's ratio,
    scaled by 1 / rho) is the generic recurrence's polynomial, to rounding: unrolled (up
    to 5 steps) and looped, from zero and from a start, with the residual."""
    S = jump((9, 8)).tocsr()
    A = jaxdia.DiaMatrix.from_scipy(S.todia())
    inverse = jnp.asarray(1 / S.diagonal())
    rho = jnp.asarray(1.7)
    b, x = jnp.asarray(rhs(S.shape[0])), (jnp.asarray(rhs(S.shape[0], seed=1)) if start else None)
    ours = smoothers.chebyshev_steps_by_ratio(
        A.__matmul__, lambda v: inverse * v, b, x, rho, 1 / 6, steps, residual=True
    )
    theirs = smoothers.chebyshev_steps(
        A.__matmul__, lambda v: inverse * v, b, x, rho / 6, rho, steps, residual=True
    )
    for mine, reference in zip(ours, theirs):
        np.testing.assert_allclose(mine, reference, rtol=1e-12, atol=1e-12)


def test_chebyshev_smoother_scalars_do_not_grow_with_its_degree():
    """The smoother's scalars are one division by the level's bound per smoothing: the
    cycle's scalar divisions (each a compiled kernel of its own in XLA:CPU) do not grow
    with ``sweeps``, as the recurrence's own scalars per step did."""
    A = jaxdia.DiaMatrix.from_scipy(poisson((32, 32)).todia())
    counts = set()
    for sweeps in (2, 4, 7):
        M = jaxdia.multigrid(A, (32, 32), max_coarse=16, sweeps=sweeps)
        text = jax.jit(lambda M, v: M(v)).lower(M, jnp.ones(A.shape[0])).as_text()
        smoothings = 2 * (len(M.levels) - 1)
        scalar_divisions = len(re.findall(r"stablehlo\.divide .*: tensor<f(32|64)>$", text, re.M))
        assert scalar_divisions <= 2 * smoothings, (sweeps, scalar_divisions)
        counts.add(scalar_divisions)
    assert len(counts) == 1, counts


# -- convergence ---------------------------------------------------------------------------------


def _contraction(S, M, cycles=8):
    """The mean residual reduction per step of ``x += M(b - A x)``."""
    b = rhs(S.shape[0])
    x = np.zeros_like(b)
    for _ in range(cycles):
        x = x + np.asarray(M(b - S @ x))
    return (np.linalg.norm(b - S @ x) / np.linalg.norm(b)) ** (1 / cycles)


@pytest.mark.parametrize(
    "grid, limit",
    [((31, 32), 0.15), ((11, 12, 13), 0.15)],
)
def test_vcycle_contracts(grid, limit):
    S = poisson(grid)
    M = jaxdia.multigrid(jaxdia.DiaMatrix.from_scipy(S), grid, max_coarse=20)
    assert _contraction(S, M) < limit


@pytest.mark.full
def test_iterations_do_not_grow_with_the_grid():
    iterations = []
    for n in (15, 31, 63):
        S = poisson((n, n))
        A = jaxdia.DiaMatrix.from_scipy(S)
        _, info = jaxdia.cg(A, rhs(n * n), M=jaxdia.multigrid(A, (n, n), max_coarse=10), rtol=1e-8)
        assert bool(info.converged)
        iterations.append(int(info.iterations))
    assert max(iterations) - min(iterations) <= 2 and max(iterations) <= 10, iterations


@pytest.mark.full
def test_auto_coarsening_follows_the_strong_axis():
    grid = (31, 32)
    S = diffusion(grid, 1.0, anisotropy=(1.0, 0.01))
    A = jaxdia.DiaMatrix.from_scipy(S)
    auto = jaxdia.multigrid(A, grid, coarsening="auto", max_coarse=20)
    # Coupling 100x stronger along axis 0: halve it alone until they compare (x 4 a level).
    assert auto.coarsening[:3] == ((0,), (0,), (0,))
    assert auto.coarsening[3] == (0, 1)
    b = rhs(S.shape[0])
    _, semi = jaxdia.cg(A, b, M=auto, rtol=1e-8)
    _, full = jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid, max_coarse=20), rtol=1e-8)
    _, isotropic = jaxdia.cg(
        jaxdia.DiaMatrix.from_scipy(poisson(grid)),
        b,
        M=jaxdia.multigrid(jaxdia.DiaMatrix.from_scipy(poisson(grid)), grid, max_coarse=20),
        rtol=1e-8,
    )
    assert bool(semi.converged) and int(semi.iterations) <= 3 * int(isotropic.iterations)
    assert int(full.iterations) > int(semi.iterations)
    # The recorded choice builds the same hierarchy under jit.
    rebuilt = jax.jit(
        lambda A: jaxdia.multigrid(A, grid, coarsening=auto.coarsening, max_coarse=20)
    )(A)
    np.testing.assert_allclose(np.asarray(rebuilt(b)), np.asarray(auto(b)), rtol=1e-12)


@pytest.mark.parametrize(
    "S, grid",
    [
        (poisson((64, 64)), (64, 64)),
        (diffusion((64, 64), 1.0, anisotropy=(1.0, 1e-3)), (64, 64)),
        (diffusion((64, 64), 1.0, anisotropy=(1e-3, 1.0)), (64, 64)),
        (poisson((8, 8, 8)), (8, 8, 8)),
        (diffusion((6, 7, 5), 1.0, anisotropy=(1.0, 0.01, 1e-4)), (6, 7, 5)),
        (random_stencil((9, 3)), (9, 3)),
        (sp.dia_array(sp.eye(40) * 2.0), (5, 8)),  # no coupling at all
    ],
)
@pytest.mark.parametrize("max_coarse", [1, 10])
def test_auto_coarsening_always_shrinks_the_grid(S, grid, max_coarse):
    # Once the only axis left had a negative "strength", auto_plan appended empty steps
    # and never returned (max_levels had no bound by default).
    A = jaxdia.DiaMatrix.from_scipy(S)
    data = np.asarray(A.data)[None]
    plan = multigrid_hierarchy.auto_plan(data, A.offsets, grid, max_coarse, max_levels=40)
    sizes = [math.prod(grid)]
    for axes in plan:
        assert axes, plan
        grid = multigrid_hierarchy.coarse_grid(grid, axes)
        sizes.append(math.prod(grid))
    assert all(a > b for a, b in zip(sizes, sizes[1:], strict=False)), sizes
    assert sizes[-1] <= max_coarse or not any(n >= 2 for n in grid), (plan, grid)


@pytest.mark.full  # the fuzzer's max_coarse=1 regression cases stay fast
def test_auto_coarsening_to_one_point_solves():
    grid = (64, 64)
    S = diffusion(grid, 1.0, anisotropy=(1.0, 1e-3))
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    for max_coarse in (1, 10):
        M = jaxdia.multigrid(A, grid, coarsening="auto", max_coarse=max_coarse)
        x, info = jaxdia.cg(A, b, M=M, rtol=1e-10)
        assert bool(info.converged)
        expected = spla.spsolve(S.tocsc(), np.asarray(b))
        np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-7, atol=1e-9)


def test_bicgstab_with_multigrid_solves_convection_diffusion():
    n = 15
    S = convection_diffusion(n)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(n * n)
    M = jaxdia.multigrid(A, (n, n))
    x, info = jaxdia.bicgstab(A, b, M=M, rtol=1e-10)
    _, plain = jaxdia.bicgstab(A, b, M=jaxdia.jacobi(A), rtol=1e-10)
    assert bool(info.converged) and int(info.iterations) * 4 < int(plain.iterations)
    assert_solution(x, spla.spsolve(S.tocsc(), b), 1e-8)
    # The same preconditioner in JAX's solvers.
    for solver in (jsl.bicgstab, jsl.gmres):
        y, _ = jax.jit(lambda A, b, M: solver(A, b, M=M, tol=1e-10))(A, b, M)
        assert_solution(y, np.asarray(x), 1e-7)


# -- the solvers (batches) ------------------------------------------------------------------


def test_complex_vectors_run_one_cycle_on_both_parts():
    S = poisson(SMALL)
    A = jaxdia.DiaMatrix.from_scipy(S)
    v = rhs(S.shape[0]) + 1j * rhs(S.shape[0], seed=1)
    batch = jaxdia.DiaMatrix(np.stack([A.data, 2 * A.data]), A.offsets, A.shape)
    for M in (
        jaxdia.multigrid(A, SMALL, max_coarse=4),
        jaxdia.multigrid(batch, SMALL, max_coarse=4),
    ):
        got = M(v)
        assert got.dtype == np.complex128
        want = np.asarray(M(v.real)) + 1j * np.asarray(M(v.imag))
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-12, atol=1e-14)
    # One cycle in the compiled program (two made it about twice the real one's size).
    M = jaxdia.multigrid(A, SMALL, max_coarse=4)
    real, both = (len(jax.jit(M).lower(u).compile().as_text()) for u in (v.real, v))
    assert both < 1.5 * real, (both, real)


@pytest.mark.full  # batched multigrid stays fast in the complex-vector and vmap tests
def test_batched_systems_stop_on_their_own():
    S = poisson(SMALL)
    A = jaxdia.DiaMatrix.from_scipy(S)
    scales = np.array([1.0, 2.0, 10.0])
    batch = jaxdia.DiaMatrix(A.data * scales[:, None, None], A.offsets, A.shape)
    b = np.stack([rhs(S.shape[0], seed=s) for s in range(3)])
    b[2] = 0.0
    M = jaxdia.multigrid(batch, SMALL, max_coarse=4)
    assert M.batch_shape == (3,)
    x, info = jaxdia.cg(batch, b, M=M, rtol=1e-10)
    assert info.iterations.shape == (3,) and int(info.iterations[2]) == 0
    for i in range(3):
        Mi = jaxdia.multigrid(
            jaxdia.DiaMatrix(batch.data[i], A.offsets, A.shape), SMALL, max_coarse=4
        )
        np.testing.assert_allclose(np.asarray(M(b[i])[i]), np.asarray(Mi(b[i])), rtol=1e-12)
        xi, info_i = jaxdia.cg(
            jaxdia.DiaMatrix(batch.data[i], A.offsets, A.shape), b[i], M=Mi, rtol=1e-10
        )
        assert int(info_i.iterations) == int(info.iterations[i])
        np.testing.assert_allclose(np.asarray(x[i]), np.asarray(xi), rtol=1e-10, atol=1e-14)


# -- transformations -------------------------------------------------------------------------------


def test_setup_under_jit_and_vmap():
    S = jump(SMALL)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    eager = jaxdia.multigrid(A, SMALL, max_coarse=4)
    jitted = jax.jit(lambda A: jaxdia.multigrid(A, SMALL, max_coarse=4))(A)
    np.testing.assert_allclose(np.asarray(jitted(b)), np.asarray(eager(b)), rtol=1e-12)
    # A preconditioner is a pytree: an argument and a result of jitted functions.
    np.testing.assert_allclose(
        np.asarray(jax.jit(lambda M, b: M(b))(eager, b)), np.asarray(eager(b)), rtol=1e-12
    )
    batch = jaxdia.DiaMatrix(jnp.stack([A.data, 3 * A.data]), A.offsets, A.shape)

    def solve(A, b):
        return jaxdia.cg(A, b, M=jaxdia.multigrid(A, SMALL, max_coarse=4), rtol=1e-10)

    x, info = jax.vmap(solve)(batch, np.stack([b, b]))
    np.testing.assert_allclose(np.asarray(x[1]) * 3, np.asarray(x[0]), rtol=1e-9)
    assert bool(jnp.all(info.converged))
    y, _ = solve(batch, b)  # the batch inside the call instead
    np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-10)


@pytest.mark.parametrize(
    "solver, problem",
    [("cg", jump), pytest.param("bicgstab", convection_diffusion, marks=pytest.mark.full)],
)
def test_gradients_through_preconditioned_solves(solver, problem):
    grid = (7, 8) if solver == "cg" else (7, 7)
    S = problem(grid) if solver == "cg" else problem(grid[0])
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(S.shape[0])
    weights = rhs(S.shape[0], seed=3)

    def loss(data, b):
        A_ = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        M = jaxdia.multigrid(A_, grid, max_coarse=4)
        x, _ = getattr(jaxdia, solver)(A_, b, M=M, rtol=1e-13)
        return jnp.sum(weights * jnp.sin(x))

    def dense_loss(data, b):
        return jnp.sum(
            weights
            * jnp.sin(jnp.linalg.solve(jaxdia.DiaMatrix(data, A.offsets, A.shape).todense(), b))
        )

    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(A.data, b)
    want = jax.grad(dense_loss, argnums=(0, 1))(A.data, b)
    inside = in_bounds_mask(A)
    np.testing.assert_allclose(
        np.asarray(got[0])[inside], np.asarray(want[0])[inside], rtol=1e-7, atol=1e-10
    )
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-7, atol=1e-10)


def test_jax_cg_and_lineax_take_the_preconditioners():
    lx = pytest.importorskip("lineax")
    S = jump(SMALL)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = jnp.asarray(rhs(S.shape[0]))
    expected = spla.spsolve(S.tocsc(), np.asarray(b))
    M = jaxdia.multigrid(A, SMALL, max_coarse=4)
    x, _ = jax.jit(lambda A, b, M: jsl.cg(A, b, M=M, tol=1e-10))(A, b, M)
    assert_solution(x, expected, 1e-8)
    structure = jax.ShapeDtypeStruct(b.shape, b.dtype)
    operator = jaxdia.DiaLinearOperator(A, lx.positive_semidefinite_tag)
    for preconditioner in (M, jaxdia.chebyshev(A, degree=4)):
        wrapped = lx.FunctionLinearOperator(preconditioner, structure, lx.positive_semidefinite_tag)
        solution = lx.linear_solve(
            operator,
            b,
            lx.CG(rtol=1e-10, atol=1e-10),
            options={"preconditioner": wrapped},
        )
        assert_solution(solution.value, expected, 1e-7)
        assert int(solution.stats["num_steps"]) < 60


@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.full)])
def test_dtypes(dtype):
    S = jump(SMALL).astype(dtype)
    A = jaxdia.DiaMatrix.from_scipy(S)
    M = jaxdia.multigrid(A, SMALL, max_coarse=4)
    assert M.dtype == dtype and all(level.dtype == dtype for level in M.levels)
    b = rhs(S.shape[0]).astype(dtype)
    assert M(b).dtype == dtype
    rtol = 1e-4 if dtype == np.float32 else 1e-10
    if dtype == np.float64:  # a single-precision hierarchy for a double-precision solve
        single = jaxdia.multigrid(A, SMALL, max_coarse=4, dtype=np.float32)
        assert single.dtype == np.float32 and single.levels[0].dtype == np.float32
        assert single(b).dtype == np.float64
        _, mixed = jaxdia.cg(A, b, M=single, rtol=rtol)
        _, exact = jaxdia.cg(A, b, M=M, rtol=rtol)
        # Rounding in M costs a few iterations at tolerances this far below float32's.
        assert bool(mixed.converged) and int(mixed.iterations) <= int(exact.iterations) + 3
    for preconditioner in (M, jaxdia.chebyshev(A, degree=4)):
        x, info = jaxdia.cg(A, b, M=preconditioner, rtol=rtol)
        assert x.dtype == dtype and bool(info.converged)
        reference = spla.spsolve(S.astype(np.float64).tocsc(), b.astype(np.float64))
        assert_solution(x, reference, 100 * rtol)


# -- errors ------------------------------------------------------------------------------------


def test_multigrid_errors():
    S = poisson(GRID_2D)
    A = jaxdia.DiaMatrix.from_scipy(S)
    with pytest.raises(TypeError, match="multigrid: A must be a jaxdia.DiaMatrix"):
        jaxdia.multigrid(S, GRID_2D)
    with pytest.raises(ValueError, match="must be square"):
        jaxdia.multigrid(jaxdia.DiaMatrix(A.data, A.offsets, (240, 241)), GRID_2D)
    with pytest.raises(
        ValueError, match=r"grid \(16, 16\) has 256 points, but A has shape \(240, 240\)"
    ):
        jaxdia.multigrid(A, (16, 16))
    with pytest.raises(ValueError, match="1 to 3 positive ints"):
        jaxdia.multigrid(A, (2, 3, 5, 8))
    with pytest.raises(TypeError, match="grid must be a tuple"):
        jaxdia.multigrid(A, "15x16")
    with pytest.raises(TypeError, match="multigrid: grid must be a tuple of ints"):
        jaxdia.multigrid(A, (15.0, 16))
    # The transposed grid: offset 16 is a diagonal neighbour on a (16, 15) grid, and
    # offset 1 is a neighbour, but then A couples the ends of grid lines.
    with pytest.raises(
        ValueError, match=r"A\[30, 14\] = -1.0 couples grid points \(2, 0\) and \(0, 14\)"
    ):
        jaxdia.multigrid(A, (16, 15))
    with pytest.raises(ValueError, match=r"offset -16 does not fit a stencil on grid \(8, 30\)"):
        jaxdia.multigrid(A, (8, 30))
    wide = jaxdia.DiaMatrix.from_scipy(S + sp.eye_array(240, k=2))
    with pytest.raises(ValueError, match="offset -2 does not fit"):
        jaxdia.multigrid(wide.T, GRID_2D)
    # Periodic boundaries along axis 1: A[i, i + 15] at the start of each row.
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(16, 16)).tolil()
    T[0, 15] = T[15, 0] = -1.0
    periodic = sp.kronsum(
        T.tocsr(), sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(15, 15))
    )
    with pytest.raises(
        ValueError, match=r"A\[15, 0\] = -1.0 couples grid points \(0, 15\) and \(0, 0\)"
    ):
        jaxdia.multigrid(jaxdia.DiaMatrix.from_scipy(periodic), GRID_2D)
    no_diagonal = jaxdia.DiaMatrix.from_scipy(S - sp.diags_array(S.diagonal()))
    with pytest.raises(ValueError, match="stores no main diagonal"):
        jaxdia.multigrid(no_diagonal.eliminate_zeros(), GRID_2D)
    with pytest.raises(ValueError, match="diagonal must be nonzero, but it is 0 at index 0"):
        jaxdia.multigrid(A.with_diagonal(np.r_[0.0, S.diagonal()[1:]]), GRID_2D)
    with pytest.raises(TypeError, match="complex64 or complex128, got float16"):
        jaxdia.multigrid(A.astype(np.float16), GRID_2D)
    with pytest.raises(TypeError, match="dtype must be a float dtype .* got float16"):
        jaxdia.multigrid(A, GRID_2D, dtype=np.float16)
    for options, message in [
        ({"smoother": "gauss_seidel"}, "smoother must be one of"),
        ({"sweeps": 0}, "need sweeps >= 1"),
        ({"max_coarse": 5000}, "max_coarse <= 4096"),
        ({"max_levels": 0}, "max_levels >= 1"),
        ({"coarsening": "semi"}, "coarsening must be 'full', 'auto'"),
        ({"coarsening": [(2,)]}, r"coarsening\[0\] = \(2,\) must be distinct axes"),
        ({"coarsening": [(0,), (0,), (0,), (0,)]}, "fewer than 2 points"),
    ]:
        with pytest.raises(ValueError, match=message):
            jaxdia.multigrid(A, GRID_2D, **options)
    with pytest.raises(TypeError, match="sweeps must be an int"):
        jaxdia.multigrid(A, GRID_2D, sweeps=2.0)
    with pytest.raises(TypeError, match=r"coarsening\[0\] must be a tuple of axes"):
        jaxdia.multigrid(A, GRID_2D, coarsening=[("x",)])
    big = jaxdia.DiaMatrix.from_scipy(poisson((70, 70)))
    with pytest.raises(ValueError, match=r"coarsest level would be grid \(70, 70\)"):
        jaxdia.multigrid(big, (70, 70), max_levels=1)
    with pytest.raises(TypeError, match="coarsening='auto' chooses the coarsening from A's values"):
        jax.jit(lambda A: jaxdia.multigrid(A, GRID_2D, coarsening="auto"))(A)
    M = jaxdia.multigrid(A, GRID_2D)
    with pytest.raises(ValueError, match=r"v must have shape \(240,\)"):
        M(np.ones(239))
    with pytest.raises(ValueError, match="do not broadcast"):
        jaxdia.multigrid(jaxdia.DiaMatrix(jnp.stack([A.data] * 2), A.offsets, A.shape), GRID_2D)(
            np.ones((3, 240))
        )


def test_preconditioners_are_immutable_pytrees():
    """A preconditioner cannot be changed behind a compiled solve that closed over it;
    its key paths name its fields."""
    A = jaxdia.DiaMatrix.from_scipy(poisson(SMALL))
    M = jaxdia.multigrid(A, SMALL, max_coarse=4)
    C = jaxdia.chebyshev(A, degree=3)
    for P, field in ((M, "_hierarchy"), (C, "degree")):
        with pytest.raises(AttributeError, match="is immutable"):
            setattr(P, field, None)
        leaves, tree = jax.tree_util.tree_flatten(P)
        again = jax.tree_util.tree_unflatten(tree, leaves)
        np.testing.assert_array_equal(again(np.ones(A.shape[0])), P(np.ones(A.shape[0])))
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(C)[0]]
    assert paths == [".operator.data", ".inverse_diagonal", ".lower", ".upper"]
    assert jax.tree_util.keystr(jax.tree_util.tree_flatten_with_path(M)[0][0][0]).startswith(
        ".hierarchy.operators[0]"
    )
