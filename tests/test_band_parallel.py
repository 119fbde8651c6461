"""Banded solves by block cyclic reduction: no loop over the rows on GPU/TPU.

Structure (no accelerator needed): programs lowered for ``cuda`` and ``tpu`` (with the
platform a factorization is traced for set to theirs, as on such a machine) hold no
``while`` loop whose trip count grows with ``n``. The rule: lowered at ``n`` and ``4 n``,
the program's loops are the same, each with the same integer constants in its condition
(a loop over the rows compares its counter with ``n``); loops bounded by a static count
(the refinement's ``STEPS``, Krylov and Lanczos ``maxiter``) are allowed, and no LAPACK
host call appears.

Correctness, on CPU with cyclic reduction forced (``method="parallel"``), against SciPy:
LU and Cholesky, real and complex, transposed, batched, ``vmap``, ``jit``, gradients;
what the documented stability behaviour says: exact for diagonally dominant and
positive definite matrices, refined for others, LAPACK on CPU and NaN elsewhere for a
system refinement cannot rescue, LAPACK's ``info`` on CPU for a failed factorization.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp

import jaxdia
from jaxdia._geometry import in_bounds
from jaxdia._kernels import band_layouts, band_parallel, band_primitives, band_refine
from jaxdia._linalg.eigsh import DENSE_UP_TO

from .helpers import Forced, dense_f64
from .test_factor import _dense_solve, _zero_padding, hermitian_band, random_band, rhs, scipy_solve
from .test_lowering import lowered_text, while_loops

PLATFORMS = ["cuda", "tpu"]


#: jaxdia's banded functions with cyclic reduction forced (on CPU).
PARALLEL = Forced("parallel")
FULL = pytest.mark.full


# -- structure: no loop over the rows -------------------------------------------------------


def assert_no_loop_grows(make, platform, n=64):
    """``make(n)`` gives ``(fn, args)``: its program for ``platform`` at ``n`` and ``4 n``
    has the same loops (see the module docstring) and no LAPACK call."""
    loops = []
    for size in (n, 4 * n):
        fn, args = make(size)
        text = lowered_text(fn, *args, platform=platform)
        assert "jaxdia_lapack" not in text
        loops.append(while_loops(fn, *args, platform=platform))
    assert loops[0] == loops[1], loops
    for constants in loops[0]:
        assert max(constants, default=0) < n, constants
    return loops[0]


def poisson(side, dtype=np.float32):
    """The 5-point Laplacian on a ``side x side`` grid."""
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    identity = sp.eye_array(side)
    return jaxdia.DiaMatrix.from_scipy(
        (sp.kron(T, identity) + sp.kron(identity, T)).todia()
    ).astype(dtype)


def _band(n, offsets, dtype=np.float32):
    rng = np.random.default_rng(n)
    data = rng.standard_normal((len(offsets), n)).astype(dtype)
    data[offsets.index(0)] += 2 * len(offsets)
    return jaxdia.DiaMatrix(data, offsets, (n, n))


BANDS = {
    "tridiagonal": (-1, 0, 1),
    "pentadiagonal": (-2, -1, 0, 1, 2),
    "7-diagonal": (-3, -2, -1, 0, 1, 2, 3),
    "band of 50": (-50, -1, 0, 1, 50),
}


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("band", BANDS)
def test_solve_banded_has_no_loop_over_the_rows(traced_as, platform, band):
    traced_as(platform)

    def make(n):
        return jaxdia.solve_banded, (_band(n, BANDS[band]), jnp.ones(n, jnp.float32))

    loops = assert_no_loop_grows(make, platform, n=256 if band == "band of 50" else 64)
    # The refinement's loop only; a tridiagonal solve on GPU is cuSPARSE's gtsv2.
    library = platform == "cuda" and band == "tridiagonal"
    assert loops == ([] if library else [(0, band_refine.STEPS)])


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("band", ["pentadiagonal", "band of 50"])
def test_lu_factor_and_solves_have_no_loop_over_the_rows(traced_as, platform, band):
    traced_as(platform)

    def factor_and_solve(A, b):
        lu = jaxdia.lu_factor(A)
        assert lu.kind == "parallel"
        return lu.solve(b), lu.solve(b, trans=2), jax.vmap(lu.solve)(jnp.stack([b, b]))

    def make(n):
        return factor_and_solve, (_band(n, BANDS[band]), jnp.ones(n, jnp.float32))

    assert_no_loop_grows(make, platform, n=256 if band == "band of 50" else 64)


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("kd", [1, 3])
def test_cho_factor_and_solve_have_no_loop(traced_as, platform, kd):
    traced_as(platform)

    def factor_and_solve(A, b):
        c = jaxdia.cho_factor(A)
        assert c.kind == "parallel"
        return c.solve(b)

    def make(n):
        return factor_and_solve, (hermitian_band(n, kd, np.float32), jnp.ones(n, jnp.float32))

    assert assert_no_loop_grows(make, platform) == []


@pytest.mark.parametrize("platform", PLATFORMS)
def test_multigrid_cg_has_no_loop_over_the_rows(traced_as, platform):
    """The multigrid-CG program's only loop is CG's (``maxiter``); its coarsest level is
    a dense inverse applied as one product. Both sizes coarsen to the same 15 x 15 grid
    (``max_coarse``), so the dense inverse's setup (on TPU a loop over its columns) is
    the same program."""
    traced_as(platform)

    def make(n):
        side = round(np.sqrt(n))

        def solve(A, b):
            return jaxdia.cg(A, b, M=jaxdia.multigrid(A, (side, side)), maxiter=25)[0]

        return solve, (poisson(side), jnp.ones(side * side, jnp.float32))

    assert assert_no_loop_grows(make, platform, n=31 * 31)  # CG's loop


@pytest.mark.parametrize("platform", PLATFORMS)
@pytest.mark.parametrize("band", ["pentadiagonal"])
def test_shift_invert_eigsh_has_no_loop_over_the_rows(traced_as, platform, band):
    traced_as(platform)

    def eigenvalues(A):
        return jaxdia.eigsh(A, k=2, sigma=0.5, ncv=8, maxiter=30)[0]

    def make(n):
        return eigenvalues, (_band(n, BANDS[band]),)

    # Above DENSE_UP_TO rows at both sizes: the Lanczos iteration, not dense eigh.
    assert_no_loop_grows(make, platform, n=DENSE_UP_TO + 1)


def test_the_rule_catches_a_scan(monkeypatch):
    """LAPACK's kinds lower to a scan on accelerators: the helper sees its loops grow."""
    scan = Forced("scan")

    def make(n):
        A, b = _band(n, BANDS["pentadiagonal"]), jnp.ones(n, jnp.float32)
        return (lambda A, b: scan.lu_factor(A).solve(b)), (A, b)

    with pytest.raises(AssertionError):
        assert_no_loop_grows(make, "cuda")


