"""DiaMatrix: canonical form, properties, conversions, pytree behaviour, validation."""

import copy
import pickle

import jax
import jax.numpy as jnp
import jax.scipy.sparse.linalg as jsl
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings, strategies as st
from jax import lax
from jax.experimental import sparse as jsparse

import jaxdia
from jaxdia.testing import dia_matrices, dtypes, offsets, shapes

from .helpers import dense_f64, examples, in_bounds_mask, poisson, rhs


def assert_same_matrix(A, B):
    """Equal offsets, shape, and equal in-bounds data (padding ignored)."""
    assert A.offsets == B.offsets and A.shape == B.shape
    mask = in_bounds_mask(A)
    np.testing.assert_array_equal(np.asarray(A.data)[..., mask], np.asarray(B.data)[..., mask])


# -- canonical form ---------------------------------------------------------------------------


def test_offsets_sorted_and_data_permuted():
    data = np.arange(12.0).reshape(3, 4)
    A = jaxdia.DiaMatrix(data, (2, -1, 0), (4, 4))
    assert A.offsets == (-1, 0, 2)
    np.testing.assert_array_equal(A.data, data[[1, 2, 0]])
    np.testing.assert_array_equal(
        A.todense(), sp.dia_array((data, [2, -1, 0]), shape=(4, 4)).toarray()
    )


@pytest.mark.parametrize("width", [2, 5, 9])
def test_width_padded_or_truncated_as_scipy_reads_it(width):
    data = np.arange(1.0, 2 * width + 1).reshape(2, width)
    A = jaxdia.DiaMatrix(data, (0, 1), (5, 5))
    assert A.data.shape == (2, 5)
    np.testing.assert_array_equal(A.todense(), sp.dia_array((data, [0, 1]), shape=(5, 5)).toarray())


def test_offsets_outside_matrix_are_dropped():
    data = np.ones((4, 3))
    A = jaxdia.DiaMatrix(data, (-4, 3, 0, -2), (4, 3))
    assert A.offsets == (-2, 0)
    assert A.data.shape == (2, 3)


@pytest.mark.parametrize(
    "offsets, expected",
    [
        (np.array([1, 0]), (0, 1)),
        ([np.int64(1), np.int32(0)], (0, 1)),
        (np.int16(1), (1,)),
        (1, (1,)),
        (jnp.array([0, 1]), (0, 1)),
    ],
)
def test_offsets_accepted_forms(offsets, expected):
    A = jaxdia.DiaMatrix(np.ones((len(expected), 3)), offsets, (3, 3))
    assert A.offsets == expected
    assert all(type(k) is int for k in A.offsets)


@given(dia_matrices(batch_shape=None))
def test_properties(A):
    assert A.ndim == 2
    assert A.dtype == A.data.dtype
    assert A.n_diags == len(A.offsets) == A.data.shape[-2]
    assert A.data.shape == (*A.batch_shape, A.n_diags, A.shape[1])
    assert list(A.offsets) == sorted(set(A.offsets))
    if not A.batch_shape:
        assert A.nnz == A.to_scipy().nnz
    assert repr(A).startswith(f"DiaMatrix(shape={A.shape}, dtype={A.dtype.name}")


# -- conversions ------------------------------------------------------------------------------


@given(dia_matrices(padding="zero"))
def test_scipy_round_trip_is_lossless(A):
    S = A.to_scipy()
    assert isinstance(S, sp.dia_array)
    B = jaxdia.DiaMatrix.from_scipy(S)
    if A.dtype.itemsize == 2:  # SciPy has no 16-bit floats
        assert S.dtype == np.float32
        B = jaxdia.DiaMatrix(B.data.astype(A.dtype), B.offsets, B.shape)
    assert B.dtype == A.dtype
    assert_same_matrix(A, B)
    np.testing.assert_array_equal(S.toarray(), dense_f64(A).astype(S.dtype))


@pytest.mark.parametrize("fmt", ["csr", "csc", "coo", "lil", "dok", "bsr", "dia"])
@pytest.mark.parametrize("matrix", [False, True])
def test_from_scipy_every_format(fmt, matrix):
    S = sp.random_array((9, 7), density=0.3, format=fmt, rng=1, dtype=np.float64)
    if matrix:  # the spmatrix flavour of the same format
        S = getattr(sp, f"{fmt}_matrix")(S)
    A = jaxdia.DiaMatrix.from_scipy(S)
    np.testing.assert_array_equal(A.todense(), S.toarray())
    assert A.dtype == np.float64


