"""Hypothesis strategies for property-testing code that uses :class:`jaxdia.DiaMatrix`.

Needs ``hypothesis`` (installed with the ``test`` extra). Shapes include 0, 1 and
rectangular sizes; offsets include none, the extremes ``-(m-1)`` and ``n-1``, and offsets
outside the matrix (which a DiaMatrix drops); dtypes include the 16-bit floats; padding
slots of the drawn ``data`` hold NaN by default, so code that reads padding fails loudly.

Example:
  >>> from hypothesis import given, settings
  >>> from jaxdia.testing import dia_matrices
  >>> @settings(max_examples=10, deadline=None)  # the first draws include compilation
  ... @given(dia_matrices(max_side=6))
  ... def test_dense_round_trip(A):
  ...     assert A.todense().shape == A.batch_shape + A.shape
  >>> test_dense_round_trip()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import strategies as st
from jax.typing import DTypeLike

from ._checks import check_dtype, warn_if_unavailable
from ._geometry import in_bounds
from ._matrix import DiaMatrix

__all__ = ["batch_shapes", "dia_matrices", "dtypes", "offsets", "random_values", "shapes"]


def shapes(max_side: int = 12, min_side: int = 0) -> st.SearchStrategy[tuple[int, int]]:
    """Matrix shapes ``(m, n)``: square, rectangular, and sides of 0 and 1.

    Example:
      >>> from hypothesis import find
      >>> from jaxdia.testing import shapes
      >>> m, n = find(shapes(max_side=5), lambda shape: shape[0] != shape[1])
      >>> m != n and 0 <= m <= 5 and 0 <= n <= 5
      True
    """
    side = st.integers(min_side, max_side)
    return st.one_of(side.map(lambda s: (s, s)), st.tuples(side, side))


def dtypes(
    *, low_precision: bool = True, complex: bool = True, x64: bool | None = None
) -> st.SearchStrategy[np.dtype]:
    """The dtypes a DiaMatrix holds; 64-bit ones only when x64 is (or ``x64=True``).

    Example:
      >>> from hypothesis import find
      >>> from jaxdia.testing import dtypes
      >>> find(dtypes(x64=False), lambda dtype: dtype.kind == "c")
      dtype('complex64')
    """
    x64 = bool(jax.config.read("jax_enable_x64")) if x64 is None else x64
    choices: list[Any] = [np.float32]
    if x64:
        choices.append(np.float64)
    if complex:
        choices.append(np.complex64)
        if x64:
            choices.append(np.complex128)
    if low_precision:
        choices += [jnp.bfloat16, np.float16]
    return st.sampled_from([np.dtype(d) for d in choices])


def offsets(
    shape: tuple[int, int], *, max_diags: int = 6, out_of_range: bool = False
) -> st.SearchStrategy[tuple[int, ...]]:
    """Distinct offsets for ``shape``, in drawn (unsorted) order.

    Draws favour the extremes ``-(m-1)``, ``0`` and ``n-1``. With ``out_of_range`` the
    offsets may also lie outside the matrix (``k <= -m`` or ``k >= n``).

    Example:
      >>> from hypothesis import find
      >>> from jaxdia.testing import offsets
      >>> ks = find(offsets((3, 4)), lambda ks: len(ks) == 3)
      >>> len(set(ks)), all(-2 <= k <= 3 for k in ks)
      (3, True)
    """
    m, n = shape
    low, high = (-m - 2, n + 2) if out_of_range else (-m + 1, n - 1)
    if high < low or not (out_of_range or m and n):
        return st.just(())
    extremes = [k for k in (-m + 1, 0, n - 1) if low <= k <= high]
    element = (
        st.one_of(st.sampled_from(extremes), st.integers(low, high))
        if extremes
        else (st.integers(low, high))
    )
    return st.lists(element, max_size=max_diags, unique=True).map(tuple)


def batch_shapes(max_dims: int = 2, max_size: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    """Leading batch shapes: mostly ``()``, else up to ``max_dims`` dims of size 1..max_size.

    Example:
      >>> from hypothesis import find
      >>> from jaxdia.testing import batch_shapes
      >>> batch = find(batch_shapes(max_size=3), lambda batch: len(batch) == 2)
      >>> len(batch), all(1 <= size <= 3 for size in batch)
      (2, True)
    """
    return st.one_of(
        st.just(()),
        st.lists(st.integers(1, max_size), min_size=1, max_size=max_dims).map(tuple),
    )


def random_values(rng: np.random.Generator, shape: Sequence[int], dtype: DTypeLike) -> np.ndarray:
    """Standard normal values of ``dtype`` (complex ones have both parts random).

    Example:
      >>> import numpy as np
      >>> from jaxdia.testing import random_values
      >>> values = random_values(np.random.default_rng(0), (2, 3), np.complex64)
      >>> values.shape, values.dtype, bool(np.all(values.imag != 0))
      ((2, 3), dtype('complex64'), True)
    """
    dtype = np.dtype(dtype)
    values = rng.standard_normal(tuple(shape))
    if dtype.kind == "c":
        values = values + 1j * rng.standard_normal(tuple(shape))
    return values.astype(dtype)


@st.composite
def dia_matrices(
    draw: st.DrawFn,
    *,
    shape: tuple[int, int] | None = None,
    dtype: DTypeLike | None = None,
    batch_shape: tuple[int, ...] | None = (),
    max_side: int = 12,
    max_diags: int = 6,
    out_of_range: bool = True,
    padding: str = "nan",
) -> DiaMatrix:
    """Random DiaMatrix instances.

    Args:
      shape: a fixed ``(m, n)``, or None to draw one with sides up to ``max_side``.
      dtype: a fixed dtype, or None to draw from :func:`dtypes`. A dtype a DiaMatrix
        cannot hold raises a TypeError; float64 or complex128 without x64 warns (as JAX
        does) and draws the 32-bit type.
      batch_shape: a fixed batch shape (default ``()``), or None to draw one.
      max_side: the largest side drawn.
      max_diags: the most diagonals given to the constructor.
      out_of_range: whether offsets outside the matrix may be given (they are dropped).
      padding: what padding slots hold: ``"nan"`` (default), ``"zero"`` or ``"random"``.

    Example:
      >>> import numpy as np
      >>> from hypothesis import find
      >>> from jaxdia.testing import dia_matrices
      >>> A = find(dia_matrices(shape=(4, 4), dtype=np.float32), lambda A: A.n_diags == 2)
      >>> A.shape, A.dtype, A.n_diags
      ((4, 4), dtype('float32'), 2)
    """
    if padding not in ("nan", "zero", "random"):
        raise ValueError(f"padding must be 'nan', 'zero' or 'random', got {padding!r}")
    shape = draw(shapes(max_side)) if shape is None else cast(tuple[int, int], tuple(shape))
    if dtype is None:
        dtype = draw(dtypes())
    else:  # as the constructors: unsupported types raise, narrowed 64-bit types warn
        dtype = check_dtype(dtype, "dtype")
        warn_if_unavailable(dtype, "dia_matrices")
    batch_shape = draw(batch_shapes()) if batch_shape is None else tuple(batch_shape)
    diagonal_offsets = draw(offsets(shape, max_diags=max_diags, out_of_range=out_of_range))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = random_values(rng, (*batch_shape, len(diagonal_offsets), shape[1]), dtype)
    if padding != "random":
        padded = ~in_bounds(diagonal_offsets, shape, host=True)
        data[..., padded] = np.nan if padding == "nan" else 0
    return DiaMatrix(data, diagonal_offsets, shape)
