"""jaxdia.solve_ivp (BDF) and jaxdia.odeint against SciPy's BDF, exact solutions and tight
Radau references; jit, vmap, forward-mode derivatives, failures and input errors."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as si
import scipy.linalg
import scipy.sparse as sp

import jaxdia


def robertson(t, y):
    return jnp.stack(
        [
            -0.04 * y[0] + 1e4 * y[1] * y[2],
            0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
            3e7 * y[1] ** 2,
        ]
    )


def robertson_numpy(t, y):
    return np.array(
        [
            -0.04 * y[0] + 1e4 * y[1] * y[2],
            0.04 * y[0] - 1e4 * y[1] * y[2] - 3e7 * y[1] ** 2,
            3e7 * y[1] ** 2,
        ]
    )


def for_scipy(fun, *args):
    """``fun`` compiled once, as SciPy's right-hand side (NumPy in, NumPy out)."""
    compiled = jax.jit(fun)
    return lambda t, y: np.asarray(compiled(t, jnp.asarray(y), *args))


def brusselator(t, y, alpha):
    """Hairer and Wanner's 1-D Brusselator, species interleaved (offsets -2 .. 2)."""
    u, v = y[0::2], y[1::2]
    h = 1.0 / (u.size + 1)
    up, vp = jnp.pad(u, 1, constant_values=1.0), jnp.pad(v, 1, constant_values=3.0)
    du = 1 + u * u * v - 4 * u + alpha * (up[:-2] - 2 * u + up[2:]) / h**2
    dv = 3 * u - u * u * v + alpha * (vp[:-2] - 2 * v + vp[2:]) / h**2
    return jnp.stack([du, dv], axis=-1).reshape(-1)


def assert_counts_near(ours, theirs, factor=1.5):
    """Steps, Jacobians and factorizations within ``factor`` of SciPy's BDF."""
    steps = len(theirs.t) - 1
    for name, mine, scipy_count in [
        ("nsteps", int(ours.nsteps), steps),
        ("njev", int(ours.njev), theirs.njev),
        ("nlu", int(ours.nlu), theirs.nlu),
        ("nfev", int(ours.nfev), theirs.nfev),
    ]:
        assert mine <= factor * scipy_count + 2, (name, mine, scipy_count)
        assert scipy_count <= factor * mine + 2, (name, mine, scipy_count)


@pytest.mark.full
def test_robertson_matches_scipy_bdf_and_a_tight_reference():
    t_eval = np.array([0.0, 1e-3, 1.0, 40.0, 1e3, 1e5])
    y0 = np.array([1.0, 0.0, 0.0])
    kwargs: dict[str, Any] = dict(rtol=1e-6, atol=1e-10)
    ours = jax.jit(lambda y0: jaxdia.solve_ivp(robertson, (0.0, 1e5), y0, **kwargs))(y0)
    theirs = si.solve_ivp(robertson_numpy, (0, 1e5), y0, method="BDF", **kwargs)
    assert int(ours.status) == 0 and bool(ours.success)
    assert ours.message == theirs.message
    assert_counts_near(ours, theirs)
    dense = jaxdia.solve_ivp(robertson, (0.0, 1e5), y0, t_eval=t_eval, **kwargs)
    reference = si.solve_ivp(
        robertson_numpy, (0, 1e5), y0, method="Radau", t_eval=t_eval, rtol=1e-11, atol=1e-14
    )
    scipy_bdf = si.solve_ivp(robertson_numpy, (0, 1e5), y0, method="BDF", t_eval=t_eval, **kwargs)
    ours_error = np.abs(np.asarray(dense.y) - reference.y) / (1e-10 + np.abs(reference.y))
    scipy_error = np.abs(scipy_bdf.y - reference.y) / (1e-10 + np.abs(reference.y))
    assert dense.y.shape == (3, len(t_eval))
    np.testing.assert_allclose(np.asarray(dense.t), t_eval)
    assert ours_error.max() <= 1.5 * scipy_error.max() + 1e-9, (ours_error.max(), scipy_error.max())
    np.testing.assert_allclose(np.asarray(dense.y), scipy_bdf.y, rtol=1e-6, atol=1e-12)