def test_from_scipy_keeps_explicit_zero_diagonals():
    S = sp.dia_matrix((np.array([[1.0, 2, 3], [0, 0, 0]]), [0, 1]), shape=(3, 3))
    A = jaxdia.DiaMatrix.from_scipy(S)
    assert A.offsets == (0, 1)
    assert A.nnz == S.nnz == 5
    back = sp.dia_matrix(A.to_scipy())
    assert isinstance(back, sp.dia_matrix)
    np.testing.assert_array_equal(back.offsets, S.offsets)
    np.testing.assert_array_equal(back.data, S.data)


def test_from_scipy_sums_duplicate_coo_entries():
    S = sp.coo_array((np.array([1.0, 2.0]), (np.array([0, 0]), np.array([1, 1]))), shape=(2, 2))
    np.testing.assert_array_equal(jaxdia.DiaMatrix.from_scipy(S).todense(), [[0, 3], [0, 0]])


def test_from_scipy_float64_without_x64_follows_jax_rule():
    """float32, as JAX narrows without x64, with a warning (no silent precision loss)."""
    S = sp.eye_array(3, format="dia")
    with jax.enable_x64(False), pytest.warns(UserWarning, match="from_scipy: float64 input"):
        A = jaxdia.DiaMatrix.from_scipy(S)
        assert A.dtype == np.float32
    np.testing.assert_array_equal(A.todense(), S.toarray())


@given(dia_matrices(batch_shape=None))
def test_todense_matches_numpy_oracle(A):
    np.testing.assert_array_equal(np.asarray(A.todense()).astype(dense_f64(A).dtype), dense_f64(A))


