"""The compiled XLA FFI handlers of the LAPACK custom calls (csrc/lapack_ffi/).

Their results are tested against SciPy in test_factor.py and test_banded.py; here: that
they are compiled and registered, that what they cannot handle comes back as an XLA
error rather than a crash, and that they are thread safe: factors solved at once from
several Python threads, by independent calls of one program and under ``vmap`` with large
batches agree with the same solves made one after the other.
"""

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from numpy.typing import DTypeLike

import jaxdia
from jaxdia import _kernels
from jaxdia._kernels import lapack

from .helpers import Forced

THREADS = 8


#: jaxdia's banded functions with LAPACK on the host whatever the size (the small systems
#: and large batches here would take the scan).
LAPACK = Forced("lapack")


def band(n, lower, upper, *, batch=(), dtype: DTypeLike = np.float64, seed=0, dominant=False):
    """A random banded DiaMatrix: not diagonally dominant unless told, so that LU pivots."""
    rng = np.random.default_rng(seed)
    offsets = tuple(range(-lower, upper + 1))
    data = rng.standard_normal((*batch, len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(data.shape)
    if dominant:
        data[..., lower, :] += 2.0 * len(offsets)
    return jaxdia.DiaMatrix(jnp.asarray(data.astype(dtype)), offsets, (n, n))


def hermitian(n, kd, *, batch=(), dtype: DTypeLike = np.float64, seed=0):
    """A Hermitian positive definite band (diagonally dominant) with ``kd`` off-diagonals."""
    rng = np.random.default_rng(seed)
    offsets = tuple(range(-kd, kd + 1))
    data = np.empty((*batch, len(offsets), n), dtype)
    for k in range(1, kd + 1):
        values = rng.standard_normal((*batch, n))
        if np.dtype(dtype).kind == "c":
            values = values + 1j * rng.standard_normal((*batch, n))
        data[..., kd - k, :] = values  # A[j + k, j]
        data[..., kd + k, :] = np.roll(values.conj(), k, axis=-1)  # A[j, j + k]
    data[..., kd, :] = 4.0 * kd + 1.0
    return jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))


def factors():
    """One factor of each kind the handlers make: banded LU (with pivoting, and without
    interchanges at 300 rows: the ?tbsv path), banded Cholesky, tridiagonal LU and
    L D L^H, in real and complex precision."""
    return {
        "gb": LAPACK.lu_factor(band(60, 2, 3, seed=1)),
        "gb without interchanges": LAPACK.lu_factor(band(300, 2, 1, seed=2, dominant=True)),
        "gb complex": LAPACK.lu_factor(band(40, 1, 2, dtype=np.complex64, seed=3)),
        "pb": LAPACK.cho_factor(hermitian(50, 3, seed=4)),
        "pb complex": LAPACK.cho_factor(hermitian(50, 2, dtype=np.complex128, seed=5)),
        "gt": LAPACK.lu_factor(band(70, 1, 1, seed=6)),
        "gt complex": LAPACK.lu_factor(band(70, 1, 1, dtype=np.complex128, seed=7)),
        "pt": LAPACK.cho_factor(hermitian(80, 1, seed=8)),
        "pt complex": LAPACK.cho_factor(hermitian(80, 1, dtype=np.complex64, seed=9)),
    }


def right_hand_sides(factor, count, seed):
    n = factor.shape[0]
    rng = np.random.default_rng(seed)
    b = rng.standard_normal((count, n, 3))
    if np.dtype(factor.dtype).kind == "c":
        b = b + 1j * rng.standard_normal(b.shape)
    return b.astype(factor.dtype)


def test_the_handlers_are_compiled():
    from jaxdia._kernels import _lapack_ffi

    assert _lapack_ffi.__file__.endswith(".so") or _lapack_ffi.__file__.endswith(".pyd")
    capsules = {
        **__import__("scipy.linalg.cython_blas", fromlist=["_"]).__pyx_capi__,
        **__import__("scipy.linalg.cython_lapack", fromlist=["_"]).__pyx_capi__,
    }
    targets = _lapack_ffi.targets(capsules)  # again: the same routines, accepted
    assert sorted(targets) == sorted(
        [
            "gbtrf",
            "gbtrs",
            "gbsv",
            "pbtrf",
            "pbtrs",
            "gttrf",
            "gttrs",
            "pttrf",
            "pttrs",
            "pbsinv",
            "gram_schmidt",
        ]
    )
    del capsules["ztbsv"]
    with pytest.raises(KeyError, match="ztbsv"):
        _lapack_ffi.targets(capsules)


def test_a_missing_extension_says_how_to_build_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "jaxdia._kernels._lapack_ffi", None)
    monkeypatch.delattr(_kernels, "_lapack_ffi")
    with pytest.raises(ImportError, match=r"pip install -e \."):
        lapack._register.__wrapped__()