@pytest.mark.parametrize(
    "n", [pytest.param(1, marks=pytest.mark.full), 2, pytest.param(6, marks=pytest.mark.full)]
)
def test_linear_stiff_system_against_expm(n):
    # y' = A y + f, A banded with eigenvalues from -1 to -1e4, exact by expm.
    rng = np.random.default_rng(n)
    A = np.diag(-np.geomspace(1.0, 1e4, n))
    A += np.diag(rng.uniform(-0.5, 0.5, n - 1), 1) + np.diag(rng.uniform(-0.5, 0.5, n - 1), -1)
    f = rng.standard_normal(n)
    y0 = rng.standard_normal(n)
    t_eval = np.array([0.0, 0.01, 0.5, 2.0])
    exact = np.stack(
        [np.linalg.solve(A, scipy.linalg.expm(A * t) @ (A @ y0 + f) - f) for t in t_eval], 1
    )
    # n = 2: offsets wider than the matrix (dropped); n = 1: the diagonal alone.
    offsets = {1: (0,), 2: tuple(range(-3, 4))}.get(n, (-1, 0, 1))
    result = jaxdia.solve_ivp(
        lambda t, y: jnp.asarray(A) @ y + f,
        (0.0, 2.0),
        y0,
        t_eval=t_eval,
        rtol=1e-8,
        atol=1e-10,
        jac_offsets=offsets,
    )
    assert bool(result.success)
    np.testing.assert_allclose(np.asarray(result.y), exact, rtol=1e-5, atol=1e-7)


def test_brusselator_counts_and_accuracy_against_scipy():
    points = 20
    x = np.arange(1, points + 1) / (points + 1)
    y0 = np.stack([1 + np.sin(2 * np.pi * x), np.full(points, 3.0)], -1).reshape(-1)
    t_eval = np.linspace(0, 10, 6)
    kwargs: dict[str, Any] = dict(rtol=1e-6, atol=1e-8, t_eval=t_eval)
    ours = jaxdia.solve_ivp(
        brusselator, (0.0, 10.0), y0, args=(0.02,), jac_offsets=range(-2, 3), **kwargs
    )
    index = np.arange(2 * points)
    sparsity = sp.csc_array(np.abs(np.subtract.outer(index, index)) <= 2)
    numpy_brusselator = for_scipy(brusselator, 0.02)
    theirs = si.solve_ivp(
        numpy_brusselator,
        (0, 10),
        y0,
        method="BDF",
        jac_sparsity=sparsity,
        **kwargs,
    )
    full = si.solve_ivp(
        numpy_brusselator,
        (0, 10),
        y0,
        method="BDF",
        jac_sparsity=sparsity,
        rtol=1e-6,
        atol=1e-8,
    )
    assert bool(ours.success)
    assert_counts_near(ours, full)
    np.testing.assert_allclose(np.asarray(ours.y), theirs.y, rtol=1e-4, atol=1e-6)


def test_periodic_reaction_diffusion_uses_the_corners():
    # Allen-Cahn on a circle: the Jacobian has the corners +-(n - 1).
    n = 16
    x = np.arange(n) / n

    def allen_cahn(t, y):
        return 0.05 * (jnp.roll(y, 1) - 2 * y + jnp.roll(y, -1)) * n**2 + y - y**3

    y0 = 0.5 * np.cos(2 * np.pi * x) + 0.1
    t_eval = np.linspace(0, 3, 4)
    ours = jaxdia.solve_ivp(
        allen_cahn,
        (0.0, 3.0),
        y0,
        t_eval=t_eval,
        rtol=1e-7,
        atol=1e-9,
        jac_offsets=(-(n - 1), -1, 0, 1, n - 1),
    )
    reference = si.solve_ivp(
        for_scipy(allen_cahn),
        (0, 3),
        y0,
        method="Radau",
        t_eval=t_eval,
        rtol=1e-11,
        atol=1e-12,
    )
    assert bool(ours.success)
    np.testing.assert_allclose(np.asarray(ours.y), reference.y, rtol=1e-5, atol=1e-6)


