"""Structure edits of a DIA matrix: the transpose, and the stored diagonals changed
(``with_offsets``, ``eliminate_zeros``, ``with_diagonal``, SciPy's ``setdiag`` as a pure
function); the work is ``_ops.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Self

from . import _ops
from ._matrix_base import MatrixBase
from ._parts import reads_data
from ._typing import ArrayLike, Offsets


class Structure(MatrixBase):
    """``DiaMatrix``'s structure edits (see the module docstring)."""

    __slots__ = ()

    @property
    @reads_data("A.T")
    def T(self) -> Self:
        """The transpose, a DiaMatrix of shape ``(n, m)`` with offsets negated.

        Eagerly ``data`` is shifted into a new array (as SciPy's ``A.T`` does); inside
        ``jax.jit``, ``A.T @ x`` reads ``A.data`` in place, as ``x @ A`` does.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([[1.0, 2.0]], offsets=[1], shape=(3, 3))
          >>> A.T.offsets, A.T.todense()[1:, 0:2].tolist()
          ((-1,), [[1.0, 0.0], [0.0, 2.0]])
        """
        return self._wrap(_ops.transposed(self._parts))

    def transpose(self, axes: Sequence[int] | None = None) -> Self:
        """``A.T``; ``axes`` may only be None or ``(1, 0)`` (as in SciPy).

        Example:
          >>> import jaxdia
          >>> A = jaxdia.eye(2, 3, k=1)
          >>> A.transpose().shape, A.transpose().offsets
          ((3, 2), (-1,))
        """
        if axes is not None and (not isinstance(axes, Sequence) or tuple(axes) != (1, 0)):
            raise ValueError(
                f"axes must be None or (1, 0): a sparse matrix can only swap its two "
                f"dimensions, got {axes!r}"
            )
        return self.T

    @reads_data("A.with_offsets(offsets)")
    def with_offsets(self, offsets: Offsets, *, check: bool = True) -> Self:
        """The same matrix stored with exactly the diagonals ``offsets``.

        New diagonals are zero. Offsets outside the matrix are ignored (a DiaMatrix holds
        none). Dropping a diagonal is checked: it must be zero in bounds.

        Args:
          offsets: the diagonals to store (static ints).
          check: whether to check that dropped diagonals are zero. Under ``jit``,
            ``vmap`` or ``grad`` the data cannot be checked, so dropping a diagonal then
            raises unless ``check=False`` (which discards the dropped entries).

        Raises:
          ValueError: on duplicate offsets, or if a dropped diagonal holds a nonzero (or
            cannot be checked).

        Example:
          >>> import jaxdia
          >>> jaxdia.eye(3).with_offsets([-1, 0]).offsets
          (-1, 0)
        """
        return self._wrap(_ops.with_offsets(self._parts, offsets, check=check))

    @reads_data("A.eliminate_zeros()")
    def eliminate_zeros(self) -> Self:
        """The matrix without the diagonals that are zero in bounds (in every batch member).

        Needs concrete data: the result's offsets depend on the values.

        Raises:
          ValueError: under ``jit``/``vmap``/``grad``.

        Example:
          >>> import jaxdia
          >>> (jaxdia.eye(3) * 0.0).eliminate_zeros().offsets
          ()
        """
        return self._wrap(_ops.eliminate_zeros(self._parts))

    @reads_data("A.with_diagonal(values, k)")
    def with_diagonal(self, values: ArrayLike, k: int = 0) -> Self:
        """SciPy's ``setdiag(values, k)`` as a pure function: a new matrix.

        A scalar fills the whole diagonal ``k``; an array sets its first ``len(values)``
        entries (longer arrays are truncated, and the rest of the diagonal is unchanged).
        Leading dims of ``values`` broadcast with the batch. The offset is added if absent.

        Raises:
          ValueError: if diagonal ``k`` lies outside the matrix ("k exceeds array
            dimensions").
          TypeError: if ``k`` is not an int, or complex values meet a real matrix.

        Example:
          >>> import jaxdia
          >>> jaxdia.eye(3).with_diagonal([5.0, 6.0], k=1).todense()
          Array([[1., 5., 0.],
                 [0., 1., 6.],
                 [0., 0., 1.]], dtype=float32)
        """
        parts = self._parts
        return self._result(parts, _ops.with_diagonal(parts, values, k))
