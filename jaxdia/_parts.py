"""``DiaParts``: a DIA matrix as its three parts, the currency of the array-level layer.

The operations below :class:`jaxdia.DiaMatrix` (arithmetic, conversions, traces, solvers)
take and return ``DiaParts``: ``data`` of shape ``(..., n_diags, n)`` and the static
``offsets`` and ``shape``. It is a pytree with the same structure as ``DiaMatrix`` (``data``
the only leaf), so the operations can be jitted with a structure-keyed cache, but it
carries no validation and no methods: its producers keep it canonical (offsets sorted,
distinct and inside the matrix; ``data`` of width ``n``), and ``DiaMatrix`` wraps it as it
is. :func:`check_layout` and :func:`reads_data` check the layout of ``data`` where it
cannot be trusted: in a ``DiaMatrix`` that a JAX transformation rebuilt.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any, Protocol, TypeVar, cast

import jax
import numpy as np


class DiaParts:
    """``data`` ``(..., n_diags, n)`` with static ``offsets`` and ``shape`` ``(m, n)``.

    Unpacks as ``data, offsets, shape = parts``. Not a tuple: operand checks tell
    sequences (SciPy accepts lists as dense operands) from matrices.
    """

    __slots__ = ("data", "offsets", "shape")

    def __init__(self, data: Any, offsets: tuple[int, ...], shape: tuple[int, int]):
        self.data = data
        self.offsets = offsets
        self.shape = shape

    def __iter__(self) -> Iterator[Any]:
        return iter((self.data, self.offsets, self.shape))

    @property
    def batch_shape(self) -> tuple[int, ...]:
        return tuple(self.data.shape[:-2])

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self.data.dtype)

    @property
    def n_diags(self) -> int:
        return len(self.offsets)

    def with_data(self, data: Any) -> DiaParts:
        """The same offsets and shape with new ``data`` (elementwise maps)."""
        return DiaParts(data, self.offsets, self.shape)


class Laid(Protocol):
    """What the layout checks read: a ``DiaMatrix`` or ``DiaParts``."""

    @property
    def data(self) -> Any: ...
    @property
    def offsets(self) -> tuple[int, ...]: ...
    @property
    def shape(self) -> tuple[int, int]: ...


def data_shape(A: Laid) -> tuple[int, ...] | None:
    """The shape of ``A.data``, or None when it is not an array (nor an abstract one): a
    scalar, a placeholder, or a matrix (``jax.hessian`` nests them)."""
    shape = getattr(A.data, "shape", None)  # every array type's shape is a tuple
    return shape if isinstance(shape, tuple) and not hasattr(A.data, "offsets") else None


def data_tail(A: Laid) -> tuple[int, int]:
    """The trailing dims ``(n_diags, n)`` that ``A.data`` must have."""
    return len(A.offsets), A.shape[1]


def check_layout(A: Laid, what: str) -> None:
    """Raises a ValueError unless ``A.data`` (of a DiaMatrix or DiaParts) is laid out as
    ``(..., n_diags, n)``.

    The constructor guarantees that layout, but ``tree_unflatten`` cannot check it (JAX
    calls it with whatever leaves a transformation made, scalars and placeholders
    included), and two common ``vmap`` mistakes break it: mapping over a matrix without
    batch dims hands each call ``data`` of shape ``(n,)`` (one diagonal), and
    ``in_axes``/``out_axes`` other than 0 put a batch axis behind the diagonals. Reading
    such ``data`` would take the wrong slots silently, so every operation that reads it
    checks first. Non-array leaves are left to fail on their own.
    """
    shape = data_shape(A)
    expected = data_tail(A)
    if shape is None or shape[-2:] == expected:
        return
    raise ValueError(
        f"{what}: the DiaMatrix's data has shape {shape}, but its shape {A.shape} and "
        f"offsets {A.offsets} need data of shape (..., {expected[0]}, {expected[1]}). Under "
        "jax.vmap this comes from mapping over a matrix without batch dims (give it "
        "in_axes=None) or from in_axes/out_axes other than 0 for a DiaMatrix (its batch "
        "dims lead data)."
    )


_Method = TypeVar("_Method", bound=Callable[..., Any])


def reads_data(what: str) -> Callable[[_Method], _Method]:
    """Marks a method that reads ``data``: it checks the layout of the matrices it gets
    (``self``, and arguments of ``self``'s class) first, see :func:`check_layout`."""

    def decorate(method: _Method) -> _Method:
        @functools.wraps(method)
        def checked(self: Laid, *args: Any, **kwargs: Any) -> Any:
            check_layout(self, what)
            for arg in args:
                if isinstance(arg, type(self)):
                    check_layout(arg, what)
            return method(self, *args, **kwargs)

        return cast(_Method, checked)

    return decorate


jax.tree_util.register_pytree_node(
    DiaParts,
    lambda parts: ((parts.data,), (parts.offsets, parts.shape)),
    lambda aux, children: DiaParts(children[0], *aux),
)