@pytest.mark.full
def test_user_jacobian_takes_the_same_steps():
    n = 8

    def fun(t, y):
        p = jnp.pad(y, 1)
        return 50.0 * (p[:-2] - 2 * y + p[2:]) - y**3

    def jac(t, y):
        return jaxdia.diags(
            [jnp.full(n - 1, 50.0), -100.0 - 3 * y**2, jnp.full(n - 1, 50.0)], offsets=(-1, 0, 1)
        )

    y0 = jnp.linspace(1, 2, n)
    by_ad = jaxdia.solve_ivp(fun, (0.0, 1.0), y0, jac_offsets=(-1, 0, 1), rtol=1e-7)
    by_jac = jaxdia.solve_ivp(fun, (0.0, 1.0), y0, jac=jac, rtol=1e-7)
    assert int(by_ad.nsteps) == int(by_jac.nsteps) and int(by_ad.nlu) == int(by_jac.nlu)
    np.testing.assert_allclose(np.asarray(by_jac.y), np.asarray(by_ad.y), rtol=1e-10)


def test_vmap_over_initial_values_and_parameters_matches_one_by_one():
    def decay(t, y, k):
        return -k * y + jnp.roll(y, 1) * 0.1

    solve = jax.jit(
        lambda y0, k: jaxdia.solve_ivp(
            decay,
            (0.0, 2.0),
            y0,
            t_eval=jnp.array([1.0, 2.0]),
            args=(k,),
            rtol=1e-7,
            jac_offsets=(-2, -1, 0, 2),
        )
    )
    y0s = jnp.array([[1.0, 2.0, 3.0], [0.5, -1.0, 0.0]])
    ks = jnp.array([1.0, 30.0])
    batch = jax.vmap(solve)(y0s, ks)
    for i in range(2):
        single = solve(y0s[i], ks[i])
        np.testing.assert_allclose(np.asarray(batch.y[i]), np.asarray(single.y), rtol=1e-12)
        assert int(batch.nsteps[i]) == int(single.nsteps)
    assert batch.message == [batch.message[0]] * 2 and bool(jnp.all(batch.success))


def test_forward_mode_derivatives_match_the_exact_sensitivities():
    # The logistic equation y' = r y (1 - y): y(t) = 1 / (1 + (1 / y0 - 1) exp(-r t)).
    def final(y0, r):
        result = jaxdia.solve_ivp(
            lambda t, y, r: r * y * (1 - y), (0.0, 2.0), y0, args=(r,), rtol=1e-9, atol=1e-12
        )
        return result.y[:, -1]

    def exact(y0, r):
        return 1 / (1 + (1 / y0 - 1) * jnp.exp(-r * 2.0))

    y0, r = jnp.array([0.1, 0.5]), 3.0
    d_y0, d_r = jax.jacfwd(final, argnums=(0, 1))(y0, r)
    e_y0, e_r = jax.jacfwd(exact, argnums=(0, 1))(y0, r)
    np.testing.assert_allclose(np.asarray(d_y0), np.asarray(e_y0), rtol=1e-5, atol=1e-8)
    np.testing.assert_allclose(np.asarray(d_r), np.asarray(e_r), rtol=1e-5, atol=1e-8)
    # and against central differences of the solver itself
    step = 1e-5
    fd = (final(y0, r + step) - final(y0, r - step)) / (2 * step)
    np.testing.assert_allclose(np.asarray(d_r), np.asarray(fd), rtol=1e-4, atol=1e-7)


