"""jaxdia.BandedSolver on operators that are not DIA matrices (materialised by compressed
products), inside optimistix's Newton and Chord and diffrax's implicit solvers; the
offsets tag; the Jacobian-free Newton-Krylov recipe."""

import diffrax as dfx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
import pytest
import scipy.integrate
import scipy.optimize
import scipy.sparse as sp

import jaxdia

from .test_factor import _count as count
from .test_jacobian import bratu, five_point


def banded_matrix(n, offsets, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal((len(offsets), n))
    data[offsets.index(0)] += 6.0  # diagonally dominant: well conditioned
    return jaxdia.DiaMatrix(data.astype(dtype), offsets, (n, n))


@pytest.mark.parametrize("kind", ["function", "jacobian", "matrix", "pytree"])
def test_any_operator_is_materialised_and_solved(kind):
    n, offsets = 12, (-2, 0, 1, 3)
    A = banded_matrix(n, offsets, seed=1)
    dense = np.asarray(A.todense())
    b = jnp.asarray(np.random.default_rng(2).standard_normal(n))
    vector = jax.ShapeDtypeStruct((n,), jnp.float64)

    def make_operator():
        if kind == "function":
            return lx.FunctionLinearOperator(lambda v: A @ v, vector)
        if kind == "jacobian":
            return lx.JacobianLinearOperator(lambda x, _: A @ jnp.sin(x), jnp.zeros(n))
        if kind == "matrix":
            return lx.MatrixLinearOperator(jnp.asarray(dense))
        # A dict of a (3, 2) and a (6,) array, flattened in order.
        structure = {
            "a": jax.ShapeDtypeStruct((3, 2), jnp.float64),
            "b": jax.ShapeDtypeStruct((6,), jnp.float64),
        }

        def mv(tree):
            y = A @ jnp.concatenate([tree["a"].reshape(-1), tree["b"]])
            return {"a": y[:6].reshape(3, 2), "b": y[6:]}

        return lx.FunctionLinearOperator(mv, structure)

    solver = jaxdia.BandedSolver(offsets)
    rhs = b if kind != "pytree" else {"a": b[:6].reshape(3, 2), "b": b[6:]}
    x = jax.jit(lambda r: lx.linear_solve(make_operator(), r, solver).value)(rhs)
    flat = x if kind != "pytree" else jnp.concatenate([x["a"].reshape(-1), x["b"]])
    np.testing.assert_allclose(flat, np.linalg.solve(dense, np.asarray(b)), rtol=1e-10)
    # Transposed solves reuse the factor (lineax's reverse mode needs them).
    if kind == "function":
        operator = make_operator()
        state = solver.init(operator, {})
        transposed, _ = solver.transpose(state, {})
        x_t = lx.linear_solve(operator.T, b, solver, state=transposed).value
        np.testing.assert_allclose(x_t, np.linalg.solve(dense.T, np.asarray(b)), rtol=1e-10)


def test_cholesky_complex_and_conjugate():
    n, offsets = 10, (-1, 0, 1)
    rng = np.random.default_rng(3)
    off = rng.standard_normal(n - 1) + 1j * rng.standard_normal(n - 1)
    H = np.diag(np.full(n, 6.0 + 0j)) + np.diag(off, -1) + np.diag(off.conj(), 1)
    assert np.linalg.eigvalsh(H).min() > 0
    operator = lx.MatrixLinearOperator(jnp.asarray(H))
    solver = jaxdia.BandedSolver(offsets, positive_definite=True)
    state = solver.init(operator, {})
    assert isinstance(state[0], jaxdia.BandedCholesky)
    b = jnp.asarray(rng.standard_normal(n) + 1j * rng.standard_normal(n))
    x = lx.linear_solve(operator, b, solver, state=state).value
    np.testing.assert_allclose(x, np.linalg.solve(H, b), rtol=1e-10)
    conjugated, _ = solver.conj(state, {})
    x_c = lx.linear_solve(lx.conj(operator), b, solver, state=conjugated).value
    np.testing.assert_allclose(x_c, np.linalg.solve(H.conj(), b), rtol=1e-10)


def test_newton_and_chord_on_bratu():
    N = 8
    offsets, mask = five_point(N)
    solver = jaxdia.BandedSolver(offsets, mask=mask)
    u0 = jnp.zeros(N * N)
    expected = scipy.optimize.root(
        lambda u: np.asarray(bratu(jnp.asarray(u), 3.0)),
        np.zeros(N * N),
        jac=lambda u: np.asarray(jax.jacfwd(bratu)(jnp.asarray(u), 3.0)),
        tol=1e-12,
    ).x
    for method in (optx.Newton, optx.Chord):
        root_find = method(rtol=1e-11, atol=1e-11, linear_solver=solver)

        def find(lam):
            return optx.root_find(bratu, root_find, u0, lam, max_steps=60).value

        np.testing.assert_allclose(jax.jit(find)(3.0), expected, rtol=1e-9, atol=1e-12)
        # Newton factors once per step, Chord once in all: each program has one factor.
        assert count(jax.make_jaxpr(find)(3.0).jaxpr, "jaxdia_band_factor") == 1


def test_offsets_tag_reaches_the_adjoint():
    N = 6
    offsets, mask = five_point(N)
    tags = frozenset({jaxdia.offsets_tag(offsets, mask)})
    assert jaxdia.offsets_tag(offsets, mask) == jaxdia.offsets_tag(offsets, mask.copy())
    newton = optx.Newton(rtol=1e-11, atol=1e-11, linear_solver=jaxdia.BandedSolver())
    adjoint = optx.ImplicitAdjoint(linear_solver=jaxdia.BandedSolver())

    def loss(lam, solver, adjoint, tags):
        u = optx.root_find(bratu, solver, jnp.zeros(N * N), lam, adjoint=adjoint, tags=tags)
        return jnp.sum(u.value**2)

    ours = jax.jit(jax.value_and_grad(lambda lam: loss(lam, newton, adjoint, tags)))(2.0)
    dense = jax.jit(
        jax.value_and_grad(
            lambda lam: loss(lam, optx.Newton(1e-11, 1e-11), optx.ImplicitAdjoint(), frozenset())
        )
    )(2.0)
    np.testing.assert_allclose(ours, dense, rtol=1e-9)


def brusselator(t, y, args):
    """The 1-D Brusselator, unknowns interleaved ``(u_0, v_0, u_1, v_1, ...)``."""
    del t, args
    u, v = y[0::2], y[1::2]
    h = 1.0 / (u.size + 1)
    up, vp = jnp.pad(u, 1, constant_values=1.0), jnp.pad(v, 1, constant_values=3.0)
    du = 1.0 + u * u * v - 4.0 * u + 0.02 * (up[:-2] - 2 * u + up[2:]) / h**2
    dv = 3.0 * u - u * u * v + 0.02 * (vp[:-2] - 2 * v + vp[2:]) / h**2
    return jnp.stack([du, dv], axis=-1).reshape(-1)


def test_kvaerno5_matches_the_default_solver_and_scipy():
    points = 16
    x = np.arange(1, points + 1) / (points + 1)
    y0 = jnp.asarray(np.stack([1 + np.sin(2 * np.pi * x), np.full(points, 3.0)], -1).ravel())
    offsets = (-2, -1, 0, 1, 2)

    def integrate(linear_solver):
        solver = dfx.Kvaerno5(
            root_finder=dfx.VeryChord(rtol=1e-6, atol=1e-9, linear_solver=linear_solver)
        )
        return dfx.diffeqsolve(
            dfx.ODETerm(brusselator),
            solver,
            0.0,
            2.0,
            None,
            y0,
            stepsize_controller=dfx.PIDController(rtol=1e-8, atol=1e-10),
            max_steps=4096,
        ).ys[-1]

    ours = jax.jit(integrate, static_argnums=0)(jaxdia.BandedSolver(offsets))
    default = jax.jit(integrate, static_argnums=0)(lx.AutoLinearSolver(well_posed=None))
    np.testing.assert_allclose(ours, default, rtol=1e-9, atol=1e-12)
    sparsity = sp.diags_array([np.ones(2 * points - abs(k)) for k in offsets], offsets=offsets)
    reference = scipy.integrate.solve_ivp(
        lambda t, y: np.asarray(brusselator(t, jnp.asarray(y), None)),
        (0.0, 2.0),
        np.asarray(y0),
        method="BDF",
        jac_sparsity=sparsity,
        rtol=1e-10,
        atol=1e-12,
    ).y[:, -1]
    np.testing.assert_allclose(ours, reference, rtol=1e-6, atol=1e-8)


def test_jacobian_free_newton_krylov():
    """The recipe of docs/nonlinear.md: GMRES on the exact Jacobian-vector products,
    preconditioned by the factor of a Jacobian computed once, at the initial guess."""
    N = 8
    offsets, mask = five_point(N)
    u = jnp.zeros(N * N)
    stale = jaxdia.lu_factor(jaxdia.jacobian(bratu, offsets, mask=mask)(u, 3.0))

    @jax.jit
    def newton_step(u):
        value, jvp = jax.linearize(lambda v: bratu(v, 3.0), u)
        step, _ = jax.scipy.sparse.linalg.gmres(jvp, value, M=stale.solve, tol=1e-12)
        return u - step

    for _ in range(8):
        u = newton_step(u)
    assert float(jnp.max(jnp.abs(bratu(u, 3.0)))) < 1e-9


def test_errors():
    vector = jax.ShapeDtypeStruct((4,), jnp.float64)
    square = lx.FunctionLinearOperator(lambda v: 2 * v, vector)
    with pytest.raises(ValueError, match=r"BandedSolver\(offsets=...\) or a jaxdia.offsets_tag"):
        jaxdia.BandedSolver().init(square, {})
    wide = lx.MatrixLinearOperator(jnp.ones((3, 4)))
    with pytest.raises(ValueError, match="square operator, got 3 outputs for 4 inputs"):
        jaxdia.BandedSolver((0,)).init(wide, {})
    with pytest.raises(ValueError, match="a mask needs offsets"):
        jaxdia.BandedSolver(mask=np.ones((1, 4), dtype=bool))
    with pytest.raises(ValueError, match="duplicate"):
        jaxdia.offsets_tag((1, 1))
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        jaxdia.BandedSolver((0,), chunk_size=0)
    mixed = lx.FunctionLinearOperator(
        lambda t: t,
        {
            "a": jax.ShapeDtypeStruct((2,), jnp.float32),
            "b": jax.ShapeDtypeStruct((2,), jnp.float64),
        },
    )
    with pytest.raises(ValueError, match="one dtype"):
        jaxdia.BandedSolver((0,)).init(mixed, {})