@given(shapes(max_side=9), dtypes(), st.integers(0, 2**32 - 1))
def test_from_dense_round_trip(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    M = rng.standard_normal(shape) * (rng.random(shape) < 0.3)
    M = M.astype(dtype)
    A = jaxdia.DiaMatrix.from_dense(M)
    expected = sorted({j - i for i, j in zip(*np.nonzero(M))})
    assert list(A.offsets) == expected
    np.testing.assert_array_equal(A.todense(), M)


def test_from_dense_batched_uses_union_of_offsets():
    M = np.zeros((2, 3, 3))
    M[0, 0, 1] = 1.0
    M[1, 2, 0] = 2.0
    A = jaxdia.DiaMatrix.from_dense(M)
    assert A.offsets == (-2, 1) and A.batch_shape == (2,)
    np.testing.assert_array_equal(A.todense(), M)


def test_from_dense_under_jit_needs_offsets():
    M = jnp.asarray(np.triu(np.ones((4, 4))))
    f = jax.jit(lambda M: jaxdia.DiaMatrix.from_dense(M, offsets=(0, 1, 2, 3)).todense())
    np.testing.assert_array_equal(f(M), M)
    with pytest.raises(ValueError, match="pass the offsets explicitly"):
        jax.jit(lambda M: jaxdia.DiaMatrix.from_dense(M))(M)


def test_from_dense_explicit_offsets_drop_other_diagonals():
    M = np.arange(1.0, 10.0).reshape(3, 3)
    A = jaxdia.DiaMatrix.from_dense(M, offsets=[0, 5])
    assert A.offsets == (0,)
    np.testing.assert_array_equal(A.todense(), np.diag(np.diag(M)))


@settings(max_examples=examples(8))  # every example a new shape: BCOO's eager operations compile
@given(dia_matrices(padding="nan"))
def test_bcoo_round_trip(A):
    B = A.to_bcoo()
    assert isinstance(B, jsparse.BCOO)
    assert B.nse == A.nnz
    np.testing.assert_array_equal(B.todense(), A.todense())
    assert_same_matrix(jaxdia.DiaMatrix.from_bcoo(B), jaxdia.DiaMatrix.from_bcoo(B, A.offsets))
    np.testing.assert_array_equal(jaxdia.DiaMatrix.from_bcoo(B, A.offsets).todense(), A.todense())


def test_bcoo_batched_and_jit():
    A = jaxdia.DiaMatrix(np.arange(12.0).reshape(2, 2, 3), (0, 1), (3, 3))
    np.testing.assert_array_equal(A.to_bcoo().todense(), A.todense())
    B = jsparse.BCOO.fromdense(np.asarray(A.todense()[0]))
    f = jax.jit(lambda B: jaxdia.DiaMatrix.from_bcoo(B, offsets=(0, 1)).todense())
    np.testing.assert_array_equal(f(B), A.todense()[0])
    with pytest.raises(ValueError, match="offsets"):
        jax.jit(lambda B: jaxdia.DiaMatrix.from_bcoo(B).todense())(B)
    with pytest.raises(ValueError, match=r"diagonals \[1\]"):
        jaxdia.DiaMatrix.from_bcoo(B, offsets=(0,))


@pytest.mark.parametrize("index_dtype", [np.uint8, np.uint16, np.uint32, np.int8])
def test_from_bcoo_with_narrow_or_unsigned_indices(index_dtype):
    """cols - rows of unsigned indices wrapped around: sub-diagonals were dropped (offsets
    found), rejected (offsets given) or an OverflowError (under jit)."""
    M = np.diag([1.0, 2.0, 3.0, 4.0]) + np.diag([5.0, 6.0, 7.0], -1) + np.diag([8.0, 9.0], 2)
    B = jsparse.BCOO.fromdense(jnp.asarray(M), index_dtype=index_dtype)
    offsets = (-1, 0, 2)
    for A in (
        jaxdia.DiaMatrix.from_bcoo(B),
        jaxdia.DiaMatrix.from_bcoo(B, offsets=offsets),
        jax.jit(lambda B: jaxdia.DiaMatrix.from_bcoo(B, offsets=offsets))(B),
    ):
        assert A.offsets == offsets
        np.testing.assert_array_equal(A.todense(), M)


def test_dtypes_supported_and_rejected():
    for dtype in (jnp.bfloat16, np.float16, np.float32, np.float64, np.complex64, np.complex128):
        assert jaxdia.DiaMatrix(np.ones((1, 2), dtype), 0, (2, 2)).dtype == dtype
    # Integer and bool matrices convert as SciPy computes with them: to the default float.
    for dtype in (np.int32, np.int64, np.bool_, np.uint8):
        A = jaxdia.DiaMatrix(np.ones((1, 2), dtype), 0, (2, 2))
        assert A.dtype == jnp.float64  # x64 is on in the suite
        np.testing.assert_array_equal(A.todense(), np.eye(2))
    with pytest.raises(TypeError, match="datetime64"):
        jaxdia.DiaMatrix(np.ones((1, 2), "datetime64[s]"), 0, (2, 2))
    for dtype in (np.int64, np.int8, np.bool_):
        S = sp.eye_array(2, dtype=dtype)
        A = jaxdia.DiaMatrix.from_scipy(S)
        assert A.dtype == jnp.float64  # x64 is on in the suite
        np.testing.assert_array_equal(A.todense(), np.eye(2))
    wide = np.dtype(np.longdouble)
    if wide.itemsize > 8:  # x86's 80-bit long double: JAX has none, and says what to do
        message = r"no long double.*astype\(np.float64\)"
        with pytest.raises(TypeError, match=message):
            jaxdia.DiaMatrix.from_dense(np.eye(2, dtype=wide))
        with pytest.raises(TypeError, match=message):
            jaxdia.DiaMatrix.from_scipy(sp.eye_array(2, dtype=wide))


def test_to_scipy_returns_a_writable_copy():
    """SciPy's in-place operations work on the result, and do not reach the matrix."""
    A = jaxdia.eye(3)
    for dtype in (np.float32, np.float16):
        S = A.astype(dtype).to_scipy()
        S *= 2
        S.setdiag(5.0, k=1)
        np.testing.assert_array_equal(S.toarray(), 2 * np.eye(3) + 5 * np.eye(3, k=1))
    np.testing.assert_array_equal(A.todense(), np.eye(3))


def test_from_bcoo_with_no_offset_left_is_empty():
    zeros = jsparse.BCOO.fromdense(jnp.zeros((3, 3)), nse=2)  # padding indices only
    eye = jsparse.BCOO.fromdense(jnp.eye(3))
    for A in (
        jaxdia.DiaMatrix.from_bcoo(zeros),
        jaxdia.DiaMatrix.from_bcoo(zeros, offsets=[5, -7]),  # no diagonal inside 3 x 3
        jax.jit(lambda B: jaxdia.DiaMatrix.from_bcoo(B, offsets=()))(eye),
    ):
        assert A.offsets == () and A.shape == (3, 3)
        np.testing.assert_array_equal(A.todense(), np.zeros((3, 3)))


def test_from_dense_points_scipy_matrices_to_from_scipy():
    with pytest.raises(TypeError, match=r"got scipy.sparse.dia_array; .*from_scipy"):
        jaxdia.DiaMatrix.from_dense(sp.eye_array(3, format="dia"))


def test_scipy_signatures_and_foreign_byte_order():
    """SciPy's arguments that have a meaning here are accepted: an ndarray shape,
    ``astype(copy=...)``, ``toarray(order=...)``; data in either byte order."""
    A = jaxdia.DiaMatrix(np.ones((1, 3), ">f8"), [0], np.array([3, 3]))
    assert A.shape == (3, 3) and A.dtype == np.float64
    np.testing.assert_array_equal(A.toarray(order="C"), np.eye(3))
    assert A.astype(np.float32, copy=False).dtype == np.float32
    dense = np.eye(3, k=1).astype(">f4")
    np.testing.assert_array_equal(jaxdia.DiaMatrix.from_dense(dense).todense(), dense)
    with pytest.raises(ValueError, match="order must be None or 'C'"):
        A.todense(order="F")
    with pytest.raises(ValueError, match="out must be None"):
        A.toarray(out=np.zeros((3, 3)))
    with pytest.raises(ValueError, match=r"axes must be None or \(1, 0\).*got 5"):
        A.transpose(5)


# -- pytree -----------------------------------------------------------------------------------


def laplacian(n, scale=1.0):
    return jaxdia.diags([scale, -2.0 * scale, scale], offsets=[-1, 0, 1], shape=(n, n))


def test_pytree_flatten_unflatten():
    A = laplacian(4)
    leaves, treedef = jax.tree.flatten(A)
    assert len(leaves) == 1 and leaves[0] is A.data
    B = jax.tree.unflatten(treedef, leaves)
    assert isinstance(B, jaxdia.DiaMatrix) and B.offsets == A.offsets and B.shape == A.shape
    doubled = jax.tree.map(lambda d: 2 * d, A)
    np.testing.assert_array_equal(doubled.todense(), 2 * A.todense())


def test_key_paths_name_the_data():
    """Key paths (tree_flatten_with_path, JAX's errors about traced arguments) say .data."""
    ((path, leaf),) = jax.tree_util.tree_flatten_with_path({"A": laplacian(3)})[0]
    assert jax.tree_util.keystr(path) == "['A'].data" and leaf.shape == (3, 3)
    with pytest.raises(jax.errors.ConcretizationTypeError, match=r"argument A\.data"):
        jax.jit(lambda A: float(A.data[0, 0]))(laplacian(3))


def test_abstract_matrices_for_lower_and_export():
    """The idiom the constructor's error gives for a ShapeDtypeStruct builds a matrix spec
    that lowers and compiles; a serialized jax.export round trip keeps the DiaMatrix."""
    spec = jax.ShapeDtypeStruct((3, 8), jnp.float32)
    with pytest.raises(TypeError, match=r"ShapeDtypeStruct.*jax\.eval_shape\(lambda d"):
        jaxdia.DiaMatrix(spec, (-1, 0, 1), (8, 8))
    A_spec = jax.eval_shape(lambda d: jaxdia.DiaMatrix(d, (-1, 0, 1), (8, 8)), spec)
    x_spec = jax.ShapeDtypeStruct((8,), jnp.float32)
    A, x = laplacian(8).astype(jnp.float32), np.arange(8.0, dtype=np.float32)
    compiled = jax.jit(lambda A, x: A @ x).lower(A_spec, x_spec).compile()
    np.testing.assert_allclose(compiled(A, x), A.todense() @ x)

    exported = jax.export.export(jax.jit(lambda A, x: (A @ x, A.T * 2)))(A_spec, x_spec)
    y, B = jax.export.deserialize(exported.serialize()).call(A, x)
    np.testing.assert_allclose(y, A.todense() @ x)
    assert isinstance(B, jaxdia.DiaMatrix) and (B.offsets, B.shape) == ((-1, 0, 1), (8, 8))
    np.testing.assert_array_equal(B.todense(), 2 * A.todense().T)


def test_jit_argument_and_result_no_recompile():
    traces = []

    @jax.jit
    def f(A):
        traces.append(1)
        return jax.tree.map(lambda d: d + 1, A)

    A = laplacian(5)
    out = f(A)
    assert isinstance(out, jaxdia.DiaMatrix) and out.offsets == A.offsets
    np.testing.assert_array_equal(out.data, A.data + 1)
    f(laplacian(5, scale=3.0))  # same offsets and shape: cached
    f(jaxdia.DiaMatrix(np.ones((3, 5)), np.array([1, -1, 0]), (5, 5)))  # equal after canonical
    assert len(traces) == 1
    f(jaxdia.diags([1.0, 1.0], offsets=[0, 2], shape=(5, 5)))  # other offsets: retrace
    assert len(traces) == 2


def test_vmap_over_batched_data():
    A = jaxdia.DiaMatrix(np.arange(24.0).reshape(4, 2, 3), (0, 1), (3, 3))
    assert A.batch_shape == (4,)
    dense = jax.vmap(lambda A: A.todense())(A)
    np.testing.assert_array_equal(dense, A.todense())
    out = jax.vmap(lambda s: jax.tree.map(lambda d: s * d, laplacian(3)))(jnp.arange(4.0))
    assert isinstance(out, jaxdia.DiaMatrix) and out.batch_shape == (4,)
    np.testing.assert_array_equal(out.todense()[2], 2 * laplacian(3).todense())


def test_cond_scan_while_loop():
    A, B = laplacian(4), laplacian(4, scale=2.0)
    pick = jax.jit(lambda p, A, B: lax.cond(p, lambda: A, lambda: B))
    np.testing.assert_array_equal(pick(False, A, B).todense(), B.todense())

    def step(carry, _):
        return jax.tree.map(lambda d: 2 * d, carry), carry.data.sum()

    final, sums = lax.scan(step, A, length=3)
    np.testing.assert_array_equal(final.todense(), 8 * A.todense())
    np.testing.assert_allclose(sums, A.data.sum() * np.array([1, 2, 4]))

    looped = lax.while_loop(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, jax.tree.map(lambda d: d + 1, c[1])), (0, A)
    )[1]
    np.testing.assert_array_equal(looped.data, A.data + 3)


