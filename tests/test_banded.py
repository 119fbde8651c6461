"""Banded direct solves (jaxdia/_linalg/banded.py and the public functions of factor.py):
``solve_banded`` against SciPy in each implementation of the LU, one-shot solves' dispatch,
edge cases, errors, memory mappings and exit with a stored factor. Stored factors' own
tests: tests/test_factor.py."""

import re
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg as sla
from hypothesis import given, settings, strategies as st
from jax.test_util import check_grads

import jaxdia
from jaxdia._kernels import band_refine
from jaxdia.testing import offsets as offset_strategy

from .helpers import Forced, assert_close, dense_f64, dense_solution, examples, rhs
from .test_lowering import lowered_text, while_loops

# -- solve_banded ----------------------------------------------------------------------------


@pytest.fixture(params=["auto", "scan", "lapack"], scope="module")
def banded_path(request):
    """Runs a test with each implementation of solve_banded's LU, whatever the size
    (``banded_path.solve_banded``: ``method=`` forced, see ``tests.helpers.Forced``): the
    default one-shot solve (on CPU JAX's ``?gtsv`` or jaxdia's ``?gbtrf`` + ``?gbtrs`` in
    one call, see ``_dispatch.oneshot_implementation``), and a stored factor's: the
    ``lax.scan`` LU (GPU, TPU, small systems and batches of them) or LAPACK's
    ``?gbtrf``/``?gttrf`` (CPU)."""
    return Forced(request.param)