# -- correctness against SciPy --------------------------------------------------------------


@pytest.mark.parametrize(
    "lower, upper, dtype, columns",
    [
        (1, 1, np.complex128, 2),
        (3, 1, np.float32, 2),
    ],
)
def test_parallel_lu_matches_scipy(lower, upper, dtype, columns):
    n = 37
    A = random_band(n, lower, upper, dtype, seed=lower + 5 * upper)
    lu = jax.jit(PARALLEL.lu_factor)(A)
    assert lu.kind == "parallel" and bool(lu.ok)
    b = rhs((n,) if columns is None else (n, columns), dtype)
    scale = 100 if np.dtype(dtype).itemsize <= 8 and np.dtype(dtype).kind != "c" else 10
    tolerance = scale * np.finfo(dtype).eps
    for trans in (0, 1, 2) if np.dtype(dtype).kind == "c" else (0, 1):
        got = jax.jit(jaxdia.lu_solve, static_argnums=2)(lu, b, trans)
        np.testing.assert_allclose(got, scipy_solve(A, b, trans), rtol=tolerance, atol=tolerance)
    np.testing.assert_allclose(
        PARALLEL.solve_banded(A, b), scipy_solve(A, b), rtol=tolerance, atol=tolerance
    )


@pytest.mark.parametrize(
    "kd, dtype, lower",
    [(1, np.float64, False), (1, np.complex128, True), (3, np.complex128, False)],
)
def test_parallel_cholesky_matches_scipy(kd, dtype, lower):
    n = 29
    H = hermitian_band(n, kd, dtype, seed=kd)
    c = PARALLEL.cho_factor(H, lower=lower)
    assert c.kind == "parallel" and bool(c.ok)
    b = rhs((n, 2), dtype)
    np.testing.assert_allclose(c.solve(b), np.linalg.solve(dense_f64(H), b), rtol=1e-12)
    np.testing.assert_allclose(
        PARALLEL.solveh_banded(H, b, lower=lower), np.linalg.solve(dense_f64(H), b), rtol=1e-12
    )


