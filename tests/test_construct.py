"""jaxdia.diags, jaxdia.eye and jaxdia.kron against SciPy's diags_array, eye_array and kron."""

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, strategies as st

import jaxdia
from jaxdia import _construct
from jaxdia.testing import offsets, shapes

from .helpers import program_lines


@st.composite
def diags_arguments(draw):
    shape = draw(shapes(max_side=8, min_side=1))
    drawn = draw(offsets(shape, max_diags=4))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, n = shape
    diagonals = []
    for k in drawn:
        length = min(m + k, n - k, min(m, n))
        size = draw(st.sampled_from([1, length, length + 2]))  # broadcast, exact, truncated
        diagonals.append(rng.standard_normal(size))
    return diagonals, list(drawn), shape


@given(diags_arguments())
def test_diags_matches_scipy(arguments):
    diagonals, drawn, shape = arguments
    if drawn:
        expected = sp.diags_array(diagonals, offsets=drawn, shape=shape, dtype=None).toarray()
    else:  # SciPy refuses an empty list of diagonals; jaxdia gives the zero matrix
        expected = np.zeros(shape)
    A = jaxdia.diags(diagonals, offsets=drawn, shape=shape)
    assert A.dtype == np.float64
    np.testing.assert_array_equal(A.todense(), expected)


def test_diags_shape_inference_and_scalar_offset():
    np.testing.assert_array_equal(
        jaxdia.diags([1.0, 2.0, 3.0], 1).todense(),
        sp.diags_array([1.0, 2.0, 3.0], offsets=1).toarray(),
    )
    diagonals = [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0], [1.0, 2.0]]
    np.testing.assert_array_equal(
        jaxdia.diags(diagonals, offsets=[0, -1, 2]).todense(),
        sp.diags_array(diagonals, offsets=[0, -1, 2]).toarray(),
    )


def test_diags_dtypes():
    assert jaxdia.diags([1, 2], 0).dtype == jnp.result_type(float)  # integers become float
    assert jaxdia.diags([1j, 2], 0).dtype == np.complex128
    assert jaxdia.diags([1.0, 2.0], 0, dtype=jnp.bfloat16).dtype == jnp.bfloat16
    with pytest.raises(TypeError, match="int32"):
        jaxdia.diags([1.0], 0, dtype=np.int32)


def test_diags_promotes_python_scalars_weakly_and_rejects_non_numbers():
    """As in JAX, a Python scalar diagonal does not widen an array's dtype."""
    assert jaxdia.diags([np.ones(3, np.float16), 2.0], [0, 1]).dtype == np.float16
    assert jaxdia.diags([jnp.ones(3, jnp.bfloat16), 2.0], [0, 1]).dtype == jnp.bfloat16
    with pytest.raises(TypeError, match=r"diagonals\[1\] must be numeric, got list of dtype <U1"):
        jaxdia.diags([[1.0], ["a"]], [0, 1], shape=(2, 2))
    with pytest.raises(ValueError, match=r"diagonals\[0\] must be 1-D, got shape \(2, 2\)"):
        jaxdia.diags([np.ones((2, 2))], [0])


def test_diags_lays_out_concrete_diagonals_on_the_host_and_traced_ones_in_one_program():
    """NumPy, Python and concrete CPU JAX diagonals are laid out on the host and
    transferred once (an eager op-by-op build compiled ~40 programs on its first call,
    then took 9x SciPy's time at n = 1e6); traced ones by one compiled program per
    structure."""
    expected = sp.diags_array([np.ones(4), 2.0, [3.0, 3.0]], offsets=[0, 1, -2], shape=(4, 4))
    before = _construct._device_data._cache_size()
    A = jaxdia.diags([np.ones(4), 2.0, [3.0, 3.0]], [0, 1, -2], shape=(4, 4))
    assert A.offsets == (-2, 0, 1)
    np.testing.assert_array_equal(A.todense(), expected.toarray())
    for scale in (1.0, 2.0):
        B = jaxdia.diags([scale * jnp.ones(4), 2.0, jnp.array([3.0, 3.0])], [0, 1, -2], (4, 4))
        np.testing.assert_array_equal(B.todense(), (expected + (scale - 1) * sp.eye(4)).toarray())
    np.testing.assert_array_equal(jaxdia.eye(3, 4, k=-1).todense(), np.eye(3, 4, k=-1))
    assert _construct._device_data._cache_size() == before
    traced = jax.jit(lambda d: jaxdia.diags([d, 2.0, jnp.array([3.0, 3.0])], [0, 1, -2], (4, 4)))
    for scale in (1.0, 2.0):
        B = traced(scale * jnp.ones(4))
        np.testing.assert_array_equal(B.todense(), (expected + (scale - 1) * sp.eye(4)).toarray())
    assert traced._cache_size() == 1


