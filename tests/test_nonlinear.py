"""jaxdia.BandedSolver and MultigridSolver on operators that are not DIA matrices
(materialised by compressed products), inside optimistix's Newton and Chord; the offsets
tag. diffrax's Kvaerno5 runs in examples/brusselator.py (tests/test_examples.py) and the
Jacobian-free Newton-Krylov recipe in docs/nonlinear.md (tests/test_docs.py)."""

import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optimistix as optx
import pytest
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


@pytest.mark.parametrize("kind", ["function", "jacobian", "pytree"])
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


def scipy_root(N, lam):
    return scipy.optimize.root(
        lambda u: np.asarray(bratu(jnp.asarray(u), lam)),
        np.zeros(N * N),
        jac=lambda u: np.asarray(jax.jacfwd(bratu)(jnp.asarray(u), lam)),
        tol=1e-12,
    ).x


def test_chord_factors_once():
    """Chord materialises and factors the Jacobian once (its init); Newton, whose root
    examples/bratu.py checks against SciPy, once per step: either program holds one
    factorization."""
    N = 8
    offsets, mask = five_point(N)
    chord = optx.Chord(
        rtol=1e-11, atol=1e-11, linear_solver=jaxdia.BandedSolver(offsets, mask=mask)
    )

    def find(lam):
        return optx.root_find(bratu, chord, jnp.zeros(N * N), lam, max_steps=60).value

    np.testing.assert_allclose(jax.jit(find)(3.0), scipy_root(N, 3.0), rtol=1e-9, atol=1e-12)
    assert count(jax.make_jaxpr(find)(3.0).jaxpr, "jaxdia_band_factor") == 1


def test_offsets_tag_reaches_the_adjoint():
    """The gradient through the root, by optimistix's implicit adjoint with the tagged
    BandedSolver, against the implicit function theorem with a dense solve:
    d u / d lam = J^-1 exp(u) for F(u, lam) = A u - lam exp(u)."""
    N = 6
    offsets, mask = five_point(N)
    tags = frozenset({jaxdia.offsets_tag(offsets, mask)})
    assert jaxdia.offsets_tag(offsets, mask) == jaxdia.offsets_tag(offsets, mask.copy())
    newton = optx.Newton(rtol=1e-11, atol=1e-11, linear_solver=jaxdia.BandedSolver())
    adjoint = optx.ImplicitAdjoint(linear_solver=jaxdia.BandedSolver())

    def loss(lam):
        u = optx.root_find(bratu, newton, jnp.zeros(N * N), lam, adjoint=adjoint, tags=tags)
        return jnp.sum(u.value**2)

    u = scipy_root(N, 2.0)
    du = np.linalg.solve(np.asarray(jax.jacfwd(bratu)(jnp.asarray(u), 2.0)), np.exp(u))
    value, gradient = jax.jit(jax.value_and_grad(loss))(2.0)
    np.testing.assert_allclose(value, np.sum(u**2), rtol=1e-10)
    np.testing.assert_allclose(gradient, 2 * u @ du, rtol=1e-9)


def test_multigrid_solver_in_newton():
    N = 16
    offsets, mask = five_point(N)
    solver = jaxdia.MultigridSolver(offsets, (N, N), mask=mask, positive_definite=True, rtol=1e-4)
    newton = optx.Newton(rtol=1e-10, atol=1e-10, linear_solver=solver)
    root = jax.jit(lambda lam: optx.root_find(bratu, newton, jnp.zeros(N * N), lam).value)
    np.testing.assert_allclose(root(3.0), scipy_root(N, 3.0), rtol=1e-9, atol=1e-12)


def test_multigrid_solver_transposes():
    """A nonsymmetric stencil (convection), by BiCGStab: the transposed solve of lineax's
    reverse mode gets the transposed matrix and its own hierarchy."""
    N = 12
    T = sp.diags_array([-1.3, 2.0, -0.7], offsets=[-1, 0, 1], shape=(N, N))
    S = (sp.kron(T, sp.eye_array(N)) + sp.kron(sp.eye_array(N), T)).todia()
    A = jaxdia.DiaMatrix.from_scipy(S)
    solver = jaxdia.MultigridSolver(None, (N, N), rtol=1e-12)
    operator = jaxdia.DiaLinearOperator(A)
    b = jnp.asarray(np.random.default_rng(6).standard_normal(N * N))

    def loss(b):
        return jnp.sum(lx.linear_solve(operator, b, solver).value ** 2)

    dense = S.toarray()
    x = np.linalg.solve(dense, np.asarray(b))
    gradient = jax.jit(jax.grad(loss))(b)
    np.testing.assert_allclose(gradient, np.linalg.solve(dense.T, 2 * x), rtol=1e-8)


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