def test_parallel_batches_vmap_and_gradients():
    n, offsets = 21, (-2, -1, 0, 1)
    A = random_band(n, 2, 1, batch=(3,), seed=3)
    b = rhs((3, n, 2), seed=4)
    lu = PARALLEL.lu_factor(A)
    np.testing.assert_allclose(lu.solve(b), scipy_solve(A, b), rtol=1e-12)
    single = PARALLEL.lu_factor(random_band(n, 2, 1, seed=5))
    np.testing.assert_allclose(
        jax.vmap(single.solve)(jnp.asarray(b[..., 0])),
        scipy_solve(single.matrix, b[..., 0].T).T,  # one factor, a batch of vectors
        rtol=1e-12,
    )

    def solve(d, b):
        return PARALLEL.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b)

    data = _zero_padding(A)
    np.testing.assert_allclose(jax.vmap(solve)(data, b), scipy_solve(A, b), rtol=1e-12)
    weights = jnp.asarray(rhs((n, 2), seed=6))
    for trans in (1,):  # its gradient solves with the transpose: both directions

        def loss(d, b, trans=trans):
            lu = PARALLEL.lu_factor(jaxdia.DiaMatrix(d, offsets, (n, n)))
            return jnp.sum(weights * lu.solve(b, trans) ** 2)

        def dense_loss(d, b, trans=trans):
            return jnp.sum(weights * _dense_solve(d, offsets, (n, n), b, trans) ** 2)

        got = jax.jit(jax.grad(loss, (0, 1)))(data[0], jnp.asarray(b[0]))
        expected = jax.grad(dense_loss, (0, 1))(data[0], jnp.asarray(b[0]))
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


def test_parallel_factor_pytree():
    lu = PARALLEL.lu_factor(random_band(11, 1, 2, seed=7))
    names = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(lu)[0]]
    assert names[0] == ".data" and names[-2:] == [".inverse", ".info"]
    assert names[1:4] == [".inverses_0", ".couplings_0", ".kept_0"]
    assert len(lu.factors) == len(names) - 2
    assert repr(lu) == "BandedLU(shape=(11, 11), dtype=float64, kind='parallel', lower=1, upper=2)"
    with pytest.raises(AttributeError, match="no LAPACK layout"):
        _ = lu.pivots
    carried = jax.lax.scan(lambda u, _: (lu.solve(u), None), jnp.ones(11), length=3)[0]
    expected = np.ones(11)
    for _ in range(3):
        expected = scipy_solve(lu.matrix, expected)
    np.testing.assert_allclose(carried, expected, rtol=1e-12)


# -- stability: what the documentation says -------------------------------------------------


def _unrefined(A, b):
    """Cyclic reduction's solve without refinement, and its backward error."""
    m = band_parallel.block_size(*(max(0, -A.offsets[0]), max(0, A.offsets[-1])))

    @jax.jit  # one program: eagerly, every operation of the unrolled levels compiles alone
    def solve(data, b):
        arrays, _ = band_parallel.factor_systems(data[None], A.offsets, m)
        return band_parallel.solve_systems(arrays, b[None, None])[0, 0]

    x = solve(jnp.asarray(_zero_padding(A)), jnp.asarray(b))
    return x, _backward_error(A, x, b)


def _backward_error(A, x, b):
    dense = dense_f64(A)
    residual = np.abs(b - dense @ np.asarray(x)).max()
    return residual / (np.abs(dense).sum(1).max() * np.abs(x).max() + np.abs(b).max())


def _dominant_by_columns(n, seed):
    rng = np.random.default_rng(seed)
    dense = np.diag(rng.standard_normal(n - 2), -2) + np.diag(rng.standard_normal(n - 1), 1)
    dense += np.diag(rng.standard_normal(n - 1), -1) * 5
    dense += np.diag(np.abs(dense).sum(0) * (1 + rng.random(n)) * np.sign(rng.standard_normal(n)))
    return jaxdia.DiaMatrix.from_scipy(sp.dia_array(dense))