def test_unavailable_explicit_dtypes_warn_as_jax_does():
    """Without x64 an explicit float64 request is narrowed to float32, with JAX's warning
    (it was narrowed silently)."""
    with jax.enable_x64(False):
        for make, name in (
            (lambda: jaxdia.diags([1.0, 2.0], 0, dtype=np.float64), "diags"),
            (lambda: jaxdia.eye(2, dtype=np.complex128), "eye"),
        ):
            with pytest.warns(UserWarning, match=rf"dtype \w+ requested in {name} is not avail"):
                A = make()
            assert A.dtype in (np.float32, np.complex64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jaxdia.eye(2, dtype=np.float64).dtype == np.float64  # x64 on: no warning


def test_scipy_format_argument_and_attribute_names():
    """SciPy code passes ``format=``: "dia" and None are accepted, others say what to do;
    SciPy attribute names DiaMatrix lacks point to jaxdia's equivalents."""
    A = jaxdia.diags([1.0, 2.0], [0, 1], shape=(3, 3), format="dia")
    np.testing.assert_array_equal(jaxdia.eye(3, format=None).todense(), np.eye(3))
    for make in (lambda: jaxdia.diags([1.0], 0, format="csr"), lambda: jaxdia.eye(2, format="csr")):
        with pytest.raises(ValueError, match=r"format='csr', but jaxdia builds DIA .*asformat"):
            make()
    with pytest.raises(AttributeError, match=r"'setdiag'; for SciPy's setdiag, use A.with_diag"):
        A.setdiag(1.0)
    with pytest.raises(AttributeError, match=r"^'DiaMatrix' object has no attribute 'dat'$"):
        A.dat  # noqa: B018
    for name in ("getrow", "getcol", "nonzero", "reshape", "resize", "maximum", "get_shape"):
        with pytest.raises(AttributeError, match=rf"'{name}'; for SciPy's {name}, use \S"):
            getattr(A, name)


@pytest.mark.parametrize(
    "ufunc",
    ["sin", "sinh", "tan", "tanh", "arcsin", "arcsinh", "arctan", "arctanh", "sqrt"]
    + ["expm1", "log1p", "deg2rad", "rad2deg", "sign", "rint", "floor", "ceil", "trunc"],
)
def test_scipy_elementwise_maps_point_to_a_recipe_that_matches_scipy(ufunc):
    """A.sqrt() and friends name a recipe; the recipe computes what SciPy's method does."""
    S = sp.dia_array(([[0.25, -0.5, 0.75, 0.0], [0.3, 0.6, -0.2, 0.9]], [0, 1]), shape=(4, 4))
    A = jaxdia.DiaMatrix.from_scipy(S)
    with pytest.raises(AttributeError, match=f"for SciPy's {ufunc}, use ") as error:
        getattr(A, ufunc)
    recipe = str(error.value).split(", use ", 1)[1]
    with np.errstate(invalid="ignore"):  # sqrt/arctanh of negative entries: NaN on both sides
        expected = getattr(S, ufunc)().toarray()
    result = eval(recipe, {"jaxdia": jaxdia, "jnp": jnp, "A": A})
    np.testing.assert_allclose(result.todense(), expected, rtol=1e-6)


def test_truth_value_is_ambiguous_as_in_scipy():
    """``if A:`` was true for every matrix; SciPy and NumPy raise, except for one element."""
    for A in (jaxdia.eye(3), jaxdia.DiaMatrix(np.ones((2, 1, 1)), 0, (1, 1))):
        with pytest.raises(ValueError, match="truth value of a DiaMatrix .* is ambiguous"):
            bool(A)
    assert bool(jaxdia.eye(1)) and not bool(jaxdia.eye(1) * 0.0)


def test_traced_offsets_in_diags_say_they_must_be_static():
    for as_offsets in (lambda k: [k], lambda k: k):
        with pytest.raises(TypeError, match="offsets must be static Python ints"):
            jax.jit(lambda k: jaxdia.diags([1.0], as_offsets(k), shape=(3, 3)))(1)


def test_diags_under_jit_and_grad():
    f = jax.jit(lambda d: jaxdia.diags([d, 2 * d], offsets=[0, 1], shape=(3, 3)).todense())
    np.testing.assert_array_equal(
        f(jnp.arange(1.0, 4.0)), sp.diags_array([[1.0, 2, 3], [2.0, 4]], offsets=[0, 1]).toarray()
    )
    grad = jax.grad(lambda d: jaxdia.diags([d], offsets=[1], shape=(3, 3)).todense().sum())
    np.testing.assert_array_equal(grad(jnp.ones(5)), [1, 1, 0, 0, 0])


@pytest.mark.parametrize(
    "diagonals, kwargs, match",
    [
        ([[1.0], [2.0]], {"offsets": 0}, "Different number of diagonals and offsets"),
        ([[1.0], [2.0]], {"offsets": [0]}, "Different number of diagonals and offsets"),
        ([[1.0]], {"offsets": [5], "shape": (3, 3)}, r"Offset 5 \(index 0\) out of bounds"),
        ([[1.0, 2.0]], {"offsets": [0], "shape": (3, 3)}, "does not agree with array size"),
        ([[1.0], [2.0]], {"offsets": [0, 0], "shape": (3, 3)}, "duplicate"),
    ],
)
def test_diags_errors_like_scipy(diagonals, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sp.diags_array(diagonals, **kwargs)
    with pytest.raises(ValueError, match=match):
        jaxdia.diags(diagonals, **kwargs)


@given(st.integers(0, 6), st.integers(0, 6), st.integers(-7, 7))
def test_eye_matches_scipy(m, n, k):
    if not -m <= k <= n:
        with pytest.raises(ValueError, match="out of bounds"):
            sp.eye_array(m, n, k=k)
        with pytest.raises(ValueError, match="out of bounds"):
            jaxdia.eye(m, n, k=k)
        return
    A = jaxdia.eye(m, n, k=k, dtype=np.float64)
    np.testing.assert_array_equal(A.todense(), sp.eye_array(m, n, k=k).toarray())
    assert A.nnz == np.count_nonzero(sp.eye_array(m, n, k=k).toarray())


def test_eye_defaults_and_errors():
    A = jaxdia.eye(3)
    assert A.shape == (3, 3) and A.offsets == (0,) and A.dtype == jnp.result_type(float)
    with pytest.raises(TypeError, match="k must be an int"):
        jaxdia.eye(3, k=0.5)
    with pytest.raises(ValueError, match="non-negative"):
        jaxdia.eye(-1)


def test_float64_numpy_input_without_x64_warns_once_naming_the_function():
    """No silent precision loss: NumPy/SciPy float64 or complex128 input narrowed to 32 bits
    (x64 off) warns once per call, as ``astype`` does; Python values and float32 do not."""
    import warnings

    import scipy.sparse as sp

    S = sp.diags_array([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(4, 4))
    data64 = np.ones((2, 4))
    cases = {
        "from_scipy": lambda: jaxdia.DiaMatrix.from_scipy(S),
        "DiaMatrix": lambda: jaxdia.DiaMatrix(data64, [0, 1], (4, 4)),
        "from_dense": lambda: jaxdia.DiaMatrix.from_dense(np.eye(4)),
        "diags": lambda: jaxdia.diags([np.ones(4), np.ones(3) + 0j], [0, 1]),
    }
    quiet = [
        lambda: jaxdia.diags([1.0, -2.0], [0, 1], (4, 4)),
        lambda: jaxdia.diags([[1.0] * 4], [0]),
        lambda: jaxdia.DiaMatrix([[1.0] * 4], 0, (4, 4)),
        lambda: jaxdia.DiaMatrix.from_scipy(S.astype(np.float32)),
        lambda: jaxdia.diags([np.ones(4)], [0], dtype=np.float32),
    ]
    with jax.enable_x64(False):
        for function, call in cases.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                A = call()
            assert len(caught) == 1, (function, [str(w.message) for w in caught])
            message = str(caught[0].message)
            assert message.startswith(function) and "jax_enable_x64" in message, message
            assert A.dtype in (np.float32, np.complex64)
        for call in quiet:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                call()
    with warnings.catch_warnings():  # x64 on: nothing is narrowed
        warnings.simplefilter("error")
        assert jaxdia.DiaMatrix.from_scipy(S).dtype == np.float64


def banded(shape, offsets, seed=0):
    rng = np.random.default_rng(seed)
    return jaxdia.DiaMatrix(rng.standard_normal((len(offsets), shape[1])), offsets, shape)


@pytest.mark.parametrize("shape_b", [(4, 4), (3, 5)])
def test_traced_kron_matches_scipy_and_does_not_grow_with_pairs(shape_b):
    """``kron`` under ``jit`` (square and rectangular B): SciPy's values, the gradient of
    both factors, and a program the same size for 5 and 53 diagonals of A (its pairs of
    diagonals are one vectorized product, or one scatter, not one piece each)."""
    B = banded(shape_b, tuple(range(-shape_b[0] + 1, shape_b[1])), seed=1)
    kron = jax.jit(jaxdia.kron)
    sizes = []
    for count in (5, 53):
        A = banded((60, 60), tuple(range(-(count // 2), count - count // 2)))
        K = kron(A, B)
        expected = sp.kron(A.to_scipy(), B.to_scipy()).toarray()
        np.testing.assert_allclose(np.asarray(K.todense()), expected, rtol=1e-12, atol=1e-12)
        sizes.append(program_lines(jaxdia.kron, A, B))
    assert abs(sizes[0][0] - sizes[1][0]) <= 16 and abs(sizes[0][1] - sizes[1][1]) <= 16

    def loss(a, b, dense=False):
        A_ = jaxdia.DiaMatrix(a, A.offsets, A.shape)
        B_ = jaxdia.DiaMatrix(b, B.offsets, B.shape)
        K = jnp.kron(A_.todense(), B_.todense()) if dense else jaxdia.kron(A_, B_).todense()
        return jnp.sum(jnp.sin(K))

    A = banded((6, 6), (-2, 0, 3))
    got = jax.grad(loss, argnums=(0, 1))(A.data, B.data)
    expected = jax.grad(functools.partial(loss, dense=True), argnums=(0, 1))(A.data, B.data)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