def test_reverse_mode_raises_a_jaxdia_error_that_names_forward_mode():
    def loss(y0):
        return jnp.sum(jaxdia.solve_ivp(lambda t, y: -y, (0.0, 1.0), y0).y)

    def odeint_loss(y0):
        return jnp.sum(jaxdia.odeint(lambda y, t: -y, y0, jnp.array([0.0, 1.0]), ml=0, mu=0))

    match = r"cannot be differentiated in reverse mode.*jax\.jacfwd"
    # Under jit the error comes while tracing, before anything runs.
    for reverse, y0 in [
        (jax.grad(loss), jnp.ones(2)),
        (lambda y0: jax.vjp(loss, y0)[1](1.0), jnp.ones(2)),
        (jax.vmap(jax.grad(odeint_loss)), jnp.ones((3, 2))),
    ]:
        with pytest.raises(ValueError, match=match):
            jax.jit(reverse).lower(y0)


@pytest.mark.full
def test_blow_up_fails_with_nan_past_the_singularity():
    # y' = y^2, y(0) = 1: y = 1 / (1 - t) blows up at t = 1.
    result = jaxdia.solve_ivp(
        lambda t, y: y**2, (0.0, 2.0), jnp.array([1.0]), t_eval=jnp.array([0.5, 1.5, 2.0])
    )
    assert int(result.status) < 0 and not bool(result.success)
    assert result.message in (
        "Required step size is less than spacing between numbers.",
        "The number of step attempts reached max_steps before the end.",
    )
    np.testing.assert_allclose(float(result.y[0, 0]), 2.0, rtol=1e-2)
    assert np.all(np.isnan(np.asarray(result.y[0, 1:])))


def test_max_steps_and_non_finite_start_are_reported():
    result = jaxdia.solve_ivp(robertson, (0.0, 1e5), jnp.array([1.0, 0.0, 0.0]), max_steps=5)
    assert int(result.status) == -2 and int(result.nattempts) == 5
    assert np.all(np.isnan(np.asarray(result.y[:, -1])))
    result = jaxdia.solve_ivp(lambda t, y: -y, (0.0, 1.0), jnp.array([1.0, jnp.nan]))
    assert int(result.status) == -3 and "not finite" in result.message


def test_a_newton_matrix_that_cannot_be_factored_fails_the_integration():
    # A NaN in J: no factor of I - c J is usable, every Newton iteration fails at once and
    # the step shrinks below the spacing of floats: status -1 and NaN past t0, no steps.
    def jac(t, y):
        return jaxdia.diags([jnp.full(2, jnp.nan)], offsets=[0], shape=(2, 2))

    for t0, attempts in ((1.0, 200), (0.0, 2000)):
        # From t0 = 0 the spacing of t is subnormal (0 in XLA's arithmetic): the smallest
        # step is then 10 smallest normal numbers, not 0 (it ran to max_steps, status -2).
        t_span = (t0, t0 + 1.0)
        result = jaxdia.solve_ivp(lambda t, y: -y, t_span, jnp.ones(2), t_eval=t_span, jac=jac)
        assert int(result.status) == -1 and int(result.nsteps) == 0, (t0, result.message)
        # One right-hand side per attempt: each iteration stops at its first (after t0's two).
        assert int(result.nfev) == 2 + int(result.nattempts) < attempts
        np.testing.assert_array_equal(np.asarray(result.y[:, 0]), 1.0)
        assert np.all(np.isnan(np.asarray(result.y[:, 1])))


@pytest.mark.full
def test_backwards_in_time_and_empty_interval():
    t_eval = [1.0, 0.5, 0.0]
    back = jaxdia.solve_ivp(lambda t, y: -y, (1.0, 0.0), jnp.array([1.0]), t_eval=t_eval, rtol=1e-8)
    theirs = si.solve_ivp(
        lambda t, y: -y, (1.0, 0.0), [1.0], method="BDF", t_eval=t_eval, rtol=1e-8
    )
    # Backwards, y' = -y grows: the global error is a few hundred tolerances, as SciPy's.
    np.testing.assert_allclose(np.asarray(back.y[0]), np.exp([0.0, 0.5, 1.0]), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(back.y), theirs.y, rtol=1e-9)
    assert abs(int(back.nfev) - theirs.nfev) <= 2
    empty = jaxdia.solve_ivp(lambda t, y: -y, (1.0, 1.0), jnp.array([2.0]))
    assert int(empty.status) == 0 and np.allclose(np.asarray(empty.y), 2.0)


