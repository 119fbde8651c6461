"""jaxdia.jacobian and value_and_jacobian against jax.jacfwd, and the colourings behind
them against a brute-force check of the pattern."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, strategies as st

import jaxdia
from jaxdia._colouring import Pattern, column_colouring, row_colouring

from .helpers import dense_f64


def banded_function(offsets, shape, mask=None, seed=0, dtype=np.float64):
    """``f(x) = A sin(x) + (B x)^2`` with ``A``, ``B`` random on the pattern: its Jacobian
    ``A diag(cos x) + 2 diag(B x) B`` has exactly the pattern's entries."""
    rng = np.random.default_rng(seed)
    m, n = shape
    values = rng.standard_normal((2, len(offsets), n))
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal((2, len(offsets), n))
    if mask is not None:
        values = values * mask
    A, B = (jaxdia.DiaMatrix(v.astype(dtype), offsets, shape) for v in values)
    return lambda x: A @ jnp.sin(x) + (B @ x) ** 2


def brute_force_valid(pattern, colours):
    """No two columns of one colour share a row of the (dense) pattern."""
    m, n = pattern.shape
    dense = np.zeros((m, n), dtype=bool)
    for k, offset in enumerate(pattern.offsets):
        j = np.nonzero(pattern.slots[k])[0]
        dense[j - offset, j] = True
    for row in dense:
        used = colours[row]
        if len(set(used.tolist())) != used.size:
            return False
    return True


@st.composite
def patterns(draw):
    m, n = draw(st.integers(1, 14)), draw(st.integers(1, 14))
    offsets = tuple(sorted(draw(st.sets(st.integers(-m + 1, n - 1), min_size=1, max_size=5))))
    mask = None
    if draw(st.booleans()):
        mask = np.array(
            draw(st.lists(st.booleans(), min_size=len(offsets) * n, max_size=len(offsets) * n))
        ).reshape(len(offsets), n)
    return Pattern(offsets, (m, n), mask)


@given(patterns())
def test_colourings_are_valid(pattern):
    colouring = column_colouring(pattern)
    colours = colouring.host(pattern.shape[1])
    assert brute_force_valid(pattern, colours)
    assert colours.size == 0 or colours.max(initial=0) < max(colouring.count, 1)
    # A row colouring is the column colouring of the transpose.
    transposed = pattern.transpose()
    rows = row_colouring(pattern).host(pattern.shape[0])
    assert brute_force_valid(transposed, rows)
    # The transpose's transpose is the pattern itself.
    assert transposed.transpose() == pattern


def grid_mask(offsets, steps, grid):
    """The true pattern of a stencil on a C-order grid: offset ``offsets[k]`` moves by
    ``steps[k]`` (one step per axis); entries that leave the grid are masked out."""
    n = int(np.prod(grid))
    columns = np.arange(n)
    rows = []
    for offset, step in zip(offsets, steps):
        point = np.unravel_index(np.clip(columns - offset, 0, n - 1), grid)
        inside = (columns - offset >= 0) & (columns - offset < n)
        for axis, delta in enumerate(step):
            inside &= (point[axis] + delta >= 0) & (point[axis] + delta < grid[axis])
        rows.append(inside)
    return np.stack(rows)


def five_point(N):
    offsets = (-N, -1, 0, 1, N)
    return offsets, grid_mask(offsets, [(-1, 0), (0, -1), (0, 0), (0, 1), (1, 0)], (N, N))


def seven_point(N):
    offsets = (-N * N, -N, -1, 0, 1, N, N * N)
    steps = [(-1, 0, 0), (0, -1, 0), (0, 0, -1), (0, 0, 0), (0, 0, 1), (0, 1, 0), (1, 0, 0)]
    return offsets, grid_mask(offsets, steps, (N, N, N))


