"""An adversarial corpus: hostile files, extreme shapes, non-finite values, careless input.

Each case once gave a wrong result, aborted the process, exhausted memory or recompiled
without bound. Extreme shapes run in a subprocess, so that an abort fails the test
instead of killing the run.
"""

import io
import subprocess
import sys
import textwrap
import warnings
import zipfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st

import jaxdia
from jaxdia import _ops
from jaxdia._kernels import xla
from jaxdia.testing import dia_matrices

from .helpers import dense_f64, examples

# -- non-finite entries: every operation agrees with SciPy / NumPy ----------------------------


@st.composite
def non_finite_matrices(draw, shape=None, max_side=7):
    """Matrices whose stored entries include inf, -inf, NaN and zeros (padding: NaN)."""
    A = draw(dia_matrices(shape=shape, max_side=max_side, dtype=np.float64))
    rng = np.random.default_rng(draw(st.integers(0, 2**31)))
    data = np.array(A.data)
    special = rng.choice([np.inf, -np.inf, np.nan, 0.0], size=data.shape)
    data = np.where(rng.random(data.shape) < 0.3, special, data)
    return jaxdia.DiaMatrix(data, A.offsets, A.shape)


def scipy_of(A):
    """The SciPy matrix with the same stored entries (padding zeroed, as SciPy ignores it)."""
    return A.to_scipy()


def stored_entries(A):
    """``(row, col, value)`` of every in-bounds slot of an unbatched matrix."""
    data = np.asarray(A.data)
    m, n = A.shape
    return [
        (j - offset, j, data[k, j])
        for k, offset in enumerate(A.offsets)
        for j in range(max(0, offset), min(n, m + offset))
    ]


@settings(max_examples=examples(12))
@given(A=non_finite_matrices(), B=non_finite_matrices())
def test_kron_of_non_finite_entries_multiplies_stored_entries(A, B):
    """Every pair of stored entries, explicit zeros included, and nothing else (SciPy's
    ``kron`` agrees where no explicit zero meets inf or NaN: it drops explicit zeros)."""
    (ma, na), (mb, nb) = A.shape, B.shape
    expected = np.zeros((ma * mb, na * nb))
    with np.errstate(invalid="ignore"):
        for i1, j1, a in stored_entries(A):
            for i2, j2, b in stored_entries(B):
                expected[i1 * mb + i2, j1 * nb + j2] += a * b
    np.testing.assert_array_equal(np.asarray(jaxdia.kron(A, B).todense()), expected)


def test_kron_inf_times_padding_is_zero():
    """A stored inf of A times a padding slot of B: 0, as SciPy and np.kron (was NaN)."""
    A = jaxdia.diags([[1.0, np.inf]], [0], (2, 2))
    B = jaxdia.diags([[1.0]], [1], (2, 2))
    for value in (np.inf, np.nan):
        A = jaxdia.diags([[1.0, value]], [0], (2, 2))
        K = np.asarray(jaxdia.kron(A, B).todense())
        assert K[1, 2] == 0
        np.testing.assert_array_equal(K, sp.kron(A.to_scipy(), B.to_scipy()).toarray())


@settings(max_examples=examples(12))
@given(A=non_finite_matrices(shape=(6, 6)), B=non_finite_matrices(shape=(6, 6)))
def test_arithmetic_of_non_finite_entries_matches_scipy(A, B):
    S, T = scipy_of(A), scipy_of(B)
    x = np.linspace(-1.0, 1.0, 6)
    with np.errstate(invalid="ignore", over="ignore"):
        cases = [
            (A @ x, S @ x),
            (x @ A, x @ S),
            ((A + B).todense(), (S + T).toarray()),
            (A.multiply(B).todense(), S.multiply(T).toarray()),
            (A.T.todense(), S.T.toarray()),
            ((A * 2.0).todense(), (S * 2.0).toarray()),
            (A.sum(axis=0), S.sum(axis=0)),
            (A.sum(axis=1), S.sum(axis=1)),
            (A.traces([-2, 0, 3]), [S.diagonal(k).sum() for k in (-2, 0, 3)]),
            (abs(A).todense(), abs(S).toarray()),
            (A.todense(), S.toarray()),
            ((A / 4.0).todense(), (S / 4.0).toarray()),
            (A.power(2).todense(), S.power(2).toarray()),
            (A.diagonal(1), S.diagonal(1)),
        ]
    for got, expected in cases:
        np.testing.assert_allclose(np.asarray(got), np.asarray(expected), rtol=1e-12)


# -- export: padding never leaves jaxdia -----------------------------------------------------


@settings(max_examples=examples(12))
@given(A=dia_matrices(max_side=8, dtype=np.float64))  # NaN in every padding slot
def test_to_scipy_and_save_npz_zero_the_padding(A):
    S = A.to_scipy()
    column_sums = np.asarray(A.sum(axis=0))
    np.testing.assert_allclose(S.sum(axis=0), column_sums, rtol=1e-12, atol=1e-12)
    assert not np.isnan(S.data).any()
    buffer = io.BytesIO()
    jaxdia.save_npz(buffer, A)
    buffer.seek(0)
    loaded = sp.load_npz(buffer)
    assert not np.isnan(loaded.data).any()
    np.testing.assert_array_equal(loaded.toarray(), dense_f64(A))