def banded(n, offsets, dtype=np.float64, seed=0, dominant=True):
    """A random DiaMatrix with NaN padding; diagonally dominant unless told otherwise."""
    rng = np.random.default_rng(seed)
    data = rng.standard_normal((len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal((len(offsets), n))
    if dominant and 0 in offsets:
        data[list(offsets).index(0)] += 2.0 * len(offsets) * np.sign(data[offsets.index(0)])
    cols = np.arange(n)
    for k, offset in enumerate(offsets):
        data[k, (cols - offset < 0) | (cols - offset >= n)] = np.nan
    return jaxdia.DiaMatrix(data.astype(dtype), offsets, (n, n))


def scipy_banded(A):
    """``scipy.linalg.solve_banded``'s ``(l, u), ab`` for a DiaMatrix."""
    lower, upper = max(0, -A.offsets[0]), max(0, A.offsets[-1])
    dense = dense_f64(A)
    n = A.shape[0]
    ab = np.zeros((lower + upper + 1, n), dense.dtype)
    for i in range(n):
        for j in range(max(0, i - lower), min(n, i + upper + 1)):
            ab[upper + i - j, j] = dense[i, j]
    return (lower, upper), ab


@pytest.mark.parametrize(
    "offsets, dtype, columns",
    [
        ((0,), np.float64, None),
        ((-1, 0, 1), np.float64, None),
        ((-1, 0, 1), np.complex128, 3),
        ((-1, 0, 1), np.float32, None),
        ((0, 1), np.float64, 3),
        ((-1, 0), np.float64, None),
        ((-2, 0, 1, 3), np.float64, 3),
        ((-2, 0, 1, 3), np.complex128, None),
        ((-2, 0, 1, 3), np.float32, 3),
        ((-3, -1, 0, 2), np.float64, None),
        ((-2, -1, 0), np.float64, 3),
        ((0, 2, 4), np.complex64, None),
    ],
)
def test_solve_banded_matches_scipy(banded_path, offsets, dtype, columns):
    n = 23
    A = banded(n, offsets, dtype)
    shape = (n,) if columns is None else (n, columns)
    b = rhs(int(np.prod(shape)), dtype, seed=3).reshape(shape)
    x = jax.jit(banded_path.solve_banded)(A, b)
    assert x.shape == shape and x.dtype == dtype
    expected = sla.solve_banded(*scipy_banded(A), b.astype(np.complex128))
    assert_close(x, expected, dtype, scale=100)


@settings(max_examples=examples(8))
@given(st.integers(1, 14).flatmap(lambda n: st.tuples(st.just(n), offset_strategy((n, n)))))
def test_solve_banded_property(banded_path, case):
    n, offsets = case
    offsets = tuple(sorted(set(offsets) | {0}))
    A = banded(n, offsets, seed=n)
    b = rhs(n, seed=n + 1)
    expected = sla.solve_banded(*scipy_banded(A), b)
    assert_close(banded_path.solve_banded(A, b), expected, np.float64, scale=1e3)


def test_solve_banded_pivots(banded_path):
    """A zero diagonal defeats LU without pivoting; row swaps within the band solve it."""
    for offsets in [(-1, 1), (-3, 1), (-1, 2, 3)]:
        A = banded(8, offsets, dominant=False)
        b = rhs(8)
        np.testing.assert_allclose(
            banded_path.solve_banded(A, b), np.linalg.solve(dense_f64(A), b), rtol=1e-10
        )


def test_solve_banded_singular_gives_nan(banded_path):
    for offsets in [(-2, 1), (-1, 0, 1), (1, 2)]:
        A = banded(6, offsets, dominant=False)
        zero_column = A.data.at[:, 2].set(0.0)  # column 2 is zero: A is singular
        singular = jaxdia.DiaMatrix(zero_column, A.offsets, A.shape)
        assert np.isnan(banded_path.solve_banded(singular, jnp.ones(6))).all(), offsets


@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-2, 0, 2)])
def test_solve_banded_ill_conditioned(banded_path, offsets):
    """cond ~ 1e12: the answer is finite and backward stable; the forward error is larger."""
    n = 40
    rng = np.random.default_rng(0)
    A = banded(n, offsets)
    dense = dense_f64(A)
    u, s, vt = np.linalg.svd(dense)
    target = np.linalg.matrix_rank(dense)
    assert target == n
    # Scale rows and columns wildly: cond grows, the band structure is kept.
    left, right = np.logspace(0, 6, n), rng.permutation(np.logspace(0, 6, n))
    data = np.asarray(A.data) * right[None, :]
    for k, offset in enumerate(A.offsets):
        cols = np.arange(n)
        inside = (cols - offset >= 0) & (cols - offset < n)
        data[k, inside] *= left[(cols - offset)[inside]]
    scaled = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    dense = dense_f64(scaled)
    assert np.linalg.cond(dense) > 1e10
    b = rhs(n)
    x = np.asarray(banded_path.solve_banded(scaled, b))
    assert np.isfinite(x).all()
    backward = np.linalg.norm(dense @ x - b) / (np.linalg.norm(dense) * np.linalg.norm(x))
    assert backward < 1e-14
    expected = sla.solve_banded(*scipy_banded(scaled), b)
    np.testing.assert_allclose(x, expected, rtol=1e-6)


@pytest.mark.parametrize("offsets", [(-1, 0, 1), (-2, 0, 1)])
def test_solve_banded_batches(banded_path, offsets):
    n, batch = 9, 4
    matrices = [banded(n, offsets, seed=s) for s in range(batch)]
    data = jnp.stack([A.data for A in matrices])
    bs = jnp.asarray(np.stack([rhs(n, seed=10 + s) for s in range(batch)]))
    expected = np.stack([np.linalg.solve(dense_f64(A), b) for A, b in zip(matrices, bs)])

    def solve(d, b):
        return banded_path.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b)

    np.testing.assert_allclose(jax.vmap(solve)(data, bs), expected, rtol=1e-10)
    np.testing.assert_allclose(
        jax.vmap(solve, in_axes=(None, 0))(data[0], bs),
        np.linalg.solve(dense_f64(matrices[0]), bs.T).T,
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        jax.vmap(solve, in_axes=(0, None))(data, bs[0]),
        np.stack([np.linalg.solve(dense_f64(A), bs[0]) for A in matrices]),
        rtol=1e-10,
    )
    # Native batches: A.batch_shape broadcasts with b's leading dims, as in matmul.
    batched = jaxdia.DiaMatrix(data, offsets, (n, n))
    np.testing.assert_allclose(
        banded_path.solve_banded(batched, bs[..., None])[..., 0], expected, rtol=1e-10
    )
    assert banded_path.solve_banded(batched, bs[0]).shape == (batch, n)