def test_immutable():
    A = laplacian(3)
    with pytest.raises(AttributeError, match="immutable"):
        A.offsets = (0,)


def test_pickle_and_copy():
    """pickle, copy.copy and copy.deepcopy (of a matrix inside a container too) give an
    equal matrix; the default protocol failed on the immutable slots."""
    A = jaxdia.DiaMatrix(np.arange(12.0).reshape(2, 2, 3), (0, -1), (3, 3))
    copies = [
        pickle.loads(pickle.dumps(A)),
        copy.copy(A),
        copy.deepcopy({"A": A})["A"],
    ]
    for B in copies:
        assert type(B) is jaxdia.DiaMatrix and (B.offsets, B.shape) == (A.offsets, A.shape)
        np.testing.assert_array_equal(B.data, A.data)


# -- validation -------------------------------------------------------------------------------

_UNBATCHED = jaxdia.DiaMatrix(np.arange(18.0).reshape(3, 6), (-2, 0, 1), (6, 6))

# Every operation that reads data, as a function of one matrix.
_READS_DATA = {
    "A @ x": lambda A: A @ jnp.ones(6),
    "x @ A": lambda A: jnp.ones(6) @ A,
    "A.dot": lambda A: A.dot(jnp.ones(6)),
    "matmul": lambda A: jaxdia.matmul(A, jnp.ones(6)),
    "A @ A": lambda A: A @ _UNBATCHED,
    "todense": lambda A: A.todense(),
    "to_bcoo": lambda A: A.to_bcoo(),
    "traces": lambda A: A.traces(2),
    "trace": lambda A: A.trace(),
    "diagonal": lambda A: A.diagonal(1),
    "jaxdia.traces": lambda A: jaxdia.traces(A, 2),
    "T": lambda A: A.T,
    "H": lambda A: A.H,
    "conj": lambda A: A.conj(),
    "real": lambda A: A.real,
    "imag": lambda A: A.imag,
    "astype": lambda A: A.astype(jnp.bfloat16),
    "neg": lambda A: -A,
    "abs": lambda A: abs(A),
    "A + A": lambda A: _UNBATCHED + A,
    "A - A": lambda A: A - _UNBATCHED,
    "A * s": lambda A: 2.0 * A,
    "A / s": lambda A: A / 2.0,
    "A ** p": lambda A: A**2,
    "multiply": lambda A: A.multiply(jnp.ones(6)),
    "power": lambda A: A.power(3),
    "sum": lambda A: A.sum(axis=0),
    "mean": lambda A: A.mean(),
    "count_nonzero": lambda A: A.count_nonzero(),
    "with_offsets": lambda A: A.with_offsets((-2, 0, 1, 3)),
    "with_diagonal": lambda A: A.with_diagonal(1.0, 2),
    "kron": lambda A: jaxdia.kron(A, _UNBATCHED),
    "align": lambda A: jaxdia.align(_UNBATCHED, A),
    "jacobi": lambda A: jaxdia.jacobi(A),
    "solve_banded": lambda A: jaxdia.solve_banded(A, jnp.ones(6)),
}