def block_diagonal(n, size):
    offsets = tuple(range(-size + 1, size))
    columns = np.arange(n)
    return offsets, np.stack([(columns - k) // size == columns // size for k in offsets])


@pytest.mark.parametrize(
    "offsets, mask, n, expected",
    [
        ((-1, 0, 1), None, 1000, 3),
        ((-2, -1, 0, 1, 2), None, 1000, 5),
        (*block_diagonal(999, 3), 999, 3),  # 3 x 3 blocks: 3 colours, not the band's 5
        ((-998, -1, 0, 1, 998), None, 999, 3),  # periodic tridiagonal
        ((-999, -1, 0, 1, 999), None, 1000, 4),
        (*five_point(30), 900, 5),
        (*seven_point(12), 1728, 7),
    ],
)
def test_colour_counts(offsets, mask, n, expected):
    # Each is the fewest possible: the most entries of one row, except for the periodic
    # tridiagonal matrix of n = 1000 (its columns conflict as the vertices of the square
    # of an n-cycle, 3-colourable only when 3 divides n).
    assert column_colouring(Pattern(tuple(offsets), (n, n), mask)).count == expected


@pytest.mark.parametrize(
    "offsets, mask, n",
    [
        ((-198, -1, 0, 1, 198), None, 199),  # periodic: copies stop at the corners
        (*five_point(12), 144),
        ((-24, -2, -1, 0, 1, 2, 24), None, 288),  # two species on a 12 x 12 grid
        ((-2, 0, 3), None, 500),
    ],
)
def test_greedy_skipping_whole_periods_is_exact(offsets, mask, n, monkeypatch):
    from jaxdia import _colouring

    conflicts = _colouring._conflicts(Pattern(tuple(offsets), (n, n), mask))
    skipping = _colouring._greedy(conflicts, n, n + 1)
    monkeypatch.setattr(_colouring, "_PERIOD_SEARCH", 0)  # column by column
    np.testing.assert_array_equal(skipping, _colouring._greedy(conflicts, n, n + 1))


def test_colour_counts_without_masks_stay_small():
    # The band of a 2-D 5-point stencil without its true pattern: wrap-around entries
    # included, at most one colour more than the 5 of one row.
    N = 36
    assert column_colouring(Pattern((-N, -1, 0, 1, N), (N * N, N * N))).count <= 6
    nine = tuple(dy * N + dx for dy in (-1, 0, 1) for dx in (-1, 0, 1))
    assert column_colouring(Pattern(nine, (N * N, N * N))).count <= 10


@pytest.mark.parametrize(
    "offsets, shape, dtype",
    [
        ((-1, 0, 1), (9, 9), np.float64),
        ((-3, 0, 2, 5), (12, 12), np.float64),
        ((-2, 0, 1), (7, 10), np.float64),  # rectangular, wide
        ((-4, -1, 2), (11, 6), np.float64),  # rectangular, tall
        ((-1, 0, 1), (8, 8), np.complex128),
        ((0, 1), (6, 6), np.float32),
    ],
)
@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_matches_jacfwd(offsets, shape, dtype, mode):
    f = banded_function(offsets, shape, dtype=dtype)
    x = jnp.asarray(np.linspace(-1.0, 1.0, shape[1]).astype(dtype))
    J = jax.jit(jaxdia.jacobian(f, offsets, mode=mode))(x)
    assert isinstance(J, jaxdia.DiaMatrix) and J.shape == shape and J.dtype == dtype
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    expected = jax.jit(jax.jacfwd(f, holomorphic=dtype == np.complex128))(x)
    np.testing.assert_allclose(dense_f64(J), expected, rtol=rtol, atol=rtol)


@pytest.mark.parametrize(
    "mode, dtype",
    [
        pytest.param("fwd", np.float32, marks=pytest.mark.full),
        ("fwd", np.float64),
        ("rev", np.float32),
        ("rev", np.float64),
    ],
)
def test_complex_output_of_a_real_argument(mode, dtype):
    # Reverse mode once returned only the real part: JAX's pullback to a real argument
    # drops the imaginary part of a complex cotangent's product.
    complex_dtype = np.result_type(dtype, np.complex64)
    f = banded_function((-2, 0, 1), (9, 9), dtype=complex_dtype)
    x = jnp.asarray(np.linspace(-1.0, 1.0, 9).astype(dtype))
    J = jax.jit(jaxdia.jacobian(f, (-2, 0, 1), mode=mode, check=False))(x)
    assert J.dtype == complex_dtype
    expected = jax.jit(jax.jacfwd(f))(x)
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(dense_f64(J), expected, rtol=rtol, atol=rtol)
    jaxdia.jacobian(f, (-2, 0, 1), mode=mode, check=True)(x)  # the check agrees
    batch = jnp.stack([x, 2 * x])
    Js = jax.vmap(jaxdia.jacobian(f, (-2, 0, 1), mode=mode))(batch)
    np.testing.assert_allclose(dense_f64(Js)[1], jax.jacfwd(f)(batch[1]), rtol=rtol, atol=rtol)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_real_output_of_a_complex_argument_is_refused(mode):
    x = jnp.linspace(1.0, 2.0, 5) * (1 + 0.5j)
    with pytest.raises(TypeError, match="complex argument to a real output"):
        jaxdia.jacobian(lambda z: jnp.abs(z) ** 2, (0,), mode=mode)(x)


def test_masks_and_chunks():
    offsets, mask = block_diagonal(12, 3)
    f = banded_function(offsets, (12, 12), mask)
    x = jnp.linspace(0.0, 1.0, 12)
    expected = jax.jit(jax.jacfwd(f))(x)
    for chunk_size in (None, 2):
        J = jax.jit(jaxdia.jacobian(f, offsets, mask=mask, chunk_size=chunk_size))(x)
        np.testing.assert_allclose(dense_f64(J), expected, rtol=1e-12, atol=1e-12)
    # The mask's rows follow the offsets as given, in any order.
    reversed_J = jax.jit(jaxdia.jacobian(f, offsets[::-1], mask=mask[::-1]))(x)
    np.testing.assert_allclose(dense_f64(reversed_J), expected, rtol=1e-12, atol=1e-12)
    # Products: three seeds, not the band's five; decompressed by a gather (no scatter).
    jaxpr = str(jax.make_jaxpr(jaxdia.jacobian(f, offsets, mask=mask))(x))
    assert "scatter" not in jaxpr
    assert "3,12" in jaxpr.replace(" ", "")  # the (3, 12) seeds


def bratu(u, lam):
    """The 2-D Bratu residual on an N x N grid (zero boundary values), flattened."""
    N = int(round(u.size**0.5))
    grid = jnp.pad(u.reshape(N, N), 1)
    laplacian = 4 * grid[1:-1, 1:-1] - grid[:-2, 1:-1] - grid[2:, 1:-1]
    laplacian = laplacian - grid[1:-1, :-2] - grid[1:-1, 2:]
    return (laplacian * (N + 1) ** 2 - lam * jnp.exp(grid[1:-1, 1:-1])).reshape(-1)


def test_arguments_aux_and_value():
    N = 6
    offsets, mask = five_point(N)
    u = jnp.linspace(0.0, 0.5, N * N)

    def f(lam, u):
        residual = bratu(u, lam)
        return residual, jnp.sum(residual**2)

    expected = jax.jit(jax.jacfwd(bratu))(u, 2.0)
    jacobian = jaxdia.jacobian(f, offsets, argnums=1, has_aux=True, mask=mask)
    J, aux = jax.jit(jacobian)(2.0, u)
    np.testing.assert_allclose(dense_f64(J), expected, rtol=1e-12)
    np.testing.assert_allclose(aux, jnp.sum(bratu(u, 2.0) ** 2), rtol=1e-12)
    value_and_jacobian = jaxdia.value_and_jacobian(f, offsets, argnums=1, has_aux=True)
    (value, aux), J = jax.jit(value_and_jacobian)(2.0, u)
    np.testing.assert_allclose(value, bratu(u, 2.0), rtol=1e-12)
    np.testing.assert_allclose(dense_f64(J), expected, rtol=1e-12)
    # A 2-D argument and output: flattened in C order.
    value_and_jacobian = jaxdia.value_and_jacobian(
        lambda U: bratu(U, 2.0).reshape(N, N), offsets, mask=mask
    )
    value, J = jax.jit(value_and_jacobian)(u.reshape(N, N))
    assert value.shape == (N, N)
    np.testing.assert_allclose(dense_f64(J), expected, rtol=1e-12)


def test_jit_vmap_and_gradients():
    offsets = (-1, 0, 1)
    f = banded_function(offsets, (8, 8), seed=3)
    jacobian = jaxdia.jacobian(f, offsets)
    xs = jnp.asarray(np.random.default_rng(4).standard_normal((3, 8)))
    batched = jax.jit(jax.vmap(jacobian))(xs)
    assert batched.batch_shape == (3,)
    np.testing.assert_allclose(dense_f64(batched), jax.jit(jax.vmap(jax.jacfwd(f)))(xs), rtol=1e-12)

    # A loss of the Jacobian's entries, and its gradient (second derivatives of f).
    weights = jnp.asarray(np.random.default_rng(5).standard_normal((8, 8)))

    def loss(x):
        return jnp.sum(weights * jacobian(x).todense() ** 2)

    def dense_loss(x):
        return jnp.sum(weights * jax.jacfwd(f)(x) ** 2)

    expected = jax.jit(jax.grad(dense_loss))(xs[0])
    for mode in ("fwd", "rev"):
        jacobian = jaxdia.jacobian(f, offsets, mode=mode)
        np.testing.assert_allclose(jax.jit(jax.grad(loss))(xs[0]), expected, rtol=1e-10)
    # Forward over reverse: the Hessian of the loss.
    np.testing.assert_allclose(
        jax.jit(jax.hessian(loss))(xs[0]),
        jax.jit(jax.hessian(dense_loss))(xs[0]),
        rtol=1e-9,
        atol=1e-12,
    )


def test_reverse_mode_for_custom_vjp():
    @jax.custom_vjp
    def smooth(x):
        return jnp.tanh(x)

    smooth.defvjp(lambda x: (jnp.tanh(x), x), lambda x, g: (g * (1 - jnp.tanh(x) ** 2),))

    def f(u):
        padded = jnp.pad(smooth(u), 1)
        return padded[:-2] - 2 * padded[1:-1] + padded[2:]

    u = jnp.linspace(-1.0, 1.0, 10)
    with pytest.raises(TypeError, match="custom_vjp"):
        jaxdia.jacobian(f, (-1, 0, 1))(u)
    J = jax.jit(jaxdia.jacobian(f, (-1, 0, 1), mode="rev"))(u)
    np.testing.assert_allclose(dense_f64(J), jax.jit(jax.jacrev(f))(u), rtol=1e-12)


def test_check_finds_entries_outside_the_pattern():
    f = banded_function((-1, 0, 1), (8, 8))
    x = jnp.ones(8)
    with pytest.raises(ValueError, match=r"outside the offsets \(0, 1\).*offset -1"):
        jaxdia.jacobian(f, (0, 1), check=True)(x)
    with pytest.raises(ValueError, match="concrete arguments"):
        jax.jit(jaxdia.jacobian(f, (-1, 0, 1), check=True))(x)


def test_errors():
    f = banded_function((-1, 0, 1), (4, 4))
    x = jnp.ones(4)
    with pytest.raises(ValueError, match="duplicate"):
        jaxdia.jacobian(f, (0, 0))
    with pytest.raises(TypeError, match="argnums must be one int"):
        jaxdia.jacobian(f, (0,), argnums=(0, 1))
    with pytest.raises(ValueError, match="mode must be one of"):
        jaxdia.value_and_jacobian(f, (0,), mode="forward")
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        jaxdia.jacobian(f, (0,), chunk_size=0)
    with pytest.raises(TypeError, match="floating or complex array, got dtype int"):
        jaxdia.jacobian(f, (0,))(jnp.arange(4))
    with pytest.raises(ValueError, match="out of range for 1 positional"):
        jaxdia.jacobian(f, (0,), argnums=2)(x)
    with pytest.raises(ValueError, match=r"mask must be a boolean array of shape .*\(3, 4\)"):
        jaxdia.jacobian(f, (-1, 0, 1), mask=np.ones((3, 5), dtype=bool))(x)
    with pytest.raises(TypeError, match="f must return one array"):
        jaxdia.jacobian(lambda x: (x, x), (0,))(x)


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_lowers_for_accelerators_without_loops(platform):
    """Seeds, products and decompression are whole-array operations: no loop over the
    matrix (a chunk_size adds a loop over chunks of seeds only)."""
    from .test_lowering import lowered_text

    offsets = (-1, 0, 1)

    def f(u):
        padded = jnp.pad(u, 1)
        return padded[:-2] - 2 * u + padded[2:] + jnp.sin(u)

    x = jnp.ones(64, jnp.float32)
    text = lowered_text(jaxdia.jacobian(f, offsets), x, platform=platform)
    assert "stablehlo.while" not in text and "scatter" not in text
    chunked = lowered_text(jaxdia.jacobian(f, offsets, chunk_size=2), x, platform=platform)
    assert chunked.count("stablehlo.while") == 1
