"""``DiaParts``: a DIA matrix as its three parts, the currency of the array-level layer.

The operations below :class:`jaxdia.DiaMatrix` (arithmetic, conversions, traces, solvers)
take and return ``DiaParts``: ``data`` of shape ``(..., n_diags, n)`` and the static
``offsets`` and ``shape``. It is a pytree with the same structure as ``DiaMatrix`` (``data``
the only leaf), so the operations can be jitted with a structure-keyed cache, but it
carries no validation and no methods: its producers keep it canonical (offsets sorted,
distinct and inside the matrix; ``data`` of width ``n``), and ``DiaMatrix`` wraps it as it
is.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

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


jax.tree_util.register_pytree_node(
    DiaParts,
    lambda parts: ((parts.data,), (parts.offsets, parts.shape)),
    lambda aux, children: DiaParts(children[0], *aux),
)