@pytest.mark.parametrize("operation", _READS_DATA.values(), ids=_READS_DATA.keys())
def test_vmap_over_a_matrix_without_batch_dims_is_an_error(operation):
    """vmap maps the leading dims of data; over an unbatched matrix they are the diagonals,
    and each mapped call gets data of shape (6,). Many operations returned plausible
    shapes holding wrong values; every one must say what went wrong instead."""
    np.asarray(jax.tree.leaves(operation(_UNBATCHED))[0])  # fine without vmap
    with pytest.raises(ValueError, match=r"data has shape \(6,\).*\(\.\.\., 3, 6\).*in_axes=None"):
        jax.vmap(operation)(_UNBATCHED)


def test_batch_axis_behind_the_diagonals_is_an_error():
    """out_axes=1 on a DiaMatrix result puts its batch axis behind the diagonals."""
    batch = jaxdia.DiaMatrix(np.ones((4, 3, 6)), (-2, 0, 1), (6, 6))
    moved = jax.vmap(lambda A: A * 2.0, out_axes=1)(batch)
    assert repr(moved) == (
        "DiaMatrix(shape=(6, 6), offsets=(-2, 0, 1), data of shape (3, 4, 6): not (..., 3, 6))"
    )
    with pytest.raises(ValueError, match=r"data has shape \(3, 4, 6\).*out_axes other than 0"):
        moved.todense()
    with pytest.raises(ValueError, match=r"save_npz: matrix: the DiaMatrix's data has shape"):
        jaxdia.save_npz("unused.npz", moved)


