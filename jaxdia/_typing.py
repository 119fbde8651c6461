"""Names for the types that jaxdia's signatures share.

``ArrayLike`` is JAX's (an array, a NumPy array or a Python scalar). The others say what
an argument means, not only what it is:

>>> from jaxdia._typing import Grid, Offsets
>>> grid: Grid = (64, 64)
>>> offsets: Offsets = (-64, -1, 0, 1, 64)
"""

from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeAlias, TypeVar

import numpy as np
from jax import Array
from jax.typing import ArrayLike, DTypeLike

__all__ = [
    "ArrayLike",
    "DTypeLike",
    "Grid",
    "LinearMap",
    "Offsets",
    "Operator",
    "OperatorLike",
    "Scalar",
    "Shape",
    "TypedLinearMap",
    "Values",
]

#: Diagonal offsets, SciPy's convention (``k > 0`` above the main diagonal).
Offsets: TypeAlias = Sequence[int] | np.ndarray | int
#: The grid points per axis of a structured-grid matrix, first axis slowest.
Grid: TypeAlias = Sequence[int]
#: A matrix shape ``(rows, columns)``.
Shape: TypeAlias = tuple[int, int]
#: Arrays in NumPy or in JAX: a function over an array namespace ``xp`` (``numpy`` or
#: ``jax.numpy``) returns the kind it is given.
Values = TypeVar("Values", Array, np.ndarray)
#: One number: a Python or NumPy scalar, or a 0-d array (a tolerance, a shift, a factor).
#: The type cannot say "0-d"; the functions that take one check it.
Scalar: TypeAlias = ArrayLike


class LinearMap(Protocol):
    """Anything that multiplies a vector with ``@`` and has a ``shape`` (a ``DiaMatrix``,
    a ``ShardedDiaMatrix``, a dense array)."""

    @property
    def shape(self) -> tuple[int, ...]: ...

    def __matmul__(self, other: Array, /) -> Array: ...


class TypedLinearMap(LinearMap, Protocol):
    """A :class:`LinearMap` with a ``dtype``: what a preconditioner is built on and what a
    solver reads the precision of (a ``DiaMatrix``, a ``ShardedDiaMatrix``, a dense array)."""

    @property
    def dtype(self) -> DTypeLike: ...


#: What solvers and preconditioners accept as ``A`` or ``M``: a linear map, or a function
#: ``x -> A x`` (``jax.scipy.sparse.linalg``'s convention).
Operator: TypeAlias = LinearMap | Callable[[Array], Array]
#: What the Krylov solvers take as ``A`` or ``M`` (:mod:`jaxdia._linalg.operators`): an
#: :data:`Operator`, or anything SciPy's solvers take (a dense or ``scipy.sparse`` matrix,
#: a ``scipy.sparse.linalg.LinearOperator`` or an object with ``shape`` and ``matvec``) or
#: a lineax operator. SciPy and lineax are optional, so the type is open.
OperatorLike: TypeAlias = Operator | Any