@pytest.mark.parametrize(
    "matrix",
    ["dominant by columns", "positive definite, ill-conditioned"],
)
def test_exact_without_refinement(matrix):
    """Backward stable for the classes the docs name: the first solve already meets the
    refinement's target, for a matrix dominant by columns but not by rows and a
    symmetric positive definite one of condition ~3e6 (not dominant)."""
    n = 64
    if matrix == "dominant by rows":
        A = random_band(n, 2, 3, seed=10)
    elif matrix == "dominant by columns":
        A = _dominant_by_columns(n, seed=11)
        dense = dense_f64(A)
        assert (np.abs(np.diag(dense)) * 2 <= np.abs(dense).sum(1)).any()  # not by rows
    else:
        T = jaxdia.diags([-1.0, 2.0 + 1e-9, -1.0], offsets=[-1, 0, 1], shape=(n, n))
        A = T @ T  # pentadiagonal, positive definite, condition ~ 3e6
        assert np.linalg.cond(dense_f64(A)) > 1e6
    b = rhs(n, seed=12)
    x, error = _unrefined(A, b)
    assert error <= band_refine.target(np.float64)
    expected = np.linalg.solve(dense_f64(A), b)
    condition = np.linalg.cond(dense_f64(A))
    np.testing.assert_allclose(
        x, expected, rtol=0, atol=100 * condition * 1e-16 * abs(expected).max()
    )


def _needs_pivoting(n, seed, small=1e-3):
    """Tridiagonal, far from dominant: tiny diagonal, unit off-diagonals (growth in the
    reduction without pivoting, though the matrix is well conditioned)."""
    rng = np.random.default_rng(seed)
    d = small * rng.standard_normal(n)
    return jaxdia.diags([rng.uniform(1, 2, n - 1), d, rng.uniform(1, 2, n - 1)], [-1, 0, 1])


def test_refinement_rescues_growth():
    """Far from dominant: the unrefined solve misses the target, the refined one (the
    solve's default) meets it and matches SciPy."""
    n = 63
    A = _needs_pivoting(n, seed=13)
    b = rhs(n, seed=14)
    _, error = _unrefined(A, b)
    assert error > band_refine.target(np.float64)
    x = jax.jit(lambda A, b: PARALLEL.lu_factor(A).solve(b))(A, b)
    assert _backward_error(A, x, b) <= band_refine.target(np.float64)
    np.testing.assert_allclose(x, scipy_solve(A, b), rtol=1e-10)


def _swap_pairs(n):
    """The permutation swapping rows 2i and 2i + 1 (as a tridiagonal matrix), plus a small
    coupling: nonsingular, but every 1 x 1 diagonal block is zero."""
    d = np.zeros(n)
    up = np.where(np.arange(n - 1) % 2 == 0, 1.0, 0.1)
    return jaxdia.diags([up, d, up], [-1, 0, 1])


def test_singular_blocks_fall_back_to_lapack_on_cpu():
    """A nonsingular matrix whose diagonal blocks are singular: on CPU the factor reports
    LAPACK's ``info`` (0) and the solve is LAPACK's; under ``jit`` too."""
    n = 16
    A, b = _swap_pairs(n), rhs(n, seed=15)
    lu = PARALLEL.lu_factor(A)  # no LinAlgError: LAPACK's info is 0
    assert int(lu.info) == 0
    np.testing.assert_allclose(lu.solve(b), scipy_solve(A, b), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(PARALLEL.solve_banded)(A, b), scipy_solve(A, b), rtol=1e-12)


@pytest.mark.parametrize("platform", ["tpu"])
def test_unsolvable_systems_are_nan_on_accelerators(platform):
    """The accelerators' solve (run here on CPU): a system refinement cannot solve to
    ``limit`` is NaN, the others of the batch are solved."""
    n = 16
    good, bad = random_band(n, 1, 1, seed=16), _swap_pairs(n)
    data = jnp.stack([_zero_padding(good), _zero_padding(bad)])
    b = jnp.asarray(rhs((2, 1, n), seed=17))
    solve = jax.jit(
        functools.partial(
            band_primitives._solve_parallel,
            layout=band_layouts.ONESHOT,
            widths=(1, 1),
            trans=0,
            offsets=good.offsets,
            platform=platform,
        )
    )
    x = solve(data, b)
    np.testing.assert_allclose(x[0, 0], scipy_solve(good, b[0, 0]), rtol=1e-12)
    assert np.isnan(x[1]).all()