def test_offsets_beyond_int32_are_exported():
    m = 2**31 + 10
    offset = -(2**31 + 5)
    A = jaxdia.DiaMatrix(np.array([[1.0, 2.0, 3.0]]), [offset], (m, 3))
    S = A.to_scipy()
    assert S.offsets.dtype == np.int64 and int(S.offsets[0]) == offset
    np.testing.assert_array_equal(S.diagonal(offset), np.asarray(A.diagonal(offset)))
    buffer = io.BytesIO()
    jaxdia.save_npz(buffer, A)
    buffer.seek(0)
    assert jaxdia.load_npz(buffer).offsets == (offset,)


# -- integer operands reach the computation exactly (x64 off) ---------------------------------


def test_integer_array_operands_do_not_wrap_without_x64():
    big = np.array([2**40, 3, 5])
    with jax.enable_x64(False):
        A = jaxdia.diags([1.0, 4.0, 1.0], [-1, 0, 1], (3, 3))
        S = A.to_scipy().astype(np.float64)
        rtol = 1e-6  # float32 results
        np.testing.assert_allclose(np.asarray(jaxdia.eye(3) @ big), big, rtol=rtol)
        np.testing.assert_allclose(np.asarray(A @ big), S @ big, rtol=rtol)
        np.testing.assert_allclose(np.asarray(big @ A), big @ S, rtol=rtol)
        np.testing.assert_allclose(
            np.asarray(A.multiply(big).todense()), S.multiply(big).toarray(), rtol=rtol
        )
        np.testing.assert_allclose(
            np.asarray(jaxdia.solve_banded(A, big)), np.linalg.solve(S.toarray(), big), rtol=1e-5
        )


# -- power: one compiled program per formulation, not per exponent ---------------------------


def test_power_compiles_once_for_many_exponents():
    A = jaxdia.diags([1.0, 2.0, 3.0], [-1, 0, 1], (4, 4))
    A.power(7.5)  # compile the general formulation for this structure
    general = _ops._with_scalar._cache_size()
    for p in np.linspace(5.1, 40.0, 30):
        got = A.power(float(p)).data
        np.testing.assert_allclose(np.asarray(got)[1], np.float32(2.0) ** np.float32(p), rtol=1e-5)
    A.power(float("nan"))
    A.power(float("nan"))
    assert _ops._with_scalar._cache_size() == general


# -- hostile .npz files ------------------------------------------------------------------------


def npz_bytes(**arrays) -> io.BytesIO:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    return buffer


def dia_file(shape, data, offsets) -> io.BytesIO:
    return npz_bytes(
        format=np.array(b"dia"), shape=np.array(shape), data=data, offsets=np.array(offsets)
    )


def test_narrow_data_declaring_a_huge_matrix_is_refused_before_allocating():
    file = dia_file((4, 200_000_000), np.ones((1, 3)), [0])  # under 1 KB
    with pytest.raises(ValueError, match=r"would need 1,600,000,000 bytes.*max_bytes=None"):
        jaxdia.load_npz(file)
    file.seek(0)
    with pytest.raises(ValueError, match="max_bytes"):
        jaxdia.load_npz(file, max_bytes=1000)
    file.seek(0)
    assert jaxdia.load_npz(dia_file((4, 3), np.ones((1, 3)), [0]), max_bytes=100).shape == (4, 3)


def test_a_matrix_too_large_for_memory_is_a_value_error():
    with pytest.raises(ValueError, match="would need"):
        jaxdia.load_npz(dia_file((10**12, 10**12), np.ones((1, 3)), [0]))


def test_a_member_declaring_1e15_elements_is_a_value_error():
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f8", "fortran_order": False, "shape": (10**15,)}
    )
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as z:
        for key, value in [("format", np.array(b"dia")), ("shape", np.array((3, 3)))]:
            member = io.BytesIO()
            np.save(member, value)
            z.writestr(f"{key}.npy", member.getvalue())
        z.writestr("data.npy", header.getvalue() + b"\0" * 64)
        z.writestr("offsets.npy", header.getvalue())
    for max_bytes in (jaxdia.load_npz.__kwdefaults__["max_bytes"], None):
        archive.seek(0)
        with pytest.raises(ValueError, match="'data'|'offsets'"):
            jaxdia.load_npz(archive, max_bytes=max_bytes)


def test_bytes_are_not_repeated_in_the_message():
    blob = b"PK\x03\x04" + b"x" * 1000
    with pytest.raises(ValueError) as info:
        jaxdia.load_npz(io.BytesIO(blob))
    assert len(str(info.value)) < 300
    with pytest.raises(TypeError, match=r"bytes object of 1004 bytes.*io.BytesIO") as info:
        jaxdia.load_npz(blob)
    assert len(str(info.value)) < 300


