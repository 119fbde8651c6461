"""What the Pallas kernels share: a batch grid axis over broadcast operands, and output
types inside ``shard_map``."""

from __future__ import annotations

import math
from collections.abc import Sequence

import jax
import numpy as np
from jax import Array, lax


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