@pytest.mark.parametrize(
    "offsets, columns, dtype",
    [
        ((-1, 0, 1), None, np.float64),
        ((-2, 0, 1, 3), 2, np.float64),
        ((-1, 0, 2), None, np.complex128),
    ],
)
def test_solve_banded_gradients(banded_path, offsets, columns, dtype):
    n = 7
    A = banded(n, offsets, dtype, seed=5)
    data = jnp.where(jnp.isnan(A.data), 0.0, A.data)  # finite differences touch padding too
    shape = (n,) if columns is None else (n, columns)
    b = jnp.asarray(rhs(int(np.prod(shape)), dtype, seed=6).reshape(shape))

    def solve(d, b):
        return banded_path.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b)

    check_grads(solve, (data, b), order=1, modes=("fwd", "rev"))
    weights = jnp.asarray(rhs(int(np.prod(shape)), seed=7).reshape(shape))
    got = jax.grad(lambda d, b: jnp.sum(weights * jnp.abs(solve(d, b)) ** 2), argnums=(0, 1))(
        data, b
    )
    expected = jax.grad(
        lambda d, b: jnp.sum(weights * jnp.abs(dense_solution(d, offsets, (n, n), b)) ** 2),
        argnums=(0, 1),
    )(data, b)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-9, atol=1e-12)


# -- which implementation a one-shot solve runs (_dispatch.oneshot_implementation) ----

ONE_SHOT_BANDS = {
    "tridiagonal": (-1, 0, 1),
    "pentadiagonal": (-2, -1, 0, 1, 2),
    "7-diagonal": (-3, -2, -1, 0, 1, 2, 3),
}


def _one_shot(offsets, n, batch, dtype=np.float64):
    """``solve_banded`` of one system (``batch`` 0), or ``jax.vmap`` of it over ``batch``
    systems, and abstract arguments for it."""

    def solve(d, b):
        return jaxdia.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b)

    lead = (batch,) if batch else ()
    args = (
        jax.ShapeDtypeStruct((*lead, len(offsets), n), dtype),
        jax.ShapeDtypeStruct((*lead, n), dtype),
    )
    return (jax.vmap(solve) if batch else solve), args


def _custom_calls(text: str) -> list[str]:
    return re.findall(r"custom_call @(\w+)", text)


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
@pytest.mark.parametrize(
    "batch, n", [(0, 5), (0, 1000), (8, 100), (8, 1000), (64, 20), (1000, 100), (1000, 1000)]
)
@pytest.mark.parametrize("band", ONE_SHOT_BANDS)
def test_cpu_one_shot_solves_call_lapack(band, batch, n, dtype):
    """The CPU program of ``solve_banded`` and of ``vmap(solve_banded)``, read from its
    lowered text: a tridiagonal batch is one call of JAX's pivoting ``?gtsv``
    (``lapack_dgtsv_ffi`` for float64); another band is one call of jaxdia's ``gbsv``
    (``?gbtrf`` and ``?gbtrs`` system by system) looping over the batch, whatever the
    batch and size: no loop in the program (the ``lax.scan`` LU, which systems of up to 16
    rows and batches of 64 or more systems of up to 128 rows ran before, was slower at
    every size). Never cyclic reduction, whose refinement loop and LAPACK fallback (a
    ``case``) small systems and batches of 8 or more systems once compiled to."""
    fn, args = _one_shot(ONE_SHOT_BANDS[band], n, batch, dtype)
    text = jax.jit(fn).lower(*args).as_text()
    calls = _custom_calls(text)
    prefix = {np.float64: "d", np.complex64: "c"}[dtype]
    if band == "tridiagonal":
        assert calls == [f"lapack_{prefix}gtsv_ffi"], calls
    else:
        assert calls == ["jaxdia_lapack_gbsv"], calls
    assert "stablehlo.while" not in text and "stablehlo.case" not in text


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("band", ["tridiagonal", "pentadiagonal"])
def test_one_shot_batches_on_accelerators_keep_cyclic_reduction(platform, band):
    """The same ``vmap(solve_banded)`` lowered for cuda and TPU: cyclic reduction (its
    refinement's loop of at most ``band_refine.STEPS`` trips, no loop over the rows, no
    host call), or cuSPARSE's ``gtsv2`` for a tridiagonal batch on cuda."""
    fn, args = _one_shot(ONE_SHOT_BANDS[band], 1000, 64, np.float32)
    text = lowered_text(fn, *args, platform=platform)
    assert "jaxdia_lapack" not in text and "gtsv_ffi" not in text
    loops = while_loops(fn, *args, platform=platform)
    if platform == "cuda" and band == "tridiagonal":
        assert "gtsv2" in text and loops == []
    else:
        assert loops == [(0, band_refine.STEPS)]