def test_float32_stays_float32_within_its_tolerance():
    y0 = jnp.array([1.0, 0.0, 0.0], jnp.float32)
    result = jaxdia.solve_ivp(robertson, (0.0, 40.0), y0, rtol=1e-4, atol=1e-8)
    reference = si.solve_ivp(
        robertson_numpy, (0, 40), [1.0, 0, 0], method="Radau", rtol=1e-11, atol=1e-14
    )
    assert result.y.dtype == jnp.float32 and bool(result.success)
    np.testing.assert_allclose(
        np.asarray(result.y[:, -1]), reference.y[:, -1], rtol=1e-2, atol=1e-7
    )


@pytest.mark.full
def test_complex_linear_oscillation():
    omega = 5.0
    result = jaxdia.solve_ivp(
        lambda t, y: (1j * omega - 1.0) * y,
        (0.0, 1.0),
        jnp.ones(2, jnp.complex128),
        rtol=1e-9,
        atol=1e-12,
        jac_offsets=(0,),
    )
    np.testing.assert_allclose(np.asarray(result.y[:, -1]), np.exp(1j * omega - 1.0), rtol=1e-6)


@pytest.mark.full
def test_bicgstab_linear_solver_matches_the_banded_one():
    grid = 6
    n = grid * grid

    def heat(t, y):
        u = jnp.pad(y.reshape(grid, grid), 1)
        lap = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:] - 4 * u[1:-1, 1:-1]
        return (lap * (grid + 1) ** 2).reshape(-1) - y**3

    y0 = jnp.linspace(0, 1, n)
    offsets = (-grid, -1, 0, 1, grid)
    banded = jaxdia.solve_ivp(heat, (0.0, 0.1), y0, rtol=1e-6, jac_offsets=offsets)
    krylov = jaxdia.solve_ivp(
        heat,
        (0.0, 0.1),
        y0,
        rtol=1e-6,
        jac_offsets=offsets,
        linear_solver="bicgstab",
        krylov_rtol=1e-10,
    )
    assert bool(krylov.success)
    np.testing.assert_allclose(np.asarray(krylov.y), np.asarray(banded.y), rtol=1e-6, atol=1e-9)


def test_multigrid_linear_solver_matches_scipy_bdf_and_fails_honestly():
    # Allen-Cahn on a 12 x 12 grid (zero boundary values): I - c J is a 5-point stencil.
    points = 12
    h = 1.0 / (points + 1)

    def allen_cahn(t, y):
        u = y.reshape(points, points)
        p = jnp.pad(u, 1)
        lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4 * u
        return (lap / h**2 + (u - u**3) / 0.01).reshape(-1)

    x = np.arange(1, points + 1) * h
    y0 = np.outer(np.sin(np.pi * x), np.sin(2 * np.pi * x)).reshape(-1)
    offsets = (-points, -1, 0, 1, points)
    kwargs: dict[str, Any] = dict(rtol=1e-6, atol=1e-9, t_eval=np.array([0.0, 0.02, 0.05]))
    # One program for both runs: krylov_maxiter is traced.
    solve = jax.jit(
        lambda y0, krylov_maxiter: jaxdia.solve_ivp(
            allen_cahn,
            (0.0, 0.05),
            y0,
            jac_offsets=offsets,
            linear_solver="multigrid",
            grid=(points, points),
            krylov_rtol=1e-8,
            krylov_maxiter=krylov_maxiter,
            **kwargs,
        )
    )
    ours = solve(y0, 100)
    diagonals = [np.ones(points**2 - abs(k)) for k in offsets]
    sparsity = sp.csc_array(sp.diags_array(diagonals, offsets=list(offsets)))  # pyright: ignore[reportArgumentType]
    theirs = si.solve_ivp(
        for_scipy(allen_cahn), (0, 0.05), y0, method="BDF", jac_sparsity=sparsity, **kwargs
    )
    assert bool(ours.success)
    assert (int(ours.nfev), int(ours.njev), int(ours.nlu)) == (theirs.nfev, theirs.njev, theirs.nlu)
    np.testing.assert_allclose(np.asarray(ours.y), theirs.y, rtol=1e-6, atol=1e-9)
    # An inner solve that cannot converge (no iteration) fails every Newton iteration: the
    # step shrinks below the spacing of floats and the integration says so, NaN past t0.
    failed = solve(y0, 0)
    assert int(failed.status) == -1 and not bool(failed.success)
    np.testing.assert_array_equal(np.asarray(failed.y[:, 0]), y0)
    assert np.all(np.isnan(np.asarray(failed.y[:, 1:])))


