"""save_npz / load_npz: round trips, interoperability with SciPy both ways, bad files."""

import io

import jax
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, strategies as st

import jaxdia
from jaxdia.testing import dia_matrices

from .helpers import dense_f64, to_scipy_f64


def saved(writer, matrix, **kwargs) -> io.BytesIO:
    buffer = io.BytesIO()
    writer(buffer, matrix, **kwargs)
    buffer.seek(0)
    return buffer


def stored_dtype(dtype):
    """What a file holds: SciPy has no 16-bit floats, so they are saved as float32."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype.itemsize == 2 and dtype.kind != "c" else dtype


@given(dia_matrices(), st.booleans())
def test_round_trip_and_scipy_reads_it(A, compressed):
    B = jaxdia.load_npz(saved(jaxdia.save_npz, A, compressed=compressed))
    assert B.offsets == A.offsets and B.shape == A.shape
    assert B.dtype == stored_dtype(A.dtype)
    np.testing.assert_array_equal(dense_f64(B), dense_f64(A))
    S = sp.load_npz(saved(jaxdia.save_npz, A, compressed=compressed))
    assert isinstance(S, sp.dia_array) and S.dtype == stored_dtype(A.dtype)
    assert tuple(S.offsets) == A.offsets and S.shape == A.shape
    np.testing.assert_array_equal(S.toarray(), to_scipy_f64(A).toarray())


def test_file_layout_matches_scipy():
    A = jaxdia.diags([[1.0, 2.0], [3.0, 4.0, 5.0]], [-1, 0], shape=(3, 3))
    ours = np.load(saved(jaxdia.save_npz, A))
    theirs = np.load(saved(sp.save_npz, A.to_scipy()))
    assert sorted(ours.files) == sorted(theirs.files)
    for key in theirs.files:
        assert ours[key].dtype == theirs[key].dtype, key
        np.testing.assert_array_equal(ours[key], theirs[key])


@pytest.mark.parametrize("kind", [sp.dia_array, sp.dia_matrix])
def test_loads_what_scipy_saves(kind):
    # Unsorted offsets, one outside the matrix, data wider than the matrix: SciPy keeps
    # all of it; a DiaMatrix is canonical.
    data = np.arange(1.0, 19.0).reshape(3, 6) * (1 + 1j)
    S = kind((data, [1, -5, -1]), shape=(4, 5))
    A = jaxdia.load_npz(saved(sp.save_npz, S))
    assert A.offsets == (-1, 1) and A.dtype == np.complex128
    np.testing.assert_array_equal(A.todense(), S.toarray())


def test_integer_files_become_float_and_dtype_argument():
    S = sp.dia_array((np.array([[1, 2, 3]]), [0]), shape=(3, 3))
    assert jaxdia.load_npz(saved(sp.save_npz, S)).dtype == np.float64  # x64 is on in tests
    A = jaxdia.load_npz(saved(sp.save_npz, S), dtype=np.complex64)
    assert A.dtype == np.complex64
    np.testing.assert_array_equal(A.todense(), S.toarray())
    with jax.enable_x64(False), pytest.warns(UserWarning, match="float64 requested in load_npz"):
        assert jaxdia.load_npz(saved(sp.save_npz, S), dtype=np.float64).dtype == np.float32


def test_foreign_byte_order_loads_and_complex_is_not_cast_to_real():
    """A file written on a big-endian machine loads; a real ``dtype`` for complex data is
    refused (as ``astype``), not silently stripped of its imaginary part."""
    S = sp.dia_array((np.array([[1.0, 2.0, 3.0]], ">f8"), [0]), shape=(3, 3))
    np.testing.assert_array_equal(
        jaxdia.load_npz(saved(sp.save_npz, S)).todense(), np.eye(3) * [1, 2, 3]
    )
    C = sp.dia_array((np.array([[1j, 2.0, 3.0]]), [0]), shape=(3, 3))
    with pytest.raises(TypeError, match="complex data .*discard the imaginary part"):
        jaxdia.load_npz(saved(sp.save_npz, C), dtype=np.float32)


def test_paths(tmp_path):
    A = jaxdia.eye(4, k=-1)
    jaxdia.save_npz(str(tmp_path / "matrix"), A)  # ".npz" appended, as NumPy and SciPy do
    assert (tmp_path / "matrix.npz").exists()
    assert jaxdia.load_npz(tmp_path / "matrix.npz").offsets == (-1,)
    with pytest.raises(FileNotFoundError):
        jaxdia.load_npz(tmp_path / "missing.npz")


def test_save_errors():
    with pytest.raises(TypeError, match="matrix must be a jaxdia.DiaMatrix, got dia_array"):
        jaxdia.save_npz(io.BytesIO(), sp.eye_array(3, format="dia"))
    batched = jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3))
    with pytest.raises(ValueError, match=r"batch shape \(2,\)"):
        jaxdia.save_npz(io.BytesIO(), batched)

    def save_traced(A):
        jaxdia.save_npz(io.BytesIO(), A)
        return A.data

    with pytest.raises(ValueError, match="needs concrete data"):
        jax.jit(save_traced)(jaxdia.eye(3))


def npz(**arrays) -> io.BytesIO:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    buffer.seek(0)
    return buffer


GOOD = dict(
    format=np.array(b"dia"),
    shape=np.array([3, 3]),
    data=np.ones((1, 3)),
    offsets=np.array([0], np.int32),
)


@pytest.mark.parametrize(
    "contents, message",
    [
        (dict(GOOD, format=np.array(b"csr")), r"holds a 'csr' matrix, not 'dia'.*from_scipy"),
        ({k: v for k, v in GOOD.items() if k != "format"}, "does not hold a sparse matrix"),
        (
            {k: v for k, v in GOOD.items() if k != "offsets"},
            r"lacks the DIA key\(s\) \['offsets'\]",
        ),
        (dict(GOOD, format=np.array([1, 2])), "'format' entry must be a string"),
        (dict(GOOD, shape=np.array([3, 3, 3])), "'shape' must be two non-negative ints"),
        (dict(GOOD, shape=np.array([3.0, 3.0])), "'shape' must be two non-negative ints"),
        (dict(GOOD, shape=np.array([-3, 3])), "'shape' must be two non-negative ints"),
        (dict(GOOD, offsets=np.array([[0]])), "'offsets' must be a 1-D integer array"),
        (dict(GOOD, offsets=np.array([0.0])), "'offsets' must be a 1-D integer array"),
        (dict(GOOD, data=np.ones(3)), r"'data' must have shape \(len\(offsets\), width\)"),
        (dict(GOOD, data=np.ones((2, 3))), r"'data' must have shape \(len\(offsets\), width\)"),
        (dict(GOOD, data=np.array([[None, 1, 2]], dtype=object)), "malformed array.*pickle"),
        (dict(GOOD, offsets=np.array([0, 0], np.int32), data=np.ones((2, 3))), "duplicate"),
    ],
)
def test_load_rejects_bad_files(contents, message):
    with pytest.raises(ValueError, match=message):
        jaxdia.load_npz(npz(**contents))


def test_load_rejects_non_npz_and_unsupported_data():
    with pytest.raises(ValueError, match="is not a valid .npz file"):
        jaxdia.load_npz(io.BytesIO(b"PK\x03\x04 not really a zip file"))
    with pytest.raises(ValueError, match="is not a valid .npz file"):
        jaxdia.load_npz(io.BytesIO(b"\x80\x04 pickled?"))
    corrupt = bytearray(saved(jaxdia.save_npz, jaxdia.eye(50)).getvalue())
    corrupt[60:90] = bytes(30)  # inside the first member's compressed bytes
    with pytest.raises(ValueError, match="malformed array|not a valid .npz file"):
        jaxdia.load_npz(io.BytesIO(bytes(corrupt)))
    single = io.BytesIO()
    np.save(single, np.ones(3))
    single.seek(0)
    with pytest.raises(ValueError, match="single .npy array"):
        jaxdia.load_npz(single)
    with pytest.raises(TypeError, match="data must be a numeric array.*<U1"):
        jaxdia.load_npz(npz(**dict(GOOD, data=np.array([["a", "b", "c"]]))))