@pytest.mark.parametrize(
    "band, batch, n",
    [
        ("tridiagonal", 70, 20),  # ?gtsv
        pytest.param("pentadiagonal", 8, 20, marks=pytest.mark.full),  # gbsv: ?gbtrf + ?gbtrs
        ("pentadiagonal", 70, 20),  # gbsv, a large batch of small systems
        pytest.param("7-diagonal", 70, 150, marks=pytest.mark.full),  # gbsv
    ],
)
@pytest.mark.parametrize("dtype", [np.float64, np.complex128])
def test_one_shot_batches_match_numpy(band, batch, n, dtype):
    """Each CPU implementation of a batched one-shot solve, against NumPy: ``vmap`` over
    matrices and right-hand sides, over either alone (one matrix for many right-hand
    sides is one system with many columns), a batched ``DiaMatrix``, a singular matrix
    in the batch (NaN for it alone) and gradients (transposed solves)."""
    offsets = ONE_SHOT_BANDS[band]
    matrices = [banded(n, offsets, dtype, seed=s) for s in range(batch)]
    dense = np.stack([dense_f64(A) for A in matrices])
    data = jnp.stack([A.data for A in matrices]).at[3].set(0)  # matrix 3 is singular
    dense[3] = 0
    bs = jnp.asarray(np.stack([rhs(n, dtype, seed=100 + s) for s in range(batch)]))

    def solve(d, b):
        return jaxdia.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b)

    x = np.asarray(jax.jit(jax.vmap(solve))(data, bs))
    assert np.isnan(x[3]).all() and np.isfinite(np.delete(x, 3, axis=0)).all()
    keep = np.arange(batch) != 3
    expected = np.linalg.solve(dense[keep], np.asarray(bs)[keep][..., None])[..., 0]
    np.testing.assert_allclose(x[keep], expected, rtol=1e-10)
    np.testing.assert_allclose(
        jax.vmap(solve, in_axes=(None, 0))(data[0], bs),
        np.linalg.solve(dense[0], np.asarray(bs).T).T,
        rtol=1e-10,
    )
    np.testing.assert_allclose(
        jax.vmap(solve, in_axes=(0, None))(data, bs[0])[keep],
        np.linalg.solve(dense[keep], np.asarray(bs[0])),
        rtol=1e-10,
    )
    native = jaxdia.solve_banded(jaxdia.DiaMatrix(data, offsets, (n, n)), bs[..., None])
    np.testing.assert_allclose(native[keep], expected[..., None], rtol=1e-10)
    weights = jnp.asarray(rhs(n, seed=7))
    got = jax.grad(lambda b: jnp.sum(weights * jnp.abs(jax.vmap(solve)(data, b)) ** 2))(bs)
    expected_grad = jax.grad(
        lambda b: jnp.sum(
            weights * jnp.abs(jnp.linalg.solve(dense[keep], b[..., None])[..., 0]) ** 2
        )
    )(bs[keep])
    np.testing.assert_allclose(got[keep], expected_grad, rtol=1e-8)