def test_odeint_matches_scipy_odeint_banded():
    def f(y, t, k):
        p = jnp.pad(y, 1)
        return k * (p[:-2] - 2 * y + p[2:]) - y**2

    y0 = np.linspace(0.2, 1.0, 10)
    t = np.linspace(0, 1, 5)
    ours = jaxdia.odeint(f, y0, t, args=(30.0,), ml=1, mu=1, rtol=1e-8, atol=1e-10)
    theirs = si.odeint(
        lambda y, t, k: np.asarray(f(jnp.asarray(y), t, k)),
        y0,
        t,
        args=(30.0,),
        ml=1,
        mu=1,
        rtol=1e-10,
        atol=1e-12,
    )
    assert ours.shape == (5, 10)
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-5, atol=1e-8)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(method="RK45"), ValueError, "method must be 'BDF'"),
        (dict(y0=np.ones((2, 2))), ValueError, "y0 must be 1-D"),
        (dict(t_eval=[0.5, 2.0]), ValueError, "not within t_span"),
        (dict(t_eval=[0.5, 0.2]), ValueError, "sorted"),
        (dict(rtol=-1.0), ValueError, "rtol must be non-negative"),
        (dict(atol=np.ones(3)), ValueError, r"atol must be a scalar or of shape \(2,\)"),
        (dict(fun=lambda t, y: y[:1]), TypeError, r"must return an array of shape \(2,\)"),
        (dict(jac=lambda t, y: jaxdia.eye(2), jac_offsets=(0,)), ValueError, "not both"),
        (dict(jac=lambda t, y: None), TypeError, "jac must return a jaxdia.DiaMatrix, a dense"),
        (dict(jac=lambda t, y: jnp.eye(3)), TypeError, r"jac must return .* \(2, 2\) matrix"),
        (dict(linear_solver="cholesky"), ValueError, "linear_solver must be one of"),
        (dict(max_steps=0), ValueError, "max_steps must be positive"),
        (dict(linear_solver="multigrid"), ValueError, "needs grid"),
        (dict(linear_solver="multigrid", grid=(3,)), ValueError, "product is n = 2"),
        (dict(grid=(2,)), ValueError, "grid is for linear_solver='multigrid'"),
    ],
)
def test_bad_arguments_raise_early(kwargs, error, match):
    arguments = dict(fun=lambda t, y: -y, t_span=(0.0, 1.0), y0=np.ones(2)) | kwargs
    with pytest.raises(error, match=match):
        jaxdia.solve_ivp(**arguments)


def test_a_large_system_needs_jac_offsets():
    with pytest.raises(ValueError, match="give jac_offsets"):
        jaxdia.solve_ivp(lambda t, y: -y, (0.0, 1.0), np.ones(2000))


