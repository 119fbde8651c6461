"""What the Pallas kernels share: their wrappers' operands, a batch grid axis over
broadcast operands, and output types inside ``shard_map``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.typing import ArrayLike


def product_operands(
    a: ArrayLike, x: ArrayLike
) -> tuple[Array, Array, np.dtype, tuple[int, ...], int]:
    """The operands of a product wrapper (``spmm(data, x)``, ``sddmm(g, x)``): ``a`` and
    ``x`` as JAX arrays, their result dtype, their broadcast batch shape, and the number
    of columns of ``x``."""
    a, x = jnp.asarray(a), jnp.asarray(x)
    batch = tuple(np.broadcast_shapes(a.shape[:-2], x.shape[:-2]))
    return a, x, np.dtype(jnp.result_type(a, x)), batch, x.shape[-1]


def round_up(value: int, multiple: int) -> int:
    """The least multiple of ``multiple`` that is at least ``value``."""
    return -(-value // multiple) * multiple


def broadcast_batch_index(
    flat: Array, batch: tuple[int, ...], operand_batch: tuple[int, ...]
) -> Array | int:
    """Flat index into ``operand_batch`` of entry ``flat`` of the broadcast ``batch``.

    The Pallas kernels run a grid axis over the flattened broadcast batch and find each
    operand's entry with this. Static index arithmetic: a dimension the operand broadcasts
    (size 1) is not advanced. ``lax.div``/``lax.rem`` (the indices are non-negative) avoid
    the sign logic of ``//``.
    """
    if operand_batch == batch:
        return flat
    index = 0
    stride_out, stride_op = 1, 1
    for size, op_size in zip(reversed(batch), reversed(operand_batch)):
        if op_size == size and size > 1:
            position = flat if stride_out == 1 else lax.div(flat, np.int32(stride_out))
            if stride_out * size < math.prod(batch):
                position = lax.rem(position, np.int32(size))
            index = index + position * stride_op
        stride_out *= size
        stride_op *= op_size
    return index


def kernel_out_shape(shape: Sequence[int], dtype, like: Array) -> jax.ShapeDtypeStruct:
    """A Pallas ``out_shape`` that varies over the manual mesh axes ``like`` varies over.

    Inside ``shard_map`` with ``check_vma=True`` (its default) ``pallas_call`` must be
    told which; outside, the set is empty.
    """
    mat = jax.typeof(like).manual_axis_type
    return jax.ShapeDtypeStruct(tuple(shape), dtype, manual_axis_type=mat)