def test_small_systems_and_stored_tridiagonal_factors_on_cpu():
    """Small single systems no longer run cyclic reduction (no refinement loop, no
    LAPACK fallback ``case``): JAX's ``?gtsv`` for a tridiagonal one, the scan else. A
    stored tridiagonal factor is jaxdia's ``?gttrf``. (Below 5 rows these offsets reach
    the corners: a periodic factor, ``tests/test_periodic.py``.)"""
    for n in (5, 16):
        for offsets in ((-1, 0, 1), (-2, -1, 0, 1, 3)):
            A, b = banded(n, offsets), rhs(n)
            text = jax.jit(jaxdia.solve_banded).lower(A, b).as_text()
            assert "stablehlo.case" not in text
            assert ("gtsv_ffi" in text) == (offsets == (-1, 0, 1))
            expected = sla.solve_banded(*scipy_banded(A), b)
            np.testing.assert_allclose(jaxdia.solve_banded(A, b), expected, rtol=1e-12)
    tridiagonal = banded(40, (-1, 0, 1))
    factored = jax.jit(lambda A, b: jaxdia.lu_factor(A).solve(b)).lower(tridiagonal, rhs(40))
    assert "jaxdia_lapack_gttrf" in factored.as_text()


def test_solve_banded_numpy_float64_without_x64_is_quiet():
    """A NumPy float64 right-hand side with x64 off is converted as ``A @ b`` converts it,
    without JAX's "explicitly requested dtype" warning (an error in this suite)."""
    with jax.enable_x64(False):
        A = jaxdia.diags([1.0, 4.0, 1.0], [-1, 0, 2], (6, 6))
        x = jaxdia.solve_banded(A, np.ones(6))
        assert x.dtype == np.float32
        np.testing.assert_allclose(A @ x, np.ones(6), rtol=1e-5)


def test_solve_banded_edge_cases():
    x = jaxdia.solve_banded(jaxdia.diags([[2.0]], offsets=[0]), jnp.array([4.0]))
    np.testing.assert_allclose(x, [2.0])
    assert jaxdia.solve_banded(jaxdia.eye(0), jnp.zeros(0)).shape == (0,)
    empty = jaxdia.DiaMatrix(jnp.zeros((0, 3)), (), (3, 3))
    assert np.isnan(jaxdia.solve_banded(empty, jnp.ones(3))).all()
    low = jaxdia.diags([[4.0] * 5, [1.0] * 4, [0.5] * 3], offsets=[0, 1, 2]).astype(jnp.bfloat16)
    x = jaxdia.solve_banded(low, jnp.ones(5, jnp.bfloat16))
    assert x.dtype == jnp.bfloat16
    # a NumPy bfloat16 b (its dtype kind is "V") was refused as not numeric
    np.testing.assert_array_equal(jaxdia.solve_banded(low, np.ones(5, jnp.bfloat16)), x)
    np.testing.assert_allclose(
        np.asarray(x, np.float64), np.linalg.solve(dense_f64(low), np.ones(5)), rtol=2e-2
    )


def test_solve_banded_errors():
    A = jaxdia.diags([1.0, 2.0], offsets=[0, 1], shape=(4, 4))
    with pytest.raises(ValueError, match=r"b must have shape \(4,\) or \(\.\.\., 4, k\).*\(3,\)"):
        jaxdia.solve_banded(A, jnp.ones(3))
    with pytest.raises(ValueError, match="got shape \\(\\)"):
        jaxdia.solve_banded(A, 1.0)
    with pytest.raises(ValueError, match="square"):
        jaxdia.solve_banded(jaxdia.eye(3, 4), jnp.ones(3))
    with pytest.raises(TypeError, match="DiaMatrix"):
        jaxdia.solve_banded(np.eye(4), jnp.ones(4))
    with pytest.raises(TypeError, match="numeric"):
        jaxdia.solve_banded(A, ["a"] * 4)
    batched = jaxdia.DiaMatrix(jnp.ones((2, 2, 4)), (0, 1), (4, 4))
    with pytest.raises(ValueError, match="do not broadcast"):
        jaxdia.solve_banded(batched, jnp.ones((3, 4, 1)))