def test_singular_and_indefinite():
    """Exactly singular: LAPACK's ``info`` and LinAlgError outside jit, NaN under it; not
    positive definite: cyclic reduction's ``info`` (a row of the failing block)."""
    singular = jaxdia.diags([[1.0, 2.0, 0.0, 3.0, 1.0]], offsets=[0])
    with pytest.raises(np.linalg.LinAlgError, match=r"info = 3"):
        PARALLEL.lu_factor(singular)
    assert np.isnan(jax.jit(PARALLEL.solve_banded)(singular, jnp.ones(5))).all()
    indefinite = jaxdia.diags([[1.0, 2.0, 2.0, -3.0, 1.0]], offsets=[0])
    with pytest.raises(np.linalg.LinAlgError, match="not Hermitian positive definite"):
        PARALLEL.cho_factor(indefinite)
    assert np.isnan(
        jax.jit(lambda A, b: PARALLEL.cho_factor(A).solve(b))(indefinite, jnp.ones(5))
    ).all()


# -- multigrid's coarsest level and eigsh on accelerators, run on CPU -------------------------


def test_multigrid_dense_coarse_level_matches_the_banded_one(traced_as):
    grid = (15, 15)
    A = poisson(15, np.float64)
    b = jnp.asarray(rhs(A.shape[0], seed=18))
    x_cpu, info_cpu = jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid, max_coarse=60), rtol=1e-10)
    traced_as("gpu", runs=True)
    M = jaxdia.multigrid(A, grid, max_coarse=60)
    x_gpu, info_gpu = jaxdia.cg(A, b, M=M, rtol=1e-10)
    assert int(info_gpu.iterations) == int(info_cpu.iterations)
    np.testing.assert_allclose(x_gpu, x_cpu, rtol=1e-9)


def test_shift_invert_eigsh_with_parallel_factor(traced_as):
    """A - sigma I indefinite (sigma inside the spectrum): the parallel factor's refined
    solves give SciPy's eigenvalues nearest sigma."""
    traced_as("tpu", runs=True)
    S = hermitian_band(40, 2, seed=19)
    dense = dense_f64(S)
    eigenvalues = np.linalg.eigvalsh(dense)
    sigma = float(np.median(eigenvalues)) + 0.01
    got = np.sort(np.asarray(jaxdia.eigsh(S, k=3, sigma=sigma)[0]))
    expected = np.sort(eigenvalues[np.argsort(np.abs(eigenvalues - sigma))[:3]])
    np.testing.assert_allclose(got, expected, rtol=1e-9)


# -- the forms of the block operations: TPU's lanes and the dot form, run on CPU -------------