def _call(target, results, *operands, **attributes):
    lapack._register()
    return jax.ffi.ffi_call(f"jaxdia_lapack_{target}", results)(*operands, **attributes)


def test_what_the_handlers_cannot_handle_is_an_xla_error():
    """An unsupported dtype, a missing or ill-typed attribute, inconsistent shapes: an
    XLA error with a message, and the process goes on."""
    n = 6
    half = jnp.ones((n, 4), jnp.float16)
    pivots = jnp.zeros((n,), jnp.int32)
    b = jnp.ones((1, n), jnp.float16)
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    attributes = {"kl": np.int64(1), "ku": np.int64(1), "trans": np.int64(0)}
    with pytest.raises(Exception, match="gbtrs: XLA dtype .* is not float32"):
        jax.block_until_ready(_call("gbtrs", result, half, pivots, b, **attributes))
    lu, b = half.astype(np.float64), b.astype(np.float64)
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    with pytest.raises(Exception, match="missing attribute trans"):
        jax.block_until_ready(_call("gbtrs", result, lu, pivots, b, kl=np.int64(1), ku=np.int64(1)))
    with pytest.raises(Exception, match="trans must be 0, 1 or 2, not 7"):
        jax.block_until_ready(
            _call("gbtrs", result, lu, pivots, b, **{**attributes, "trans": np.int64(7)})
        )
    with pytest.raises(Exception, match="attribute kl: .* integer scalars only"):
        jax.block_until_ready(_call("gbtrs", result, lu, pivots, b, **{**attributes, "kl": 1.5}))
    with pytest.raises(Exception, match="gbtrs: the band has too few columns"):
        jax.block_until_ready(
            _call("gbtrs", result, lu, pivots, b, **{**attributes, "kl": np.int64(2)})
        )
    wrong = jax.ShapeDtypeStruct((1, n + 1), b.dtype)
    with pytest.raises(Exception, match="do not match the factor|differ in size"):
        jax.block_until_ready(_call("gbtrs", wrong, lu, pivots, jnp.ones((1, n + 1)), **attributes))
    with pytest.raises(Exception, match="expected 3 operands, got 2"):
        jax.block_until_ready(_call("gbtrs", result, lu, pivots, **attributes))
    data, placement = jnp.ones((2, 3, n)), jnp.asarray([[-1, 3], [0, 2], [1, 1]])
    solved = [jax.ShapeDtypeStruct((3, 1, n), b.dtype), jax.ShapeDtypeStruct((3,), np.int32)]
    with pytest.raises(Exception, match="gbsv: operands of inconsistent shapes"):
        # two matrices for three batches
        jax.block_until_ready(
            _call("gbsv", solved, data, placement, jnp.ones((3, 1, n)), **attributes)
        )
    with pytest.raises(Exception, match="gbsv: band column 4 out of range"):
        jax.block_until_ready(
            _call("gbsv", solved, data[:1], placement + 1, jnp.ones((3, 1, n)), **attributes)
        )
    # and the handlers still work
    A = band(n, 1, 1, dominant=True)
    np.testing.assert_allclose(A @ jaxdia.solve_banded(A, np.ones(n)), 1.0, rtol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("n, kd", [(1, 0), (1, 2), (2, 3), (3, 1), (9, 2), (12, 4)])
@pytest.mark.parametrize("lower", [False, True])
def test_pbsinv_is_the_inverse_on_scipys_cholesky_band(n, kd, lower, dtype):
    """``pbsinv`` of SciPy's ``?pbtrf`` factor (``cholesky_banded``) holds the dense
    inverse on the factor's triangle, in its band storage, zeros outside the matrix; a
    batch (vmap) is one call with leading systems."""
    rng = np.random.default_rng(n + kd)
    offsets = np.subtract.outer(np.arange(n), np.arange(n))
    M = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        M = M + 1j * rng.standard_normal((n, n))
    A = np.where(np.abs(offsets) <= kd, M @ M.conj().T, 0) + 4 * n * np.eye(n)
    A = ((A + A.conj().T) / 2).astype(dtype)
    ab = np.zeros((kd + 1, n), dtype)  # LAPACK's band: ab[r, j] = A[i, j]
    for r in range(kd + 1):
        for j in range(n):
            i = j + r if lower else j - (kd - r)
            if 0 <= i < n:
                ab[r, j] = A[i, j]
    c = jnp.asarray(scipy.linalg.cholesky_banded(ab, lower=lower).T.copy())
    z = np.asarray(lapack.pbsinv(c, kd=kd, lower=lower)).T
    inverse = np.linalg.inv(A.astype(np.complex128))
    tol = 1e-4 if np.dtype(dtype) in (np.float32, np.complex64) else 1e-12
    for r in range(kd + 1):
        offset = -r if lower else kd - r
        inside = slice(0, max(n - r, 0)) if lower else slice(min(offset, n), n)
        np.testing.assert_allclose(z[r, inside], np.diagonal(inverse, offset), rtol=tol, atol=tol)
        outside = np.ones(n, bool)
        outside[inside] = False
        assert np.all(z[r, outside] == 0)
    batched = jax.vmap(lambda c: lapack.pbsinv(c, kd=kd, lower=lower))(jnp.stack([c, 2 * c]))
    np.testing.assert_allclose(batched[1], np.asarray(z).T / 4, rtol=tol, atol=tol)


def test_a_zero_pivot_is_a_result_not_an_error():
    singular = jaxdia.diags([[1.0, 1.0], [1.0, 1.0, 1.0], [1.0, 0.0]], [-1, 0, 1])
    data = jnp.asarray(singular.data, jnp.float64)
    _, _, info = lapack.gbtrf(data, placement=[(-1, 3), (0, 2), (1, 1)], kl=1, ku=1)
    assert int(info) == 3


def test_solves_from_several_threads_agree_with_sequential_ones():
    """Each factor solved for many right-hand sides, one after the other, then all at once
    from ``THREADS`` Python threads (the handlers run on XLA's threads without the GIL,
    so several run at the same time): the same results, bit for bit."""
    with jax.enable_x64():
        made = factors()
        solve = jax.jit(lambda factor, b: factor.solve(b))
        work = [
            (name, index, factor, b)
            for name, factor in made.items()
            for index, b in enumerate(right_hand_sides(factor, 6, seed=len(name)))
        ]
        expected = {(name, i): np.asarray(solve(factor, b)) for name, i, factor, b in work}
        for name, i, factor, b in work[:: len(work) // 9]:
            dense = np.asarray(factor.matrix.todense())
            tolerance = 1e4 * np.finfo(factor.dtype).eps
            np.testing.assert_allclose(dense @ expected[name, i], b, rtol=tolerance, atol=tolerance)

        def run(item):
            name, i, factor, b = item
            return (name, i), np.asarray(solve(factor, b))

        with ThreadPoolExecutor(THREADS) as pool:
            for _ in range(3):
                for key, got in pool.map(run, work * 2):
                    np.testing.assert_array_equal(got, expected[key], err_msg=str(key))


def test_factorizations_from_several_threads_agree_with_sequential_ones():
    with jax.enable_x64():
        matrices = [band(50, 2, 2, seed=s) for s in range(6)] + [
            hermitian(40, 2, seed=s) for s in range(6)
        ]
        lu = jax.jit(LAPACK.lu_factor)
        cho = jax.jit(LAPACK.cho_factor)
        make = [lu] * 6 + [cho] * 6

        def run(index):
            return index, [
                np.asarray(leaf) for leaf in jax.tree.leaves(make[index](matrices[index]))
            ]

        expected = dict(map(run, range(len(matrices))))
        with ThreadPoolExecutor(THREADS) as pool:
            for index, got in pool.map(run, list(range(len(matrices))) * 4):
                for leaf, want in zip(got, expected[index], strict=True):
                    np.testing.assert_array_equal(leaf, want)


def test_independent_calls_of_one_program_agree_with_sequential_ones():
    """One jitted program with a solve per factor: XLA's CPU runtime may run the
    independent custom calls at the same time, on its own thread pool."""
    with jax.enable_x64():
        made = list(factors().values())
        bs = [right_hand_sides(factor, 1, seed=i)[0] for i, factor in enumerate(made)]
        together = jax.jit(lambda fs, bs: [f.solve(b) for f, b in zip(fs, bs)])(made, bs)
        for factor, b, got in zip(made, bs, together):
            np.testing.assert_array_equal(got, jax.jit(lambda f, b: f.solve(b))(factor, b))


@pytest.mark.parametrize("kind", ["gb", "pb", "gt", "pt"])
def test_vmap_over_large_batches_agrees_with_sequential_solves(kind):
    """``vmap`` of factor and solve over 512 systems (one handler call looping over the
    batch) and of a solve with one factor over 512 right-hand sides (one call with 512
    columns): each system's result is its own sequential solve's."""
    batch, n = 512, 24
    with jax.enable_x64():
        if kind in ("gb", "gt"):
            A = band(n, 2 if kind == "gb" else 1, 1, batch=(batch,), seed=11)
            factor = LAPACK.lu_factor
        else:
            A = hermitian(n, 2 if kind == "pb" else 1, batch=(batch,), seed=12)
            factor = LAPACK.cho_factor
        b = np.random.default_rng(13).standard_normal((batch, n))
        factor_and_solve = jax.jit(jax.vmap(lambda A, b: factor(A).solve(b)))
        got = np.asarray(factor_and_solve(A, b))
        one = jax.jit(lambda A, b: factor(A).solve(b))
        for i in range(0, batch, 37):
            A_i = jaxdia.DiaMatrix(A.data[i], A.offsets, A.shape)
            np.testing.assert_array_equal(got[i], one(A_i, b[i]))
        single = factor(jaxdia.DiaMatrix(A.data[0], A.offsets, A.shape))
        shared = np.asarray(jax.jit(jax.vmap(single.solve))(b))
        sequential = jax.jit(single.solve)
        for i in range(0, batch, 37):
            np.testing.assert_allclose(shared[i], sequential(b[i]), rtol=1e-13, atol=1e-13)


def _assert_script_solves(script: str, **environment: str) -> None:
    """Runs ``script`` in a Python process of its own (from the repository root, with
    ``environment`` added) and checks that it exits cleanly after printing "solved"."""
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[1],
        env={**os.environ, **environment},
    )
    assert result.returncode == 0 and "solved" in result.stdout, result.stderr


def test_the_handlers_keep_working_in_a_subprocess_holding_a_factor_at_exit():
    """The exit test of test_banded.py holds a solution; this one a stored factor of each
    kind (their handlers ran on XLA's threads), with no keep-alive of XLA's client."""
    script = """
import jax, numpy as np, scipy.sparse as sp
jax.config.update("jax_enable_x64", True)
import jaxdia
from numpy.typing import DTypeLike
T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(30, 30))
A = jaxdia.DiaMatrix.from_scipy(sp.kronsum(T, T).todia())
lu, c = jaxdia.lu_factor(A, method="lapack"), jaxdia.cho_factor(A, method="lapack")
t = jaxdia.lu_factor(jaxdia.DiaMatrix.from_scipy(T.todia()), method="lapack")
x = [lu.solve(np.ones(900)), c.solve(np.ones(900)), t.solve(np.ones(30))]
print("solved")
"""
    for _ in range(2):
        _assert_script_solves(script)


def test_the_handlers_take_x64_off():
    """With x64 off (JAX's default) the placement operand is int32: the compiled gbtrf
    and pbtrf once refused it, so every general-band LU on CPU failed for such users."""
    script = """
import jax, jax.numpy as jnp, numpy as np, scipy.sparse as sp, scipy.sparse.linalg as spl
import jaxdia
assert not jax.config.jax_enable_x64
rng = np.random.default_rng(0)
for offsets in ([-1, 0, 1, 2], [-2, -1, 0, 1, 2], list(range(-7, 8))):
    A = sp.diags_array([rng.uniform(-1, 1, 300 - abs(k)) + 8.0 * (k == 0) for k in offsets],
                       offsets=offsets, shape=(300, 300), dtype=np.float32)
    S = (A + A.T).astype(np.float32)
    b = np.ones(300, np.float32)
    M, H = jaxdia.DiaMatrix.from_scipy(A.todia()), jaxdia.DiaMatrix.from_scipy(S.todia())
    for x, oracle in [(jaxdia.lu_factor(M).solve(b), spl.spsolve(A.tocsc(), b)),
                      (jaxdia.solve_banded(M, b), spl.spsolve(A.tocsc(), b)),
                      (jaxdia.cho_factor(H).solve(b), spl.spsolve(S.tocsc(), b))]:
        assert np.abs(np.asarray(x) - oracle).max() <= 1e-4 * np.abs(oracle).max()
print("solved")
"""
    _assert_script_solves(script, JAX_ENABLE_X64="0")


# -- narrow bands: the handlers' own ?gbtf2 and ?gbtrs against SciPy's LAPACK -------------

PREFIXES = {np.float32: "s", np.float64: "d", np.complex64: "c", np.complex128: "z"}
EPS = {dtype: np.finfo(dtype).eps for dtype in PREFIXES}

# (n, kl, ku): kl <= 4, the bands the handlers factor and solve without LAPACK; one row or
# two, a bidiagonal band either way, bands wider than the matrix, a wide U.
NARROW_SHAPES = [
    (1, 0, 0),
    (1, 2, 1),
    (2, 1, 1),
    (2, 3, 2),
    (3, 0, 2),
    (5, 3, 0),
    (6, 4, 4),
    (40, 2, 2),
    (40, 3, 1),
    (40, 1, 4),
    (40, 4, 3),
    (40, 2, 12),
    (40, 4, 0),
    (40, 0, 5),
]


def lapack_band(A: np.ndarray, kl: int, ku: int):
    """SciPy's ``ab`` for ?gbtrf (``2 kl + ku + 1`` rows, ``ab[kl + ku + i - j, j] = A[i, j]``)
    and the DIA data and placement of jaxdia's ``gbtrf`` for the same matrix."""
    n, kv = A.shape[0], kl + ku
    offsets = range(-kl, ku + 1)
    ab = np.zeros((2 * kl + ku + 1, n), A.dtype)
    data = np.zeros((len(offsets), n), A.dtype)
    for k, offset in enumerate(offsets):
        for j in range(max(0, offset), min(n, n + offset)):
            ab[kv - offset, j] = data[k, j] = A[j - offset, j]
    return ab, data, [(offset, kv - offset) for offset in offsets]


def random_band(n, kl, ku, dtype, seed):
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((n, n))
    if np.dtype(dtype).kind == "c":
        A = A + 1j * rng.standard_normal((n, n))
    i, j = np.indices((n, n))
    A[(j - i > ku) | (i - j > kl)] = 0
    return A.astype(dtype)


def compare_factors(A, kl, ku):
    """jaxdia's ``gbtrf`` and SciPy's ``?gbtrf`` of ``A``: the same pivots and info, factors
    equal to rounding; returns SciPy's factor and pivots."""
    dtype = A.dtype.type
    ab, data, placement = lapack_band(A, kl, ku)
    want, want_pivots, want_info = getattr(scipy.linalg.lapack, PREFIXES[dtype] + "gbtrf")(
        ab, kl, ku
    )
    lu, pivots, info = lapack.gbtrf(jnp.asarray(data), placement=placement, kl=kl, ku=ku)
    assert int(info) == want_info
    np.testing.assert_array_equal(pivots, want_pivots)
    scale = max(np.abs(want).max(), 1.0)
    np.testing.assert_allclose(np.asarray(lu).T, want, rtol=0, atol=200 * EPS[dtype] * scale)
    return want, want_pivots


@pytest.mark.parametrize("dtype", list(PREFIXES))
@pytest.mark.parametrize("n, kl, ku", NARROW_SHAPES)
def test_narrow_band_factors_and_solves_are_lapacks(n, kl, ku, dtype):
    """The same pivots and info as ?gbtrf, the factor and the solutions of ?gbtrs (with
    SciPy's factor, for ``trans`` 0, 1 and 2: ``A x = b``, ``A^T x = b``, ``A^H x = b``)
    to rounding, random bands that pivot."""
    with jax.enable_x64():
        for seed in range(3):
            A = random_band(n, kl, ku, dtype, seed)
            factor, pivots = compare_factors(A, kl, ku)
            b = random_band(n, n, n, dtype, seed + 10)[:, :3]
            gbtrs = getattr(scipy.linalg.lapack, PREFIXES[dtype] + "gbtrs")
            for trans in (0, 1, 2):
                want, info = gbtrs(factor, kl, ku, b, pivots, trans=trans)
                assert info == 0
                got = lapack.gbtrs(
                    jnp.asarray(factor.T),
                    jnp.asarray(pivots, jnp.int32),
                    jnp.asarray(b.T),
                    kl=kl,
                    ku=ku,
                    trans=trans,
                )
                scale = max(np.abs(want).max(), 1.0)
                np.testing.assert_allclose(
                    np.asarray(got).T,
                    want,
                    rtol=0,
                    atol=200 * EPS[dtype] * scale,
                    err_msg=f"trans={trans}",
                )


@pytest.mark.parametrize("dtype", list(PREFIXES))
@pytest.mark.parametrize("kl", [2, 3])
@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 7, 40])
def test_one_solution_without_interchanges_is_lapacks(n, kl, dtype):
    """One right-hand side of a pentadiagonal or 7-diagonal factor without interchanges
    (the solve that keeps its rows in registers), up to the bands wider than the matrix:
    ?gbtrs's solution to rounding, with zeros in ``b`` and in the solution's path (the
    steps they skip), and the transposed solves beside it."""
    with jax.enable_x64():
        A = random_band(n, kl, kl, dtype, n)
        A[np.diag_indices(n)] += 4 * (2 * kl + 1)  # dominant: no interchanges
        if n > 2:
            A[n - 1, n - 2] = A[n - 2, n - 1] = 0
        factor, pivots = compare_factors(A, kl, kl)
        assert np.array_equal(pivots, np.arange(n))
        b = random_band(n, n, n, dtype, n + 10)[:, :1]
        b[n // 2] = 0
        gbtrs = getattr(scipy.linalg.lapack, PREFIXES[dtype] + "gbtrs")
        for trans in (0, 1):
            want, info = gbtrs(factor, kl, kl, b, pivots, trans=trans)
            got = lapack.gbtrs(
                jnp.asarray(factor.T),
                jnp.asarray(pivots, jnp.int32),
                jnp.asarray(b.T),
                kl=kl,
                ku=kl,
                trans=trans,
            )
            scale = max(np.abs(want).max(), 1.0)
            np.testing.assert_allclose(
                np.asarray(got).T, want, rtol=0, atol=200 * EPS[dtype] * scale
            )


@pytest.mark.parametrize("dtype", [np.float64, np.complex64])
def test_narrow_band_zero_pivots_are_lapacks(dtype):
    """info is the first zero pivot, 1-based, as LAPACK's: in the last column, in a column
    of zeros in the middle (the elimination goes on after it), in every column."""
    with jax.enable_x64():
        n, kl, ku = 7, 2, 1
        last = random_band(n, kl, ku, dtype, 0)
        last[-1, -1] = 0
        last[-1, -3:] = 0  # a last row of zeros: U[-1, -1] is 0 whatever the pivots
        middle = random_band(n, kl, ku, dtype, 1)
        middle[:, 3] = 0
        for A, info in ((last, n), (middle, 4), (np.zeros((n, n), dtype), 1)):
            ab, data, placement = lapack_band(A, kl, ku)
            _, _, want = getattr(scipy.linalg.lapack, PREFIXES[dtype] + "gbtrf")(ab, kl, ku)
            assert want == info
            compare_factors(A, kl, ku)


@pytest.mark.parametrize("dtype", list(PREFIXES))
@pytest.mark.parametrize("n, kd", [(1, 0), (1, 3), (2, 2), (3, 1), (7, 4), (40, 2), (40, 5)])
@pytest.mark.parametrize("lower", [False, True])
def test_narrow_band_cholesky_is_lapacks(n, kd, lower, dtype):
    """``pbtrf`` of a band of at most 4 off-diagonals (written out in C) against SciPy's
    ``?pbtrf``, and of 5 (LAPACK's own): the same factor to rounding and the same ``info``,
    for a positive definite matrix and for one whose leading minor of order ``n // 2 + 1``
    is not."""
    rng = np.random.default_rng(n + 10 * kd)
    offsets = range(-kd, 1) if lower else range(0, kd + 1)
    for definite in (True, False):
        M = rng.standard_normal((n, n))
        if np.dtype(dtype).kind == "c":
            M = M + 1j * rng.standard_normal((n, n))
        i, j = np.indices((n, n))
        A = np.where(np.abs(i - j) <= kd, M + M.conj().T, 0) + 3 * (kd + 1) * np.eye(n)
        if not definite:
            A[n // 2, n // 2] = -1.0
        A = A.astype(dtype)
        data = np.zeros((len(offsets), n), dtype)
        ab = np.zeros((kd + 1, n), dtype)  # LAPACK's band: row r holds A[i, j]
        placement = []
        for k, offset in enumerate(offsets):
            row = -offset if lower else kd - offset
            placement.append((offset, row))
            for col in range(max(0, offset), min(n, n + offset)):
                ab[row, col] = data[k, col] = A[col - offset, col]
        want, want_info = getattr(scipy.linalg.lapack, PREFIXES[dtype] + "pbtrf")(
            ab, lower=int(lower)
        )
        c, info = lapack.pbtrf(jnp.asarray(data), placement=placement, kd=kd, lower=lower)
        assert int(info) == want_info
        valid = n if want_info == 0 else want_info - 1  # the columns factored
        scale = max(np.abs(want).max(), 1.0)
        np.testing.assert_allclose(
            np.asarray(c).T[:, :valid], want[:, :valid], rtol=0, atol=100 * EPS[dtype] * scale
        )


def test_wide_bands_still_match_lapack():
    """kl > 4: LAPACK's own ?gbtrf, the same comparison."""
    with jax.enable_x64():
        for kl, ku in ((5, 4), (9, 0), (6, 12)):
            compare_factors(random_band(60, kl, ku, np.float64, kl), kl, ku)


def scipy_factor_and_solve(A, kl, ku, b, trans):
    """SciPy's ?gbtrf then ?gbtrs of ``A`` for ``b`` ``(n, k)``: ``(x, info)``, ``x`` None
    for a singular ``A``."""
    ab, _, _ = lapack_band(A, kl, ku)
    prefix = PREFIXES[A.dtype.type]
    factor, pivots, info = getattr(scipy.linalg.lapack, prefix + "gbtrf")(ab, kl, ku)
    if info:
        return None, info
    x, info = getattr(scipy.linalg.lapack, prefix + "gbtrs")(factor, kl, ku, b, pivots, trans=trans)
    assert info == 0
    return x, 0


@pytest.mark.parametrize("dtype", list(PREFIXES))
@pytest.mark.parametrize(
    "n, kl, ku, dominant",
    [
        (1, 0, 0, False),
        (2, 1, 1, False),
        (2, 3, 2, False),
        (6, 4, 4, False),
        (40, 2, 2, False),
        (40, 1, 4, False),
        (40, 2, 12, False),
        (40, 2, 2, True),  # no row interchanges
        (60, 5, 4, False),  # LAPACK's own routines
        (260, 5, 1, True),  # LAPACK's, and ?tbsv: no interchanges
    ],
)
def test_one_shot_factor_and_solve_is_gbtrf_then_gbtrs(n, kl, ku, dominant, dtype):
    """``lapack.gbsv`` (the one-shot solve: each system factored and solved in a scratch)
    on six systems (four at a time, then two) against SciPy's ?gbtrf and ?gbtrs of each,
    for ``trans`` 0, 1 and 2: the same info, solutions to rounding (the condition number
    times eps), a singular system in the batch (its info LAPACK's, the others
    unaffected); one matrix for every batch; a batch of one."""
    count, eps = 6, EPS[dtype]
    with jax.enable_x64():
        matrices = [random_band(n, kl, ku, dtype, seed) for seed in range(count)]
        if dominant:
            matrices = [A + (kl + ku + 2) * np.eye(n, dtype=dtype) for A in matrices]
        matrices[2][:, n // 2] = 0  # singular
        data = jnp.asarray(np.stack([lapack_band(A, kl, ku)[1] for A in matrices]))
        placement = lapack_band(matrices[0], kl, ku)[2]
        b = np.stack([random_band(n, n, n, dtype, 20 + s)[:, :3] for s in range(count)])
        columns = jnp.asarray(b.transpose(0, 2, 1))  # (count, k, n)

        conditions = [np.linalg.cond(A.astype(np.complex128), 1) for A in matrices]

        def check(i, got, info, b, trans):
            want, want_info = scipy_factor_and_solve(matrices[i], kl, ku, b, trans)
            assert int(info) == want_info
            if want is not None:  # info 0
                scale = conditions[i] * np.abs(want).max()
                np.testing.assert_allclose(np.asarray(got).T, want, rtol=0, atol=50 * eps * scale)

        for trans in (0, 1, 2):
            x, info = lapack.gbsv(data, columns, placement=placement, kl=kl, ku=ku, trans=trans)
            assert x.shape == columns.shape and info.shape == (count,)
            for i in range(count):
                check(i, x[i], info[i], b[i], trans)
            x, info = lapack.gbsv(data[:1], columns, placement=placement, kl=kl, ku=ku, trans=trans)
            for i in range(count):
                check(0, x[i], info[i], b[i], trans)
            x, info = lapack.gbsv(
                data[2:3], columns[2:3], placement=placement, kl=kl, ku=ku, trans=trans
            )
            check(2, x[0], info[0], b[2], trans)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex128])
@pytest.mark.parametrize("lower, upper", [(2, 2), (3, 1), (0, 2), (4, 4)])
def test_narrow_band_public_solves_agree_with_scipy(lower, upper, dtype):
    """``solve_banded``, ``lu_factor(A).solve`` (``trans`` 0, 1, 2) and a batch under
    ``vmap`` against SciPy: diagonally dominant bands (no row interchanges) and bands with
    a diagonal of the size of the rest (row interchanges, a moderate condition number)."""
    n, count, tolerance = 50, 3, 1e3 * EPS[dtype]
    with jax.enable_x64():
        for dominant in (False, True):
            A = band(n, lower, upper, batch=(count,), dtype=dtype, seed=lower + upper)
            data = np.array(A.data)
            data[..., lower, :] += 2.0 * (lower + upper + 1) if dominant else 2.0
            A = jaxdia.DiaMatrix(jnp.asarray(data), A.offsets, A.shape)
            b = right_hand_sides(A, count, seed=5)[:, :, 0]
            systems = [jaxdia.DiaMatrix(A.data[i], A.offsets, A.shape) for i in range(count)]
            batched = jax.jit(
                jax.vmap(
                    lambda data, b: LAPACK.solve_banded(
                        jaxdia.DiaMatrix(data, A.offsets, A.shape), b
                    )
                )
            )
            together = batched(A.data, b)
            for i, A_i in enumerate(systems):
                dense = np.asarray(A_i.todense())
                ab = np.stack(
                    [np.pad(np.diagonal(dense, k), (max(k, 0), 0)) for k in range(upper, -1, -1)]
                    + [np.pad(np.diagonal(dense, k), (0, -k)) for k in range(-1, -lower - 1, -1)]
                )
                want = scipy.linalg.solve_banded((lower, upper), ab, b[i])
                atol = tolerance * np.abs(want).max()
                np.testing.assert_allclose(LAPACK.solve_banded(A_i, b[i]), want, atol=atol)
                np.testing.assert_allclose(together[i], want, atol=atol)
                factor = LAPACK.lu_factor(A_i)
                for trans, op in ((1, dense.T), (2, dense.conj().T)):
                    want = np.linalg.solve(op, b[i])
                    np.testing.assert_allclose(
                        factor.solve(b[i], trans=trans), want, atol=tolerance * np.abs(want).max()
                    )


# -- gmres's Gram-Schmidt: gram_schmidt against NumPy ----------------------------------------


def numpy_gram_schmidt(V, w, j, floor):
    """The oracle, in double precision: classical Gram-Schmidt of ``w`` against rows
    ``0..j`` of ``V``, a second pass if the first left ``|w|`` below ``floor``."""
    wide = np.complex128 if np.iscomplexobj(V) else np.float64
    rows, w = np.asarray(V, wide)[: j + 1], np.asarray(w, wide)
    h = rows.conj() @ w
    w = w - rows.T @ h
    second = bool(np.linalg.norm(w) < floor)
    if second:
        correction = rows.conj() @ w
        w, h = w - rows.T @ correction, h + correction
    return w, np.r_[h, np.zeros(V.shape[0] - j - 1, wide)], np.linalg.norm(w), second


def gram_schmidt_case(n, rows, j, dtype, seed, cancel):
    """An orthonormal basis ``(rows, n)`` and a vector: random, or (``cancel``) all but
    a fraction (1e-3 in single precision, 1e-6 in double) along rows ``0..j``: one pass
    then leaves it components along them of its rounding, ``eps |w|``, 1e3-1e6 times
    ``eps`` relative to what is left; the second pass takes them out."""
    rng = np.random.default_rng(seed)
    complex_ = np.dtype(dtype).kind == "c"
    shape = (n, rows)
    random = rng.standard_normal(shape) + (1j * rng.standard_normal(shape) if complex_ else 0)
    V = np.linalg.qr(random)[0].T if n >= rows else np.eye(rows, n)
    w = rng.standard_normal(n) + (1j * rng.standard_normal(n) if complex_ else 0)
    if cancel:
        fraction = 1e-3 if np.finfo(dtype).bits == 32 else 1e-6
        w = V[: j + 1].T @ rng.uniform(1, 2, j + 1) + fraction * w
    return V.astype(dtype), w.astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
@pytest.mark.parametrize("n, rows, j", [(1, 1, 0), (2, 4, 0), (3, 4, 2), (60, 8, 0), (60, 8, 5)])
def test_gram_schmidt_is_two_passes_where_the_first_cancels(dtype, n, rows, j):
    # A batch of four: random vectors (one pass) and nearly dependent ones (two, where
    # n leaves room for a vector outside the rows), each system judged on its own floor.
    cases = [gram_schmidt_case(n, rows, j, dtype, seed, seed % 2) for seed in range(4)]
    V = np.stack([V for V, _ in cases])
    w = np.stack([w for _, w in cases])
    norms = np.linalg.norm(w.astype(np.complex128), axis=-1)
    floor = (0.3 * norms).astype(np.finfo(dtype).dtype)
    js = np.full(4, j, np.int32)
    got = jax.jit(lapack.gram_schmidt)(V, w, js, floor)
    mapped = jax.vmap(lapack.gram_schmidt)(V, w, js, floor)
    eps = np.finfo(dtype).eps
    for system in range(4):
        want_w, want_h, want_norm, _ = numpy_gram_schmidt(V[system], w[system], j, floor[system])
        scale = 50 * eps * norms[system]
        for result in (got, mapped):
            np.testing.assert_allclose(np.asarray(result[0][system]), want_w, atol=scale)
            np.testing.assert_allclose(np.asarray(result[1][system]), want_h, atol=scale)
            np.testing.assert_allclose(float(result[2][system]), want_norm, atol=scale)
            assert result[0].dtype == dtype and result[2].dtype == floor.dtype
        # What is left is orthogonal to the rows to its own rounding, cancelled or not
        # (where the rows leave room for it).
        left = np.asarray(got[0][system]).astype(np.complex128)
        along = np.abs(V[system, : j + 1].astype(np.complex128).conj() @ left).max()
        room = n > j + 1
        assert along <= 50 * eps * (np.linalg.norm(left) if room else norms[system])
    if n > rows:  # the nearly dependent vectors took a second pass, the random ones not
        seconds = [numpy_gram_schmidt(V[s], w[s], j, floor[s])[3] for s in range(4)]
        assert seconds == [False, True, False, True]


def test_gram_schmidt_rejects_a_j_outside_the_basis():
    V, w = gram_schmidt_case(10, 4, 0, np.float64, 0, False)
    for j in (-1, 4):
        with pytest.raises(Exception, match=f"gram_schmidt: j = {j} outside 0..3"):
            jax.block_until_ready(
                lapack.gram_schmidt(V, w, np.asarray(j, np.int32), np.asarray(0.0))
            )