def test_repr_of_pytrees_holding_other_leaves():
    """jax.hessian with respect to a matrix nests a DiaMatrix in the data of another."""
    A = laplacian(3)
    hessian = jax.hessian(lambda A: jnp.sum((A @ jnp.ones(3)) ** 2))(A)
    assert isinstance(hessian.data, jaxdia.DiaMatrix)
    assert repr(hessian).startswith("DiaMatrix(shape=(3, 3), offsets=(-1, 0, 1), data=DiaMatrix(")


def test_to_scipy_under_jit_says_it_needs_concrete_data():
    with pytest.raises(ValueError, match="to_scipy needs concrete data"):
        jax.jit(lambda A: A.to_scipy().nnz)(laplacian(3))


@pytest.mark.parametrize(
    "data, offsets, shape, error, match",
    [
        (np.ones((2, 3)), (0, 0), (3, 3), ValueError, "offset array contains duplicate values"),
        (np.ones(3), (0,), (3, 3), ValueError, r"rank >= 2"),
        (np.ones((2, 3)), (0,), (3, 3), ValueError, "2 diagonals .* but 1 offsets"),
        (np.ones((1, 3)), (0.5,), (3, 3), TypeError, "offsets must be integers, got float"),
        (np.ones((1, 3)), (True,), (3, 3), TypeError, "offsets must be integers, got bool"),
        (np.ones((1, 3)), ("0",), (3, 3), TypeError, "offsets must be integers, got str"),
        (np.ones((1, 3)), None, (3, 3), TypeError, "offsets must be an int or a sequence"),
        (np.ones((1, 3)), "0", (3, 3), TypeError, "offsets must be an int or a sequence"),
        (np.ones((1, 3)), np.array([0.0]), (3, 3), TypeError, "dtype float64"),
        (np.ones((1, 3)), np.array([[0]]), (3, 3), ValueError, "1-D"),
        (np.ones((1, 3)), (0,), (3, -1), ValueError, "non-negative"),
        (np.ones((1, 3)), (0,), (3.0, 3), TypeError, "non-negative ints"),
        (np.ones((1, 3)), (0,), (3,), ValueError, "pair"),
        (np.ones((1, 3)), (0,), 3, ValueError, "pair"),
        ([["a", "b"]], (0,), (2, 2), TypeError, "numeric"),
        (np.empty((1, 2), object), (0,), (2, 2), TypeError, "numeric"),
    ],
)
def test_validation_errors(data, offsets, shape, error, match):
    with pytest.raises(error, match=match):
        jaxdia.DiaMatrix(data, offsets, shape)