def _systems(kl, ku, n, dtype, seed, systems=2, zero_diagonal=False):
    """DIA data ``(systems, nd, n)`` (padding slots zero), its dense matrices and offsets."""
    rng = np.random.default_rng(seed)
    offsets = tuple(range(-kl, ku + 1))
    data = rng.standard_normal((systems, len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data.shape)
    if not zero_diagonal:
        data[:, offsets.index(0)] += 3 * len(offsets)
    else:
        data[:, offsets.index(0)] = 0
    data = np.where(in_bounds(offsets, (n, n)), data, 0).astype(dtype)
    dense = np.stack([dense_f64(jaxdia.DiaMatrix(d, offsets, (n, n))) for d in data])
    return data, dense, offsets


#: The fast tier runs the lanes form (TPU's, which nothing else runs on CPU) on blocks that
#: need Gauss-Jordan's pivoting; the rest in the full tier.
FAST_FORMS = {(3, 2, "lanes"), (1, 1, "lanes")}


def _form_cases():
    cases = [
        (1, 1, 37, np.complex128, False),  # 1 x 1 blocks
        (2, 1, 21, np.float64, False),  # 2 x 2
        (3, 3, 50, np.complex128, False),  # Gauss-Jordan in the lanes
        (3, 2, 30, np.float64, True),  # a zero diagonal: pivoting inside the blocks
        (10, 10, 64, np.float32, False),
        (5, 2, 4, np.float64, False),  # blocks wider than n: one block
        (1, 2, 1, np.float64, False),  # n = 1
    ]
    return [
        pytest.param(*case, form, marks=() if (*case[:2], form) in FAST_FORMS else FULL)
        for case in cases
        for form in band_parallel.FORMS
    ]


@pytest.mark.parametrize("kl, ku, n, dtype, zero_diagonal, form", _form_cases())
def test_forms_match_numpy(form, kl, ku, n, dtype, zero_diagonal):
    """Both forms (:data:`band_parallel.FORMS`) factor, solve (``A``, ``A^T``, ``A^H``),
    give ``log |det|`` and the selected inverse as NumPy does, for a batch of two."""
    data, dense, offsets = _systems(kl, ku, n, dtype, seed=kl + 7 * ku, zero_diagonal=zero_diagonal)
    m = band_parallel.block_size(kl, ku)
    tolerance = 2e-4 if dtype == np.float32 else 1e-9
    b = np.random.default_rng(n).standard_normal((2, 3, n)).astype(dtype)

    @jax.jit  # one program: eagerly, every operation of the unrolled levels compiles alone
    def run(data, b):
        arrays, failed = band_parallel.factor_systems(data, offsets, m, form=form)
        xs = [band_parallel.solve_systems(arrays, b, trans=t, form=form) for t in (0, 1, 2)]
        inverses = [a for a in (*arrays[:-1:3], arrays[-1]) if a.shape[-1]]
        joined = jnp.concatenate(inverses, axis=-1)
        logabs = -jnp.sum(band_parallel.slogdet_blocks(joined, form=form)[1], axis=-1)
        blocks = band_parallel.dia_blocks(data, offsets, m)
        factors, _ = band_parallel.factor(*blocks, hermitian=False, form=form)
        inverse = band_parallel.inverse_blocks(factors, form=form)
        residual = band_parallel.inverse_residual(blocks, inverse, form=form)
        return failed, xs, logabs, residual, inverse[1]

    failed, xs, logabs, residual, diagonal_blocks = run(jnp.asarray(data), jnp.asarray(b))
    assert (np.asarray(failed) == -1).all()
    for trans, x in enumerate(xs):
        ops = [d if trans == 0 else (d.T if trans == 1 else d.conj().T) for d in dense]
        expected = np.stack([np.linalg.solve(o, r.T).T for o, r in zip(ops, b)])
        scale = tolerance * abs(expected).max()
        np.testing.assert_allclose(x, expected, rtol=tolerance, atol=scale)
    np.testing.assert_allclose(logabs, np.linalg.slogdet(dense)[1], rtol=tolerance, atol=tolerance)
    # A zero diagonal needs interchanges across blocks too: the residual (both sides) may
    # grow there (a few hundred eps), and a selected inverse above 32 eps is refused.
    if not zero_diagonal:
        assert (np.asarray(residual) < 100 * np.finfo(dtype).eps).all(), residual
    diagonal = np.stack([np.diag(np.linalg.inv(d)) for d in dense])
    got = np.diagonal(diagonal_blocks, axis1=-3, axis2=-2).reshape(2, -1)[:, :n]  # (S, N, m)
    np.testing.assert_allclose(got, diagonal, rtol=tolerance, atol=tolerance * abs(diagonal).max())


@pytest.mark.parametrize(
    "kd, dtype, form",
    [
        (3, np.complex128, "lanes"),
        pytest.param(1, np.float64, "lanes", marks=FULL),
        pytest.param(10, np.float32, "lanes", marks=FULL),
        pytest.param(3, np.complex128, "dot", marks=FULL),
    ],
)
def test_forms_cholesky_and_its_failures(form, kd, dtype):
    """The Hermitian factor in both forms: solves as NumPy; a block that is not positive
    definite reports the first row of its block (the lanes' Gauss-Jordan checks its
    pivots as Cholesky does)."""
    n = 40
    H = hermitian_band(n, kd, dtype, seed=kd)
    # Indefinite: the diagonal entry of row kd (block 1's first) made negative. Block 1
    # fails at the first level; block 0's later Schur complement may fail too (row 0).
    indefinite = np.array(_zero_padding(H))
    indefinite[H.offsets.index(0), kd] = -abs(indefinite[H.offsets.index(0), kd])
    assert np.linalg.eigvalsh(dense_f64(jaxdia.DiaMatrix(indefinite, H.offsets, (n, n))))[0] < 0
    data = jnp.stack([jnp.asarray(_zero_padding(H)), jnp.asarray(indefinite)])
    b = np.random.default_rng(kd).standard_normal((2, 2, n)).astype(dtype)

    @jax.jit
    def run(data, b):
        arrays, failed = band_parallel.factor_systems(data, H.offsets, kd, "upper", form=form)
        return failed, band_parallel.solve_systems(arrays, b, form=form)

    failed, x = run(data, jnp.asarray(b))
    assert int(failed[0]) == -1 and int(failed[1]) in (0, kd)
    expected = np.linalg.solve(dense_f64(H), b[0].T).T
    tolerance = 2e-4 if dtype == np.float32 else 1e-9
    np.testing.assert_allclose(x[0], expected, rtol=tolerance, atol=tolerance * abs(expected).max())


@pytest.mark.parametrize(
    "m, dtype", [(5, np.float64), (7, np.complex128), pytest.param(16, np.float32, marks=FULL)]
)
@pytest.mark.parametrize("hermitian", [False, True])
def test_rolled_pivot_steps_match_unrolled_and_numpy(m, dtype, hermitian, monkeypatch):
    """Past ``UNROLLED_PIVOTS`` rows Gauss-Jordan's steps are one ``fori_loop``: the same
    inverses, pivots and interchanges as the unrolled steps, NumPy's inverses and
    determinants; zero diagonals make it pivot (none for ``hermitian``, positive definite)."""
    assert m > band_parallel.UNROLLED_PIVOTS
    rng = np.random.default_rng(m)
    blocks = rng.standard_normal((2, 6, m, m)) + (
        1j * rng.standard_normal((2, 6, m, m)) if dtype == np.complex128 else 0
    )
    if hermitian:
        blocks = blocks @ np.conj(np.swapaxes(blocks, -1, -2)) + m * np.eye(m)
    else:
        blocks[..., np.arange(m), np.arange(m)] = 0  # every step needs an interchange
    blocks = blocks.astype(dtype)
    lanes = jnp.asarray(np.moveaxis(blocks, 1, -1))  # (S, m, m, N)

    def eliminate(x):
        work, pivots, swaps = band_parallel._eliminate(x, hermitian=hermitian, invert=True)
        return work[..., m:, :], pivots, swaps

    rolled_text = jax.jit(eliminate).lower(lanes).as_text()
    rolled = jax.jit(eliminate)(lanes)
    monkeypatch.setattr(band_parallel, "UNROLLED_PIVOTS", m)
    # Another function: JAX would reuse the trace of eliminate made before the patch.
    unrolled_fn = jax.jit(lambda x: eliminate(x))
    assert unrolled_fn.lower(lanes).as_text().count("stablehlo.while") < rolled_text.count(
        "stablehlo.while"
    )
    unrolled = unrolled_fn(lanes)
    # The same steps, fused differently: equal to rounding; the same interchanges.
    rounding = 10 * m * np.finfo(dtype).eps
    for got, want in zip(rolled[:2], unrolled[:2]):
        np.testing.assert_allclose(got, want, rtol=rounding, atol=rounding * abs(want).max())
    np.testing.assert_array_equal(rolled[2], unrolled[2])
    tolerance = 1e-3 if dtype == np.float32 else 1e-9
    inverse, pivots, swaps = rolled
    expected = np.linalg.inv(blocks.astype(np.complex128))
    np.testing.assert_allclose(
        np.moveaxis(np.asarray(inverse), -1, 1),
        expected,
        rtol=tolerance,
        atol=tolerance * abs(expected).max(),
    )
    determinant = np.prod(np.asarray(pivots), axis=-2) * np.where(np.asarray(swaps) % 2, -1, 1)
    np.testing.assert_allclose(
        determinant, np.linalg.det(blocks.astype(np.complex128)), rtol=tolerance
    )
    if hermitian:
        assert (np.asarray(swaps) == 0).all()


def test_pivot_steps_roll_past_a_few_rows():
    """The lowered lanes factor: a loop per level for 21 diagonals (``m = 10``), none for 7
    (``m = 3``)."""
    for count, looped in [(7, False), (21, True)]:
        kl = count // 2
        data = jax.ShapeDtypeStruct((1, count, 1 << 10), np.float32)
        offsets = tuple(range(-kl, kl + 1))
        factor = functools.partial(
            band_parallel.factor_systems, offsets=offsets, m=kl, form="lanes"
        )
        loops = while_loops(factor, data, platform="tpu")
        assert bool(loops) == looped, (count, loops)
