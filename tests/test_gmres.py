"""jaxdia.gmres against scipy.sparse.linalg.gmres: the Peclet family of upwinded
convection-diffusion problems with ILU(0), Jacobi and no preconditioner; honest reports
(a converged system's true residual is within the tolerance, an unreachable tolerance or
a stagnating system reports ``converged`` False); batches, jit, vmap, grad, complex,
float32, tiny systems and ``restart > n``."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia
from jaxdia import _dispatch
from jaxdia._linalg import gmres as gmres_module

from .helpers import in_bounds_mask


def peclet(nx: int, pe: float) -> sp.dia_array:
    """``-Laplacian(u) + Pe (1, 0.5) . grad(u)`` on an ``nx x nx`` grid, upwinded."""
    h = 1.0 / (nx + 1)
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(nx, nx)) / h**2
    B = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(nx, nx)) / h
    I = sp.eye_array(nx)
    return sp.dia_array(sp.kronsum(T, T) + pe * (sp.kron(B, I) + 0.5 * sp.kron(I, B)))


def rhs(n: int, seed: int = 0, complex_: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(n)
    return b + 1j * rng.standard_normal(n) if complex_ else b


def true_residual(S, b, x) -> float:
    """``|b - A x|`` in double precision, by SciPy."""
    wide = np.complex128 if np.iscomplexobj(x) or np.iscomplexobj(S.data) else np.float64
    return float(np.linalg.norm(np.asarray(b, wide) - S.astype(wide) @ np.asarray(x, wide)))


def scipy_gmres(S, b, M=None, **options):
    """SciPy's gmres with ``M`` a jaxdia preconditioner; returns ``(x, flag, iterations)``
    (inner iterations, counted by the callback)."""
    count = [0]
    operator = None
    if M is not None:
        operator = spla.LinearOperator(S.shape, matvec=lambda v: np.array(M(jnp.asarray(v))))
    x, flag = spla.gmres(
        S.tocsr(),
        b,
        M=operator,
        callback=lambda _: count.__setitem__(0, count[0] + 1),
        callback_type="pr_norm",
        **options,
    )
    return x, flag, count[0]


def preconditioner(name, A, nx):
    if name == "ilu0":
        return jaxdia.ilu0(A, (nx, nx))
    return jaxdia.jacobi(A) if name == "jacobi" else None


def check_against_scipy(nx, pe, name, rtol=1e-8, maxiter=100):
    S = peclet(nx, pe)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(nx * nx)
    M = preconditioner(name, A, nx)
    x, info = jaxdia.gmres(A, b, rtol=rtol, maxiter=maxiter, M=M)
    expected, flag, iterations = scipy_gmres(S, b, M, rtol=rtol, atol=0.0, maxiter=maxiter)
    residual = true_residual(S, b, x)
    np.testing.assert_allclose(float(info.residual_norm), residual, rtol=1e-6)
    if flag == 0:
        assert bool(info.converged), (nx, pe, name, residual / np.linalg.norm(b))
        # The same counts without a preconditioner; with one, SciPy's inner tolerance
        # (adapted each cycle) may end its cycles later than the estimate needs.
        assert int(info.iterations) <= 1.1 * iterations + 2, (int(info.iterations), iterations)
    if bool(info.converged):
        assert residual <= rtol * np.linalg.norm(b)
        scale = np.linalg.norm(expected)
        assert np.linalg.norm(np.asarray(x) - expected) <= 1e-4 * scale
    else:
        assert residual > rtol * np.linalg.norm(b)


#: The fast tier's cases of the family (each preconditioner once); the full tier runs the rest.
FAST = [(12, 0.1, "none"), (16, 50.0, "jacobi"), (20, 500.0, "ilu0")]
SMALL = [
    pytest.param(nx, pe, name, marks=() if (nx, pe, name) in FAST else pytest.mark.full)
    for nx, pe in [(12, 0.1), (16, 50.0), (20, 500.0)]
    for name in ("none", "jacobi", "ilu0")
]


@pytest.mark.parametrize("nx, pe, name", SMALL)
def test_peclet_family_matches_scipy(nx, pe, name):
    check_against_scipy(nx, pe, name)


@pytest.fixture
def xla_gram_schmidt():
    """gmres with XLA's block Gram-Schmidt (GPUs' and TPUs') on CPU, whose default is the
    BLAS host call; the compiled programs of either are dropped before and after."""
    jax.clear_caches()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_dispatch, "gram_schmidt_by_blas", lambda dtype: False)
        yield
    jax.clear_caches()


@pytest.mark.parametrize("nx, pe, name", [(16, 50.0, "none"), (12, 0.1, "jacobi")])
def test_xla_gram_schmidt_of_accelerators_matches_scipy(nx, pe, name, xla_gram_schmidt):
    check_against_scipy(nx, pe, name)


@pytest.mark.full
@pytest.mark.parametrize(
    "nx, pe",
    # every Peclet number on grids to 160 x 160; on 320 x 320 the longest run (diffusion)
    [(nx, pe) for nx in (40, 80, 160) for pe in (0.1, 10.0, 500.0)] + [(320, 0.1)],
)
def test_peclet_family_matches_scipy_on_large_grids(nx, pe):
    names = ("ilu0", "jacobi", "none") if nx <= 80 else ("ilu0",)
    for name in names:
        check_against_scipy(nx, pe, name, maxiter=400 if name == "ilu0" else 100)


# -- honest reports ---------------------------------------------------------------------------


def test_maxiter_counts_cycles_and_reports_non_convergence():
    nx = 12
    S = peclet(nx, 10.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(nx * nx)
    x, info = jaxdia.gmres(A, b, rtol=1e-12, restart=5, maxiter=3)
    assert int(info.iterations) == 15 and not bool(info.converged)
    np.testing.assert_allclose(float(info.residual_norm), true_residual(S, b, x), rtol=1e-10)
    expected, flag, iterations = scipy_gmres(S, b, rtol=1e-12, atol=0.0, restart=5, maxiter=3)
    assert flag != 0 and iterations == 15
    np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-8, atol=1e-12)
    x, info = jaxdia.gmres(A, b, maxiter=0)
    assert int(info.iterations) == 0 and not bool(info.converged) and not np.any(np.asarray(x))


def test_trivial_cases_take_no_iterations():
    S = peclet(8, 1.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(64)
    exact = spla.spsolve(S.tocsc(), b)
    _, info = jaxdia.gmres(A, b, exact, rtol=1e-8)
    assert int(info.iterations) == 0 and bool(info.converged)
    x, info = jaxdia.gmres(A, np.zeros(64))
    assert int(info.iterations) == 0 and bool(info.converged) and not np.any(np.asarray(x))
    _, info = jaxdia.gmres(A, b, rtol=0.0, atol=1e3 * np.linalg.norm(b))
    assert int(info.iterations) == 0 and bool(info.converged)


def test_a_met_estimate_with_an_unmet_true_residual_restarts():
    """A preconditioner that is not linear (right preconditioning then updates ``x`` by
    ``M(V y)``, not ``sum y_i M(v_i)``): the first cycle's estimate meets the tolerance,
    its true residual does not; one cycle reports False, more cycles converge."""
    n = 60
    S = sp.dia_array(sp.diags_array([-1.3, 3.0, -0.7], offsets=[-1, 0, 1], shape=(n, n)))
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(n)

    def M(v):
        return v * (1 + 1e-3 * jnp.cos(v))

    x, one = jaxdia.gmres(A, b, rtol=1e-10, restart=n, maxiter=1, M=M)
    assert int(one.iterations) < n  # the estimate ended the cycle
    assert not bool(one.converged) and true_residual(S, b, x) > 1e-10 * np.linalg.norm(b)
    x, info = jaxdia.gmres(A, b, rtol=1e-10, restart=n, M=M)
    assert bool(info.converged) and int(info.iterations) > int(one.iterations)
    assert true_residual(S, b, x) <= 1e-10 * np.linalg.norm(b)


def test_stagnation_and_singular_systems_report_false_and_stop():
    # GMRES(1) on a rotation stagnates exactly: (r, A r) = 0.
    A = jaxdia.DiaMatrix.from_scipy(sp.dia_array(np.array([[0.0, 1.0], [-1.0, 0.0]])))
    x, info = jaxdia.gmres(A, np.array([1.0, 0.0]), restart=1, maxiter=1000)
    assert not bool(info.converged) and int(info.iterations) <= 2
    np.testing.assert_array_equal(np.asarray(x), 0.0)
    # A singular matrix and a b outside its range: the least-squares part is found.
    n = 30
    dense = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n)).toarray()
    dense[:, -1] = 0.0  # the last column zero: singular, and e_n is not in the range
    S = sp.dia_array(dense)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(n)
    x, info = jaxdia.gmres(A, b, rtol=1e-10, maxiter=1000)
    assert not bool(info.converged) and np.all(np.isfinite(np.asarray(x)))
    # The true residual approaches its least-squares minimum, halving the gap each cycle,
    # until rounding stops it decreasing (about 50 cycles): then it stops, far before
    # maxiter's 1000 cycles of 20 steps.
    assert int(info.iterations) < 100 * 20
    np.testing.assert_allclose(float(info.residual_norm), true_residual(S, b, x), rtol=1e-8)
    # A zero matrix: no step is possible.
    Z = jaxdia.DiaMatrix(np.zeros((1, 5)), [0], (5, 5))
    x, info = jaxdia.gmres(Z, np.ones(5))
    assert not bool(info.converged) and int(info.iterations) == 0
    np.testing.assert_array_equal(np.asarray(x), 0.0)


def test_non_finite_entries_report_false():
    A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(10, 10))
    bad = jaxdia.DiaMatrix(A.data.at[1, 3].set(jnp.nan), A.offsets, A.shape)
    x, info = jaxdia.gmres(bad, np.ones(10), maxiter=5)
    assert not bool(info.converged)
    _, info = jaxdia.gmres(A, np.full(10, np.inf), maxiter=5)
    assert not bool(info.converged)


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_tiny_systems_and_restart_beyond_n(n):
    rng = np.random.default_rng(n)
    dense = rng.standard_normal((n, n)) + (4 + n) * np.eye(n)  # GMRES(1) converges
    S = sp.dia_array(dense)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rng.standard_normal(n)
    for restart in (1, n, 50):
        x, info = jaxdia.gmres(A, b, rtol=1e-12, restart=restart, maxiter=200)
        assert bool(info.converged), (n, restart)
        np.testing.assert_allclose(np.asarray(x), np.linalg.solve(dense, b), rtol=1e-9)
    # Asking for an exact zero residual: the breakdown gives no NaN, only a report.
    x, info = jaxdia.gmres(A, b, rtol=0.0, restart=50)
    assert np.all(np.isfinite(np.asarray(x)))
    np.testing.assert_allclose(np.asarray(x), np.linalg.solve(dense, b), rtol=1e-9)
    assert bool(info.converged) == (true_residual(S, b, x) == 0.0)


@pytest.mark.parametrize("side", ["right", "left"])
def test_left_and_right_preconditioning(side):
    nx = 16
    S = peclet(nx, 50.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(nx * nx)
    M = jaxdia.ilu0(A, (nx, nx))
    x, info = jaxdia.gmres(A, b, rtol=1e-9, M=M, side=side)
    assert bool(info.converged)
    assert true_residual(S, b, x) <= 1e-9 * np.linalg.norm(b)
    np.testing.assert_allclose(np.asarray(x), spla.spsolve(S.tocsc(), b), rtol=1e-6)


# -- the Arnoldi basis stays orthogonal -------------------------------------------------------


#: gmres's orthogonalizations: XLA's block Gram-Schmidt (GPUs, TPUs) and the BLAS host
#: call (CPU).
ORTHOGONALIZATIONS = {
    "xla": gmres_module._orthogonalize,
    "blas": gmres_module._orthogonalize_by_blas,
}


def arnoldi_basis(S, b, steps, one_pass=False, orthogonalization="xla"):
    """``steps`` Arnoldi steps on ``S`` from ``b`` with one of gmres's orthogonalizations
    (or XLA's first pass alone); returns the basis ``(steps + 1, n)`` and the steps whose
    first pass cancelled enough of the vector for the criterion to ask for a second."""
    orthogonalize = jax.jit(ORTHOGONALIZATIONS[orthogonalization])
    first_pass = jax.jit(gmres_module._gram_schmidt)
    rows = -(-(steps + 1) // gmres_module.BLOCK) * gmres_module.BLOCK
    V = jnp.zeros((rows, b.shape[0]), b.dtype).at[0].set(b / np.linalg.norm(b))
    second = []
    for j in range(steps):
        w = jnp.asarray(S @ np.asarray(V[j]), b.dtype)
        size = jnp.linalg.norm(w)
        single = first_pass(V, w, j)[0]
        second.append(bool(jnp.linalg.norm(single) < gmres_module.REORTHOGONALIZE * size))
        w = single if one_pass else orthogonalize(V, w, j, size)[0]
        V = V.at[j + 1].set(w / jnp.linalg.norm(w))
    return np.asarray(V[: steps + 1]), second


def loss_of_orthogonality(V) -> float:
    return float(np.linalg.norm(np.eye(V.shape[0]) - V.conj() @ V.T, 2))


@pytest.mark.parametrize("orthogonalization", sorted(ORTHOGONALIZATIONS))
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.complex128, np.complex64])
def test_one_pass_basis_stays_orthogonal_on_hard_peclet(dtype, orthogonalization):
    # Strong convection: a non-normal operator; every step's first pass leaves 40-55 % of
    # the vector (SciPy's criterion, 1 / sqrt(2), would run a second pass at each).
    nx, steps = 24, 30
    S = peclet(nx, 1e4)
    if np.dtype(dtype).kind == "c":
        S = sp.dia_array(S.astype(np.complex128) + 400j * sp.eye_array(nx * nx, k=1))
    b = jnp.asarray(rhs(nx * nx, complex_=np.dtype(dtype).kind == "c"), dtype)
    V, second = arnoldi_basis(S.astype(dtype), b, steps, orthogonalization=orthogonalization)
    assert not any(second)
    eps = np.finfo(dtype).eps
    assert loss_of_orthogonality(V) <= 10 * steps * eps, loss_of_orthogonality(V)


@pytest.mark.parametrize("orthogonalization", sorted(ORTHOGONALIZATIONS))
@pytest.mark.parametrize("dtype", [np.float64, np.complex128, np.float32])
def test_second_pass_keeps_nearly_dependent_krylov_vectors_orthogonal(dtype, orthogonalization):
    # A spectrum clustered at 1 (five eigenvalues apart): the Krylov vectors become
    # nearly dependent, each first pass cancels almost all of the vector, and one pass
    # alone (as modified Gram-Schmidt, SciPy's) loses orthogonality entirely.
    n, steps = 300, 12
    diagonal = np.r_[np.linspace(1.0, 1.001, n - 5), [2.0, 3.0, 4.0, 5.0, 6.0]]
    S = sp.dia_array(sp.diags_array(diagonal.astype(dtype)))
    b = jnp.asarray(rhs(n, complex_=np.dtype(dtype).kind == "c"), dtype)
    V, second = arnoldi_basis(S, b, steps, orthogonalization=orthogonalization)
    assert sum(second) >= steps // 2
    eps = np.finfo(dtype).eps
    assert loss_of_orthogonality(V) <= 10 * steps * eps, loss_of_orthogonality(V)
    single, _ = arnoldi_basis(S, b, steps, one_pass=True)
    assert loss_of_orthogonality(single) > 1e3 * 10 * steps * eps


@pytest.mark.parametrize(
    "dtype",
    [np.float64, *(pytest.param(d, marks=pytest.mark.full) for d in (np.float32, np.complex128))],
)
def test_reports_stay_honest_where_the_second_pass_is_skipped_or_run(dtype):
    # The hard Peclet case (one pass per step) and the clustered spectrum (two), to a
    # tolerance near the dtype's rounding: converged only on the true residual.
    complex_ = np.dtype(dtype).kind == "c"
    double = np.finfo(dtype).bits == 64
    # The reported residual is computed in the dtype: single precision's is a few eps off.
    rtol = 1e-11 if double else 1e-5
    nx = 16
    clustered = np.r_[np.linspace(1.0, 1.001, 251), [2.0, 3.0, 4.0, 5.0, 6.0]]
    for S, jacobi in ((peclet(nx, 1e4), True), (sp.dia_array(sp.diags_array(clustered)), False)):
        S = S.astype(dtype)
        A = jaxdia.DiaMatrix.from_scipy(S)
        b = rhs(S.shape[0], complex_=complex_).astype(dtype)
        M = jaxdia.jacobi(A) if jacobi else None
        x, info = jaxdia.gmres(A, b, rtol=rtol, M=M, maxiter=300)
        residual, limit = true_residual(S, b, x), rtol * np.linalg.norm(b)
        rounding = 0 if double else 10 * np.finfo(dtype).eps * np.linalg.norm(b)
        np.testing.assert_allclose(float(info.residual_norm), residual, atol=rounding, rtol=1e-6)
        if bool(info.converged):
            assert residual <= limit + rounding
        else:
            assert residual > limit - rounding
        assert bool(info.converged) or not double


# -- dtypes, batches, transformations --------------------------------------------------------


def test_complex_matches_scipy():
    nx = 10
    S = peclet(nx, 20.0).astype(np.complex128)
    S = sp.dia_array(S + 30j * sp.eye_array(nx * nx, k=nx) - 10j * sp.eye_array(nx * nx))
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(nx * nx, complex_=True)
    for M in (None, jaxdia.jacobi(A), jaxdia.ilu0(A, (nx, nx))):
        x, info = jaxdia.gmres(A, b, rtol=1e-10, M=M)
        assert x.dtype == np.complex128 and bool(info.converged)
        assert true_residual(S, b, x) <= 1e-10 * np.linalg.norm(b)
        expected, flag, iterations = scipy_gmres(S, b, M, rtol=1e-10, atol=0.0)
        assert flag == 0 and abs(int(info.iterations) - iterations) <= 0.05 * iterations + 2
        np.testing.assert_allclose(np.asarray(x), expected, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_single_precision_reports_honestly(dtype):
    nx = 12
    S = peclet(nx, 20.0).astype(dtype)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(nx * nx, complex_=np.dtype(dtype).kind == "c").astype(dtype)
    x, info = jaxdia.gmres(A, b, rtol=1e-4, M=jaxdia.ilu0(A, (nx, nx)))
    assert x.dtype == dtype and bool(info.converged)
    assert true_residual(S, b, x) <= 1.01e-4 * np.linalg.norm(b)
    # A tolerance below single precision's rounding cannot be met: reported, and it stops.
    x, info = jaxdia.gmres(A, b, rtol=1e-12, M=jaxdia.ilu0(A, (nx, nx)), maxiter=500)
    assert not bool(info.converged) and int(info.iterations) < 500 * 20
    assert np.all(np.isfinite(np.asarray(x)))


def test_batched_systems_stop_on_their_own():
    nx = 10
    S = peclet(nx, 30.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    scales = np.array([1.0, 3.0, 0.5])
    batch = jaxdia.DiaMatrix(A.data * scales[:, None, None], A.offsets, A.shape)
    b = np.stack([rhs(nx * nx, seed=s) for s in range(3)])
    b[1] = 0.0
    M = jaxdia.jacobi(batch)
    x, info = jaxdia.gmres(batch, b, rtol=1e-9, restart=7, M=M)
    assert info.iterations.shape == (3,) and int(info.iterations[1]) == 0
    assert bool(jnp.all(info.converged))
    for i in range(3):
        Ai = jaxdia.DiaMatrix(batch.data[i], A.offsets, A.shape)
        xi, info_i = jaxdia.gmres(Ai, b[i], rtol=1e-9, restart=7, M=jaxdia.jacobi(Ai))
        assert int(info_i.iterations) == int(info.iterations[i])
        np.testing.assert_allclose(np.asarray(x[i]), np.asarray(xi), rtol=1e-10, atol=1e-14)
    # One matrix, a batch of right-hand sides that need different iteration counts.
    B = np.stack([rhs(nx * nx, seed=5), S @ np.ones(nx * nx)])
    X, info = jaxdia.gmres(A, B, rtol=1e-9, restart=7)
    for i in range(2):
        xi, info_i = jaxdia.gmres(A, B[i], rtol=1e-9, restart=7)
        assert int(info_i.iterations) == int(info.iterations[i])
        np.testing.assert_allclose(np.asarray(X[i]), np.asarray(xi), rtol=1e-10, atol=1e-14)


def test_jit_vmap_and_traced_maxiter():
    nx = 8
    S = peclet(nx, 5.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    B = np.stack([rhs(nx * nx, seed=s) for s in range(2)])
    eager, info = jaxdia.gmres(A, B, rtol=1e-10, M=jaxdia.jacobi(A))

    @jax.jit
    def solve(A, b, maxiter):
        return jaxdia.gmres(A, b, rtol=1e-10, M=jaxdia.jacobi(A), maxiter=maxiter)

    mapped, mapped_info = jax.vmap(solve, in_axes=(None, 0, None))(A, B, 100)
    np.testing.assert_allclose(np.asarray(mapped), np.asarray(eager), rtol=1e-10, atol=1e-14)
    np.testing.assert_array_equal(np.asarray(mapped_info.iterations), info.iterations)
    _, short = solve(A, B[0], 1)
    assert int(short.iterations) == 20 and not bool(short.converged)


def test_functions_as_operators():
    nx = 8
    S = peclet(nx, 5.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = rhs(nx * nx)
    M = jaxdia.ilu0(A, (nx, nx))
    x, info = jaxdia.gmres(lambda v: A @ v, b, rtol=1e-10, M=lambda v: M(v))
    assert bool(info.converged)
    np.testing.assert_allclose(np.asarray(x), spla.spsolve(S.tocsc(), b), rtol=1e-8)


def test_gradients_by_implicit_differentiation():
    nx = 5
    S = peclet(nx, 10.0)
    A = jaxdia.DiaMatrix.from_scipy(S)
    b = jnp.asarray(rhs(nx * nx))
    weights = jnp.asarray(rhs(nx * nx, seed=3))

    def loss(data, b):
        A_ = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        x, _ = jaxdia.gmres(A_, b, rtol=1e-13, M=jaxdia.jacobi(A_))
        return jnp.sum(weights * jnp.sin(x))

    def dense_loss(data, b):
        dense = jaxdia.DiaMatrix(data, A.offsets, A.shape).todense()
        return jnp.sum(weights * jnp.sin(jnp.linalg.solve(dense, b)))

    got = jax.jit(jax.grad(loss, argnums=(0, 1)))(A.data, b)
    want = jax.grad(dense_loss, argnums=(0, 1))(A.data, b)
    inside = in_bounds_mask(A)
    np.testing.assert_allclose(
        np.asarray(got[0])[inside], np.asarray(want[0])[inside], rtol=1e-7, atol=1e-10
    )
    np.testing.assert_allclose(np.asarray(got[1]), np.asarray(want[1]), rtol=1e-7, atol=1e-10)


def test_errors_name_the_argument():
    A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(6, 6))
    b = np.ones(6)
    with pytest.raises(ValueError, match="gmres: side"):
        jaxdia.gmres(A, b, side="middle")
    with pytest.raises(ValueError, match="gmres: restart must be >= 1"):
        jaxdia.gmres(A, b, restart=0)
    with pytest.raises(TypeError, match="gmres: restart"):
        jaxdia.gmres(A, b, restart=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="gmres: b must have shape"):
        jaxdia.gmres(A, np.ones(5))
    with pytest.raises(ValueError, match="gmres: maxiter"):
        jaxdia.gmres(A, b, maxiter=-1)
    with pytest.raises(ValueError, match="gmres: rtol"):
        jaxdia.gmres(A, b, rtol=-1.0)
    with pytest.raises(TypeError, match="gmres: M must be"):
        jaxdia.gmres(A, b, M="jacobi")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="gmres: A must be"):
        jaxdia.gmres(object(), b)  # type: ignore[arg-type]
    sharded = jaxdia.shard(A, jax.make_mesh((1,), ("rows",)), "rows")
    with pytest.raises(TypeError, match="ShardedDiaMatrix is not supported"):
        jaxdia.gmres(sharded, sharded.shard_vector(b))