@pytest.mark.full
def test_van_der_pol_stiff_counts_and_accuracy_against_scipy():
    def vdp(t, y):
        return jnp.stack([y[1], 1000.0 * (1 - y[0] ** 2) * y[1] - y[0]])

    t_eval = np.linspace(0, 3000, 7)
    kwargs: dict[str, Any] = dict(rtol=1e-6, atol=1e-8)
    ours = jaxdia.solve_ivp(vdp, (0.0, 3000.0), np.array([2.0, 0.0]), t_eval=t_eval, **kwargs)
    numpy_vdp = for_scipy(vdp)
    theirs = si.solve_ivp(numpy_vdp, (0, 3000), [2.0, 0.0], method="BDF", **kwargs)
    reference = si.solve_ivp(
        numpy_vdp, (0, 3000), [2.0, 0.0], method="Radau", t_eval=t_eval, rtol=1e-11, atol=1e-12
    )
    assert bool(ours.success)
    assert_counts_near(ours, theirs)
    np.testing.assert_allclose(np.asarray(ours.y[0]), reference.y[0], atol=1e-3)


def test_an_eager_integration_compiles_one_program(caplog):
    """Eagerly, the checks of the arguments run on the host (NumPy) and everything else
    (casts, the set-up before the loop, the layout of the solutions) is compiled with the
    loop: one program (a first call compiled about 90 op by op, then 15)."""
    y0 = jax.block_until_ready(jnp.ones(4))
    with jax.log_compiles(), caplog.at_level("WARNING", logger="jax"):
        result = jaxdia.solve_ivp(
            lambda t, y: -3.0 * y, (0.0, 1.0), y0, t_eval=[1.0], jac_offsets=(0,)
        )
        jax.block_until_ready(result.y)
        ys = jaxdia.odeint(lambda y, t: -3.0 * y, np.ones(4), np.array([0.0, 1.0]), ml=0, mu=0)
        jax.block_until_ready(ys)
    compiled = [r for r in caplog.records if "Finished XLA compilation" in r.getMessage()]
    assert len(compiled) == 2, [r.getMessage() for r in compiled]
    assert bool(result.success) and isinstance(result.t, jax.Array)
    np.testing.assert_allclose(np.asarray(result.y[:, 0]), np.exp(-3.0), rtol=1e-2)
    np.testing.assert_allclose(np.asarray(ys[-1]), np.exp(-3.0), rtol=1e-2)


def test_the_right_hand_side_is_traced_once_per_use():
    """``fun`` is traced four times: the check of its output, the start (``f(t0, y0)``
    and the initial step's second evaluation in one loop), the Newton iteration and the
    Jacobian's linearization (the first Jacobian is computed by the loop's evaluation of
    J, whose structure is known without tracing it again)."""
    calls = 0

    def decay(t, y):
        nonlocal calls
        calls += 1
        return -y

    result = jaxdia.solve_ivp(decay, (0.0, 1.0), jnp.ones(8), jac_offsets=(0,))
    assert calls == 4
    assert int(result.njev) == 1 and bool(result.success)
    np.testing.assert_allclose(np.asarray(result.y[:, -1]), np.exp(-1.0), rtol=1e-2)


def test_the_update_of_the_differences_is_one_loop_for_every_order():
    """The differences are one (8, n) array whose accepted-step update is a loop over the
    rows it changes, read and written in place: one compiled body for every order, where a
    branch per order (a six-way ``lax.switch``) compiled each order's rows apart. The
    program's conditionals are the new Jacobian's and the prediction's switch."""
    program = jax.jit(
        lambda y0: jaxdia.solve_ivp(lambda t, y: -y, (0.0, 1.0), y0, jac_offsets=(-1, 0, 1)).y
    )
    text = program.lower(jnp.ones(8)).as_text()
    assert text.count("stablehlo.case") == 2
    np.testing.assert_allclose(np.asarray(program(jnp.ones(8)))[:, -1], np.exp(-1.0), rtol=1e-2)