def test_traced_offsets_error_explains_static():
    with pytest.raises(TypeError, match="static Python ints.*pytree aux data"):
        jax.jit(lambda k: jaxdia.DiaMatrix(jnp.ones((1, 3)), k, (3, 3)))(jnp.array([0]))
    with pytest.raises(TypeError, match="static Python ints"):
        jax.jit(lambda k: jaxdia.DiaMatrix(jnp.ones((1, 3)), [k], (3, 3)))(0)


def test_conversion_errors():
    with pytest.raises(TypeError, match="scipy.sparse"):
        jaxdia.DiaMatrix.from_scipy(np.eye(3))
    with pytest.raises(ValueError, match="batch shape"):
        jaxdia.DiaMatrix(np.ones((2, 1, 3)), 0, (3, 3)).to_scipy()
    with pytest.raises(ValueError, match=r"\(\.\.\., m, n\)"):
        jaxdia.DiaMatrix.from_dense(np.ones(3))
    with pytest.raises(TypeError, match="BCOO"):
        jaxdia.DiaMatrix.from_bcoo(sp.eye_array(2))


@pytest.mark.parametrize("offsets", [(0, 1), (1, 0)])
def test_host_data_is_copied(offsets):
    """A DiaMatrix built from NumPy data, or from a SciPy matrix, does not change when the
    caller later writes into that array (on CPU a transfer may alias a NumPy buffer)."""
    n = 1 << 16  # large and page-aligned, where a transfer could alias instead of copy
    data = np.ones((2, n), np.float32)
    S = sp.dia_array((np.ones((2, n), np.float32), offsets), shape=(n, n))
    A, B = jaxdia.DiaMatrix(data, offsets, (n, n)), jaxdia.DiaMatrix.from_scipy(S)
    data[:] = 5.0
    S.data[:] = 7.0
    assert float(A.data.max()) == float(B.data.max()) == 1.0


@pytest.mark.parametrize("convert", [np.asarray, np.array, jnp.asarray, jnp.array])
def test_no_implicit_dense_conversion(convert):
    """NumPy and JAX conversions raise a TypeError pointing to ``toarray``, instead of a 0-d
    object array (NumPy) or an unrelated error from inside NumPy (JAX)."""
    with pytest.raises(TypeError, match=r"does not convert.*A\.toarray\(\)"):
        convert(jaxdia.eye(3))


@given(shapes(), st.data())
def test_offsets_strategy_in_range(shape, data):
    drawn = data.draw(offsets(shape))
    assert len(set(drawn)) == len(drawn)
    assert all(-shape[0] < k < shape[1] for k in drawn)


def test_operator_forms_agree():
    """A itself, ``lambda v: A @ v`` and ``functools.partial(jaxdia.matmul, A)`` all work."""
    S = poisson(8, 2)
    A, b = jaxdia.DiaMatrix.from_scipy(S), rhs(64)
    results = [
        jsl.cg(operator, b, tol=1e-12)[0]
        for operator in (A, lambda v: A @ v, jax.tree_util.Partial(jaxdia.matmul, A))
    ]
    for x in results[1:]:
        np.testing.assert_allclose(x, results[0], rtol=1e-12, atol=1e-12)