def test_bad_max_bytes():
    with pytest.raises(ValueError, match="max_bytes"):
        jaxdia.load_npz(dia_file((3, 3), np.ones((1, 3)), [0]), max_bytes=-1)


# -- extreme shapes: a ValueError, never an abort ---------------------------------------------

EXTREME = textwrap.dedent(
    """
    import numpy as np, jaxdia
    results = []
    for shape in [(2**63 - 1, 3), (2**64 - 1, 3), (3, 2**62), (2**59, 3)]:
        try:
            jaxdia.DiaMatrix(np.ones((1, 3), np.float32), 0, shape)
            results.append("accepted")
        except ValueError as error:
            results.append("ValueError" if "2**59" in str(error) else str(error))
    wide = jaxdia.DiaMatrix(np.ones((1, 1024), np.float32), 0, (2**58, 1024))
    tall = jaxdia.DiaMatrix(np.ones((1, 3), np.float32), 0, (2**55, 3))
    cases = [("todense", wide.todense), ("columns", lambda: tall @ np.ones((3, 128), np.float32))]
    for name, f in cases:
        try:
            f()
            results.append(name + " ran")
        except ValueError as error:
            results.append("ValueError" if "2**63 bytes" in str(error) else str(error))
    try:  # int64 indices without x64
        jaxdia.DiaMatrix(np.ones((1, 3), np.float32), 0, (2**40, 3)).todense()
        results.append("ran")
    except ValueError as error:
        results.append("ValueError" if "jax_enable_x64" in str(error) else str(error))
    B = jaxdia.DiaMatrix(np.ones((1, 3), np.float32), 0, (2**58, 3))
    for name, f in [("A @ x", lambda: B @ np.ones(3, np.float32)), ("sum", lambda: B.sum(1))]:
        try:
            f()
            results.append(name + " ran")
        except Exception as error:  # an allocation the machine cannot satisfy
            results.append(type(error).__name__)
    print(results)
    """
)


def test_extreme_shapes_raise_instead_of_aborting():
    result = subprocess.run(
        [sys.executable, "-c", EXTREME], capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    results = eval(result.stdout.strip().splitlines()[-1])  # a list of strings we printed
    assert results[:7] == ["ValueError"] * 7, results
    assert all(not outcome.endswith("ran") for outcome in results[7:]), results


# -- compile cost does not grow with the number of diagonals ----------------------------------


@pytest.mark.parametrize("kind", ["A @ x", "A.T @ x", "X @ A", "traces", "grad"])
def test_program_size_is_independent_of_the_number_of_diagonals(kind):
    """Above a threshold the products, the transpose and the traces loop over (or gather)
    the diagonals: the lowered program of 1000 diagonals has no more operations than that of
    250 (its offsets are one constant)."""

    def program(n_diags):
        n = 1200
        offsets = tuple(range(-(n_diags // 2), n_diags - n_diags // 2))
        A = jax.eval_shape(
            lambda d: jaxdia.DiaMatrix(d, offsets, (n, n)),
            jax.ShapeDtypeStruct((n_diags, n), np.float32),
        )
        x = jax.ShapeDtypeStruct((n, 4), np.float32)
        fn = {
            "A @ x": lambda A, x: A @ x[:, 0],
            "A.T @ x": lambda A, x: A.T @ x[:, 0],
            "X @ A": lambda A, x: x.T @ A,
            "traces": lambda A, x: A.traces(list(offsets)),
            "grad": jax.grad(lambda A, x: jnp.sum(A @ x)),
        }[kind]
        return len(jax.jit(fn).lower(A, x).as_text().splitlines())  # operations, not constants

    assert program(1000) <= 1.1 * program(250)


@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("columns", [1, 3])
def test_many_diagonals_match_scipy(transpose, columns):
    rng = np.random.default_rng(0)
    for shape in [(40, 300), (300, 40), (260, 260)]:
        offsets = tuple(range(-shape[0] + 1, shape[1], 2))
        data = rng.standard_normal((len(offsets), shape[1]))
        A = jaxdia.DiaMatrix(data, offsets, shape)
        S = sp.dia_array((data, offsets), shape=shape)
        x = rng.standard_normal((shape[0] if transpose else shape[1], columns))
        got = (A.T @ x) if transpose else (A @ x)
        expected = (S.T @ x) if transpose else (S @ x)
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-10, atol=1e-10)
        assert len(offsets) > xla._MAX_UNROLLED_TERMS
        np.testing.assert_allclose(
            np.asarray(A.traces(list(offsets))), [S.diagonal(k).sum() for k in offsets], atol=1e-9
        )
        np.testing.assert_array_equal(np.asarray(A.T.todense()), S.T.toarray())


# -- jaxdia.testing with a dtype it cannot draw -----------------------------------------------


def test_testing_strategies_check_the_dtype():
    from hypothesis import find

    with pytest.raises(TypeError, match="int32 is not supported"):
        find(dia_matrices(dtype=np.int32), lambda A: True)
    with jax.enable_x64(False), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        A = find(dia_matrices(dtype=np.float64), lambda A: True)
    assert A.dtype == np.float32
    assert any("float64" in str(w.message) for w in caught)
