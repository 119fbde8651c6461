"""jaxdia.solve_ivp's SciPy features against scipy.integrate.solve_ivp(method="BDF"): dense
output (``sol``), events, right-hand sides written in NumPy (run on the host, their
Jacobian by finite differences on the band), an empty ``y0`` and per-component
tolerances; eagerly, under ``jit`` and ``vmap``."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.integrate as si
import scipy.sparse as sp

import jaxdia


def thrown(t, y):
    """A ball thrown up with quadratic drag, in NumPy as written for SciPy: a list out, a
    branch on the sign of the velocity (a traced y cannot be branched on)."""
    drag = 0.05 * y[1] ** 2
    return [y[1], -9.81 - drag if y[1] > 0 else -9.81 + drag]


def apex(t, y):
    return y[1]


def ground(t, y):
    return y[0]


ground.terminal = True  # type: ignore[attr-defined]
ground.direction = -1  # type: ignore[attr-defined]

TIGHT: dict[str, Any] = dict(rtol=1e-8, atol=1e-10)


def test_a_numpy_right_hand_side_with_events_and_dense_output_matches_scipy():
    """One eager integration: the right-hand side runs on the host (a callback in the
    program), its Jacobian by finite differences; the events are located on the
    interpolant; ``sol`` is evaluated eagerly and under ``jit``."""
    y0 = [0.0, 10.0]
    ours = jaxdia.solve_ivp(
        thrown, (0.0, 10.0), y0, events=[apex, ground], dense_output=True, **TIGHT
    )
    theirs = si.solve_ivp(
        thrown, (0.0, 10.0), y0, method="BDF", events=[apex, ground], dense_output=True, **TIGHT
    )
    assert int(ours.status) == theirs.status == 1 and ours.message == theirs.message
    assert ours.t_events is not None and ours.y_events is not None and ours.sol is not None
    for mine, scipy_t in zip(ours.t_events, theirs.t_events, strict=True):
        assert mine.shape == scipy_t.shape == (1,)
        np.testing.assert_allclose(np.asarray(mine), scipy_t, rtol=1e-7)
    for mine, scipy_y in zip(ours.y_events, theirs.y_events, strict=True):
        np.testing.assert_allclose(np.asarray(mine), scipy_y, rtol=1e-6, atol=1e-7)
    # The last time is the landing; y there is on the ground.
    np.testing.assert_allclose(float(ours.t[-1]), theirs.t[-1], rtol=1e-7)
    assert abs(float(ours.y[0, -1])) < 1e-7 and ours.y.shape == (2, ours.t.shape[0])
    assert abs(ours.t.shape[0] - theirs.t.shape[0]) <= 3
    times = np.linspace(0.0, theirs.t[-1], 7)
    np.testing.assert_allclose(np.asarray(ours.sol(times)), theirs.sol(times), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(ours.sol(1.0)), theirs.sol(1.0), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours.sol.ts), ours.t)
    under_jit = jax.jit(lambda sol, t: sol(t))(ours.sol, jnp.asarray(times))
    np.testing.assert_array_equal(np.asarray(under_jit), np.asarray(ours.sol(times)))


def test_per_component_tolerances_under_jit():
    """Array tolerances are operands of one program (they once failed as the loop's carry
    changed type: ``rtol`` of shape (n,) made the Newton tolerance a vector)."""

    def decay(t, y):
        return -jnp.array([1.0, 2.0]) * y

    solve = jax.jit(
        lambda rtol, atol: jaxdia.solve_ivp(decay, (0.0, 2.0), jnp.ones(2), rtol=rtol, atol=atol)
    )
    atol = np.array([1e-10, 1e-8])
    same = solve(np.full(2, 1e-7), atol)
    theirs = si.solve_ivp(
        lambda t, y: -np.array([1.0, 2.0]) * y,
        (0, 2),
        [1.0, 1.0],
        method="BDF",
        rtol=1e-7,
        atol=atol,
    )
    assert bool(same.success)
    np.testing.assert_allclose(np.asarray(same.y[:, -1]), theirs.y[:, -1], rtol=1e-6)
    # A loose second component: the first stays as accurate as its tolerance asks.
    mixed = solve(np.array([1e-7, 1e-2]), atol)
    exact = np.exp(-np.array([1.0, 2.0]) * 2.0)
    error = np.abs(np.asarray(mixed.y[:, -1]) - exact) / exact
    assert error[0] < 1e-5 and int(mixed.nsteps) < int(same.nsteps), (error, mixed.nsteps)


def test_an_empty_y0_returns_scipy_shapes():
    def nothing(t, y):
        return np.zeros(0)

    for kwargs in [dict(dense_output=True), dict(t_eval=[0.0, 4.0, 10.0])]:
        ours = jaxdia.solve_ivp(nothing, (0.0, 10.0), np.zeros(0), **kwargs)
        theirs = si.solve_ivp(nothing, (0.0, 10.0), np.zeros(0), method="BDF", **kwargs)
        assert int(ours.status) == theirs.status == 0
        assert ours.y.shape == theirs.y.shape
        np.testing.assert_array_equal(np.asarray(ours.t), theirs.t)
    assert ours.sol is None
    dense = jaxdia.solve_ivp(nothing, (0.0, np.inf), np.zeros(0), dense_output=True)
    assert dense.sol is not None
    assert dense.sol(3.0).shape == (0,) and dense.sol([1.0, 2.0, 3.0]).shape == (0, 3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(rtol=np.ones(3)), ValueError, r"rtol must be a scalar or of shape \(2,\)"),
        (dict(rtol=np.ones((2, 2))), ValueError, "rtol must be a scalar"),
        (dict(events=ground, event_capacity=0), ValueError, "event_capacity must be positive"),
        (dict(jac_sparsity=np.ones((3, 3))), ValueError, r"jac_sparsity must have shape \(2, 2\)"),
        (dict(jac_sparsity=np.eye(2), jac_offsets=(0,)), ValueError, "give jac_sparsity"),
        (dict(first_step=5.0), ValueError, "first_step` exceeds bounds"),
        (dict(args=3.0), TypeError, "Supplied 'args' cannot be unpacked"),
    ],
)
def test_bad_arguments_raise_early(kwargs, error, match):
    arguments = dict(fun=lambda t, y: -y, t_span=(0.0, 1.0), y0=np.ones(2)) | kwargs
    with pytest.raises(error, match=match):
        jaxdia.solve_ivp(**arguments)


def test_a_terminal_attribute_that_is_not_a_count_is_refused():
    def event(t, y):
        return y[0]

    event.terminal = 1.5  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="`terminal` attribute"):
        jaxdia.solve_ivp(lambda t, y: -y, (0.0, 1.0), np.ones(2), events=event)


# -- full tier: jit, vmap, counts of events, host Jacobians ----------------------------------


def oscillator(t, y):
    return jnp.stack([y[1], -y[0]])


def crossing(t, y):
    return y[0]


@pytest.mark.full
def test_events_under_jit_with_a_terminal_count_and_directions_match_scipy():
    """JAX events traced into the program: the third downward crossing stops the run;
    ``t_eval`` past it is NaN under ``jit`` and dropped eagerly (SciPy's)."""

    def down(t, y):
        return y[0] - 0.5

    down.terminal, down.direction = 3, -1  # type: ignore[attr-defined]

    def up(t, y):
        return y[0] - 0.5

    up.direction = 1  # type: ignore[attr-defined]
    t_eval = np.linspace(0.0, 30.0, 16)
    kwargs: dict[str, Any] = dict(t_eval=t_eval, events=[down, up], **TIGHT)
    theirs = si.solve_ivp(
        lambda t, y: np.asarray(oscillator(t, y)), (0, 30), [1.0, 0.0], method="BDF", **kwargs
    )
    jitted = jax.jit(lambda y0: jaxdia.solve_ivp(oscillator, (0.0, 30.0), y0, **kwargs))
    ours = jitted(jnp.array([1.0, 0.0]))
    eager = jaxdia.solve_ivp(oscillator, (0.0, 30.0), [1.0, 0.0], **kwargs)
    assert int(ours.status) == theirs.status == 1
    assert ours.nevents is not None and ours.nevents.tolist() == [3, 2]
    assert ours.t_events is not None and eager.t_events is not None and eager.y_events is not None
    for i in range(2):
        count = len(theirs.t_events[i])
        np.testing.assert_allclose(np.asarray(ours.t_events[i][:count]), theirs.t_events[i], 1e-6)
        np.testing.assert_allclose(np.asarray(eager.t_events[i]), theirs.t_events[i], rtol=1e-6)
        np.testing.assert_allclose(eager.y_events[i], theirs.y_events[i], rtol=1e-5, atol=1e-6)
        assert np.all(np.isnan(np.asarray(ours.t_events[i][count:])))
    reached = len(theirs.t)
    np.testing.assert_allclose(np.asarray(eager.t), theirs.t)
    np.testing.assert_allclose(np.asarray(eager.y), theirs.y, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(ours.y[:, :reached]), theirs.y, rtol=1e-5, atol=1e-6)
    assert np.all(np.isnan(np.asarray(ours.y[:, reached:])))


@pytest.mark.full
def test_an_event_that_occurs_more_often_than_its_slots():
    crossings = jaxdia.solve_ivp(oscillator, (0.0, 40.0), [1.0, 0.0], events=crossing, **TIGHT)
    assert crossings.nevents is not None and int(crossings.nevents[0]) == 13
    assert crossings.t_events is not None
    np.testing.assert_allclose(
        np.asarray(crossings.t_events[0]), (np.arange(13) + 0.5) * np.pi, rtol=1e-6
    )
    kept = jax.jit(
        lambda y0: jaxdia.solve_ivp(
            oscillator, (0.0, 40.0), y0, events=crossing, event_capacity=4, **TIGHT
        )
    )(jnp.array([1.0, 0.0]))
    # Under jit the count says that occurrences were not kept.
    assert kept.nevents is not None and int(kept.nevents[0]) == 13 and kept.t_events is not None
    np.testing.assert_allclose(np.asarray(kept.t_events[0][:3]), crossings.t_events[0][:3])


@pytest.mark.full
def test_vmap_of_dense_output_and_events_matches_one_by_one():
    def stop(t, y):
        return y[0] - 0.2

    stop.terminal = True  # type: ignore[attr-defined]

    def run(y0):
        return jaxdia.solve_ivp(
            lambda t, y: -y, (0.0, 5.0), y0, events=stop, dense_output=True, max_steps=200
        )

    y0s = jnp.array([[1.0, 2.0], [0.5, 1.0]])
    batch = jax.jit(jax.vmap(run))(y0s)
    assert batch.sol is not None and batch.t_events is not None
    times = jnp.array([0.3, 1.0])
    values = jax.vmap(lambda s: s(times))(batch.sol)
    for i in range(2):
        single = run(y0s[i])
        assert single.sol is not None and single.t_events is not None
        np.testing.assert_allclose(float(batch.t_events[0][i, 0]), single.t_events[0][0])
        np.testing.assert_allclose(np.asarray(values[i]), np.asarray(single.sol(times)))
        np.testing.assert_allclose(float(single.t_events[0][0]), np.log(y0s[i, 0] / 0.2), 1e-2)


@pytest.mark.full
def test_backwards_with_dense_output_and_an_event_matches_scipy():
    def level(t, y):
        return y[0] - 2.0

    kwargs: dict[str, Any] = dict(dense_output=True, events=level, **TIGHT)
    ours = jaxdia.solve_ivp(lambda t, y: -y, (1.0, -1.0), [1.0], **kwargs)
    theirs = si.solve_ivp(lambda t, y: -y, (1.0, -1.0), [1.0], method="BDF", **kwargs)
    assert ours.t_events is not None and ours.sol is not None
    np.testing.assert_allclose(np.asarray(ours.t_events[0]), theirs.t_events[0], rtol=1e-7)
    np.testing.assert_allclose(float(ours.t_events[0][0]), 1 - np.log(2.0), rtol=1e-6)
    times = np.linspace(1.0, -1.0, 5)
    np.testing.assert_allclose(np.asarray(ours.sol(times)), theirs.sol(times), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(ours.t), theirs.t, rtol=1e-6)


def numpy_brusselator(t, y, alpha):
    u, v = y[0::2], y[1::2]
    h = 1.0 / (u.size + 1)
    up, vp = np.pad(u, 1, constant_values=1.0), np.pad(v, 1, constant_values=3.0)
    du = 1 + u * u * v - 4 * u + alpha * (up[:-2] - 2 * u + up[2:]) / h**2
    dv = 3 * u - u * u * v + alpha * (vp[:-2] - 2 * v + vp[2:]) / h**2
    return np.stack([du, dv], axis=-1).reshape(-1)


@pytest.mark.full
def test_a_numpy_right_hand_side_differenced_on_jac_sparsity_matches_scipy():
    """np.pad does not trace: the right-hand side runs on the host and its Jacobian is
    SciPy's num_jac on the band, one evaluation per colour; ``vectorized`` takes every
    colour in one call."""
    points = 10
    x = np.arange(1, points + 1) / (points + 1)
    y0 = np.stack([1 + np.sin(2 * np.pi * x), np.full(points, 3.0)], -1).reshape(-1)
    index = np.arange(2 * points)
    sparsity = sp.csc_array(np.abs(np.subtract.outer(index, index)) <= 2)
    kwargs: dict[str, Any] = dict(args=(0.02,), rtol=1e-6, atol=1e-8, jac_sparsity=sparsity)
    theirs = si.solve_ivp(numpy_brusselator, (0, 10), y0, method="BDF", **kwargs)
    ours = jaxdia.solve_ivp(numpy_brusselator, (0.0, 10.0), y0, **kwargs)
    assert bool(ours.success)
    assert abs(int(ours.nsteps) - (len(theirs.t) - 1)) <= 0.1 * len(theirs.t)
    np.testing.assert_allclose(np.asarray(ours.y[:, -1]), theirs.y[:, -1], rtol=1e-4, atol=1e-6)

    def columns(t, Y, alpha):
        return np.stack([numpy_brusselator(t, y, alpha) for y in Y.T], axis=1)

    vectorized = jaxdia.solve_ivp(columns, (0.0, 10.0), y0, vectorized=True, **kwargs)
    np.testing.assert_allclose(np.asarray(vectorized.y), np.asarray(ours.y), rtol=1e-12)
    assert int(vectorized.nsteps) == int(ours.nsteps)


@pytest.mark.full
def test_a_numpy_jacobian_dense_or_sparse_matches_scipy():
    def vdp(t, y):
        return [y[1], 10.0 * (1 - y[0] ** 2) * y[1] - y[0]]

    def dense_jac(t, y):
        return np.array([[0.0, 1.0], [-20.0 * y[0] * y[1] - 1.0, 10.0 * (1 - y[0] ** 2)]])

    theirs = si.solve_ivp(vdp, (0, 20), [2.0, 0.0], method="BDF", jac=dense_jac, **TIGHT)
    for jac in (dense_jac, lambda t, y: sp.csr_array(dense_jac(t, y))):
        ours = jaxdia.solve_ivp(vdp, (0.0, 20.0), [2.0, 0.0], jac=jac, **TIGHT)
        assert (int(ours.nfev), int(ours.njev), int(ours.nlu)) == (
            theirs.nfev,
            theirs.njev,
            theirs.nlu,
        )
        np.testing.assert_allclose(np.asarray(ours.y[:, -1]), theirs.y[:, -1], rtol=1e-8)


@pytest.mark.full
def test_a_numpy_right_hand_side_under_jit_and_vmap_and_not_differentiated():
    def decay(t, y, k):
        return [-k * y[0], -float(k) * y[1]]

    solve = jax.jit(
        jax.vmap(lambda y0, k: jaxdia.solve_ivp(decay, (0.0, 1.0), y0, args=(k,), **TIGHT).y)
    )
    ks = jnp.array([1.0, 3.0])
    ys = solve(jnp.ones((2, 2)), ks)
    np.testing.assert_allclose(np.asarray(ys[:, :, -1]), np.exp(-ks)[:, None] * np.ones(2), 1e-6)
    with pytest.raises(TypeError, match="cannot be differentiated"):
        jax.jacfwd(lambda k: jaxdia.solve_ivp(decay, (0.0, 1.0), jnp.ones(2), args=(k,)).y)(1.0)


@pytest.mark.full
def test_a_numpy_program_holds_a_callback_and_a_jax_one_does_not():
    def lowered(fun):
        program = jax.jit(lambda y0: jaxdia.solve_ivp(fun, (0.0, 1.0), y0, jac_offsets=(0,)).y)
        return program.lower(jnp.ones(2)).as_text()

    assert "callback" in lowered(lambda t, y: np.asarray(-y))
    assert "callback" not in lowered(lambda t, y: -y)


@pytest.mark.full
def test_float32_with_a_numpy_right_hand_side_and_an_event_stays_float32():
    def growth(t, y):
        return [float(y[0]) * (1.0 - float(y[0]))]  # float() does not trace

    def half(t, y):
        return y[0] - 0.5

    y0 = np.array([0.1], np.float32)
    ours = jaxdia.solve_ivp(growth, (0.0, 6.0), y0, events=half, dense_output=True, rtol=1e-4)
    assert ours.y.dtype == np.float32 and ours.sol is not None and ours.t_events is not None
    assert ours.sol(1.0).dtype == np.float32
    # The logistic curve crosses 1/2 at t = log(9).
    np.testing.assert_allclose(float(ours.t_events[0][0]), np.log(9.0), rtol=1e-3)
    exact = 1 / (1 + 9 * np.exp(-6.0))
    np.testing.assert_allclose(float(ours.y[0, -1]), exact, rtol=1e-3)