_MANY_SHAPES = """
import sys
from functools import partial

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)
import jaxdia

BANDS = ((-1, 0, 1), (-2, -1, 0, 1, 2), (-2, 0, 1, 3), (-3, -2, -1, 0, 1, 2, 3))


def mappings():
    with open("/proc/self/maps") as maps:
        return sum(1 for _ in maps)


@partial(jax.jit, static_argnums=2)
def batched(data, b, offsets):  # one jitted function: its cache keeps every program
    n = data.shape[-1]
    solve = lambda d, b: jaxdia.solve_banded(jaxdia.DiaMatrix(d, offsets, (n, n)), b)
    return jax.vmap(solve)(data, b)


def solve(i):
    offsets, n = BANDS[i % 4], 20 + i
    batch = (1, 8, 100)[i // 4 % 3] if i % 7 else 0
    lead = (batch,) if batch else ()
    rng = np.random.default_rng(i)
    data = rng.standard_normal((*lead, len(offsets), n))
    data[..., offsets.index(0), :] += 4 * len(offsets)
    b = rng.standard_normal((*lead, n))
    if batch and i % 2:
        x = batched(data, b, offsets)
    else:  # eagerly: a batched DiaMatrix, or one system
        A = jaxdia.DiaMatrix(data, offsets, (n, n))
        x = jaxdia.solve_banded(A, b[..., None] if batch else b)
    assert np.isfinite(np.asarray(x)).all(), i


for i in range(1000, 1004):  # what any first solve loads
    solve(i)
before = mappings()
for i in range(int(sys.argv[1])):
    solve(i)
print("mappings", before, mappings())
"""


@pytest.mark.full
def test_many_shapes_keep_the_memory_mappings_bounded():
    """A process that solves 200 distinct shapes (one system and batches of 1, 8 and 100,
    bands of 3 to 7 diagonals, eagerly and under one jitted ``vmap``) keeps about 20
    memory mappings per shape alive (its programs, which JAX's caches keep). Batches of 8
    or more systems once compiled to cyclic reduction, whose programs kept hundreds each:
    a process that met 80-130 shapes reached Linux's limit of 65530
    (``vm.max_map_count``) and aborted in LLVM ("Unable to allocate section memory")."""
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs Linux's /proc/self/maps")
    shapes = 200
    process = subprocess.Popen(
        [sys.executable, "-c", _MANY_SHAPES, str(shapes)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        output, _ = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        output = process.communicate()[0] + "\n(killed after 300 s)"
    assert process.returncode == 0, output
    before, after = (int(v) for v in output.split("mappings")[-1].split())
    assert after - before < 50 * shapes, output


_HOLDS_A_FACTOR_AT_EXIT = """
import jax, numpy as np, scipy.sparse as sp
jax.config.update("jax_enable_x64", True)
import jaxdia
T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(30, 30))
A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).todia())
b = np.ones(900)
x = jaxdia.solve_banded(A, b)  # LAPACK's gbsv through jaxdia's FFI handler
print("solved")
"""


@pytest.mark.full  # test_lapack_ffi.py's exit test (stored factors) stays fast
def test_a_script_holding_a_factor_exits():
    """A script that ends with a banded solution alive exits: XLA's CPU client,
    destroyed during the interpreter's finalization after jaxdia's former ``ctypes``
    LAPACK handlers ran on its threads, hung joining its thread pool (this script: every
    run, on JAX 0.10.2 and 0.12). The compiled handlers never touch Python, and the
    client is destroyed normally."""
    for _ in range(2):  # the hang was not certain in one run
        result = subprocess.run(
            [sys.executable, "-c", _HOLDS_A_FACTOR_AT_EXIT],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=Path(__file__).resolve().parents[1],
        )
        assert result.returncode == 0 and "solved" in result.stdout, result.stderr
