"""Pallas GPU kernels (Triton backend) for the DIA products ``A @ X``, ``A^T @ X`` and SDDMM.

The semantics are exactly those of :mod:`jaxdia._kernels.xla` (``spmm_xla``, ``sddmm_xla``); this
module only changes how they run on an NVIDIA or AMD GPU. It is imported lazily by the
platform lowering rules, so importing :mod:`jaxdia` never imports Pallas.

Design (``docs/design.md`` records the designs that lower and those that did not):

* whole-array refs (no BlockSpecs); the grid is ``(row blocks, column blocks of X, batch)``
  for ``spmm`` and ``(data-column blocks, batch)`` for ``sddmm``, where the batch axis runs
  over the flattened broadcast batch and each operand finds its own batch entry by static
  index arithmetic (a broadcast dimension of size 1 is simply not advanced);
* a static Python loop over the offsets; every load goes through integer-array indexing with
  a mask (``pallas.triton.load(ref.at[...], mask=..., other=0)``), so padding slots of
  ``data`` and rows outside the matrix are never read as entries. Load indices are clamped
  into the array as well (harmless on hardware, needed by interpret mode); store indices
  are never clamped, only masked;
* every tensor has a power-of-2 size (Triton's rule): the block sizes are powers of 2 and
  the ragged edges are masked;
* 16-bit floats accumulate in float32; complex numbers are split into real and imaginary
  planes outside the kernel (Triton has no complex type) and the products are formed on
  the planes, without conjugation.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

from .._geometry import accumulation_dtype, diagonal_bounds
from .pallas_common import broadcast_batch_index, kernel_out_shape, product_operands

_SUPPORTED = frozenset(
    np.dtype(d)
    for d in (
        jnp.float32,
        jnp.float64,
        jnp.bfloat16,
        jnp.float16,
        jnp.complex64,
        jnp.complex128,
    )
)


def supports(dtype) -> bool:
    """Whether the Triton kernels handle ``dtype``.

    Example:
        >>> from jaxdia._kernels.pallas_triton import supports
        >>> import jax.numpy as jnp
        >>> supports(jnp.float32), supports(jnp.complex128), supports(jnp.int32)
        (True, True, False)
    """
    return np.dtype(dtype) in _SUPPORTED


def _is_power_of_2(value: int) -> bool:
    return value >= 1 and value & (value - 1) == 0


def _next_power_of_2(value: int) -> int:
    return 1 << max(0, int(value) - 1).bit_length()


@dataclasses.dataclass(frozen=True)
class BlockSizes:
    """Tile sizes of one Triton program (all powers of 2).

    Attributes:
        rows: matrix rows (``spmm``: output rows; ``sddmm``: data columns) per program.
        cols: columns of ``X`` per program (``spmm``) or per step of the column loop
            (``sddmm``).
        num_warps: warps per program.
        num_stages: software-pipelining stages (``None``: Pallas' default).

    Example:
        >>> from jaxdia._kernels.pallas_triton import BlockSizes
        >>> import jax.numpy as jnp
        >>> BlockSizes.default((1000, 1000), 1, jnp.float32)
        BlockSizes(rows=1024, cols=1, num_warps=4, num_stages=None)
        >>> BlockSizes(rows=32, cols=2).cols
        2
    """

    rows: int
    cols: int
    num_warps: int = 4
    num_stages: int | None = None

    def __post_init__(self):
        for name in ("rows", "cols", "num_warps"):
            if not _is_power_of_2(getattr(self, name)):
                raise ValueError(
                    f"BlockSizes.{name} must be a power of 2, got {getattr(self, name)}"
                )

    @classmethod
    def default(cls, shape: tuple[int, int], n_cols: int, dtype, *, op: str = "spmm") -> BlockSizes:
        """The heuristic: a tile of about 2048 (``op="spmm"``) or 1024 (``"sddmm"``) words.

        Words are 32-bit registers: float64 and complex64 entries take 2, complex128 ones
        4. ``cols`` covers all columns of ``X`` up to 16 (8 for the SDDMM, which holds a
        tile of ``X`` and one of ``G`` at a time), so ``X`` is read in whole rows; ``rows``
        fills the rest of the budget (16 to 1024), capped at the matrix' larger side
        rounded up to a power of 2. Tiles of more than 1024 entries get 8 warps. Compiled
        for sm_90 with Triton 3.9 (5 diagonals; 1, 8 and 20 columns; every dtype) these
        tiles take 32-168 registers per thread and never spill; their speed is
        unmeasured: a starting point to tune.
        """
        dtype = np.dtype(dtype)
        plane = np.dtype(jnp.finfo(dtype).dtype)
        words = (2 if dtype.kind == "c" else 1) * (2 if plane.itemsize >= 8 else 1)
        budget, max_cols = (1024, 8) if op == "sddmm" else (2048, 16)
        cols = min(_next_power_of_2(max(n_cols, 1)), max_cols)
        rows = max(16, min(1024, budget // (cols * words)))
        rows = min(rows, _next_power_of_2(max(shape[0], shape[1], 1)))
        return cls(rows=rows, cols=cols, num_warps=8 if rows * cols > 1024 else 4)

    def compiler_params(self) -> pltriton.CompilerParams:
        """The Triton compiler parameters these sizes imply."""
        return pltriton.CompilerParams(num_warps=self.num_warps, num_stages=self.num_stages)


# ---------------------------------------------------------------------------------------
# Shared helpers: batch broadcasting, real/imaginary planes, masked loads.


def _planes(array: Array) -> tuple[Array, ...]:
    if jnp.iscomplexobj(array):
        return jnp.real(array), jnp.imag(array)
    return (array,)


def _flatten_batch(array: Array) -> Array:
    return array.reshape(-1, *array.shape[-2:])


def _mul(a: tuple[Array, ...], b: tuple[Array, ...]) -> tuple[Array, ...]:
    """Product of two (real,) or (real, imag) plane tuples."""
    if len(a) == 1:
        return (a[0] * b[0],)
    return (a[0] * b[0] - a[1] * b[1], a[0] * b[1] + a[1] * b[0])


def _load(refs, index, mask, acc):
    """Masked load of the same entries from every plane, converted to ``acc``."""
    return tuple(pltriton.load(ref.at[index], mask=mask, other=0).astype(acc) for ref in refs)


def _clamp(index: Array, size: int) -> Array:
    return jnp.minimum(jnp.maximum(index, 0), size - 1)


def _iota(size: int) -> Array:
    return lax.broadcasted_iota(jnp.int32, (size,), 0)


# ---------------------------------------------------------------------------------------
# spmm: y = A @ x (or A^T @ x).


def _spmm_kernel(
    # inputs
    *refs,
    # static configuration
    n_planes: int,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool,
    batch: tuple[int, ...],
    data_batch: tuple[int, ...],
    x_batch: tuple[int, ...],
    n_cols: int,
    acc_dtype,
    # block information
    block_rows: int,
    block_cols: int,
):
    data_refs = refs[:n_planes]
    x_refs = refs[n_planes : 2 * n_planes]
    out_refs = refs[2 * n_planes :]
    m, n = shape
    x_rows, out_rows = (m, n) if transpose else (n, m)
    row_block, col_block, flat_batch = pl.program_id(0), pl.program_id(1), pl.program_id(2)
    data_b = broadcast_batch_index(flat_batch, batch, data_batch)
    x_b = broadcast_batch_index(flat_batch, batch, x_batch)

    rows = row_block * block_rows + _iota(block_rows)  # output rows
    cols = col_block * block_cols + _iota(block_cols)
    col_ok = cols < n_cols
    cols_clamped = _clamp(cols, n_cols)[None, :]
    acc = tuple(jnp.zeros((block_rows, block_cols), acc_dtype) for _ in range(n_planes))
    for k, offset in enumerate(offsets):
        start, stop = diagonal_bounds(offset, shape)
        if stop <= start:
            continue
        # Matrix column j of each output row, and the row of x it multiplies.
        if transpose:
            j, x_row = rows, rows - offset
        else:
            j, x_row = rows + offset, rows + offset
        ok = (j >= start) & (j < stop)
        diagonal = _load(data_refs, (data_b, k, _clamp(j, n)), ok, acc_dtype)
        x_block = _load(
            x_refs,
            (x_b, _clamp(x_row, x_rows)[:, None], cols_clamped),
            ok[:, None] & col_ok[None, :],
            acc_dtype,
        )
        product = _mul(tuple(d[:, None] for d in diagonal), x_block)
        acc = tuple(a + p for a, p in zip(acc, product))
    store_mask = (rows < out_rows)[:, None] & col_ok[None, :]
    for out_ref, value in zip(out_refs, acc):
        pltriton.store(
            out_ref.at[flat_batch, rows[:, None], cols[None, :]],
            value.astype(out_ref.dtype),
            mask=store_mask,
        )


def spmm(
    data: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
    block_sizes: BlockSizes | None = None,
    interpret: bool = False,
) -> Array:
    """``A @ x`` (or ``A^T @ x``, no conjugation) with a Pallas Triton kernel.

    Args:
        data: ``(*B, n_diags, n)`` diagonals in SciPy's DIA layout.
        x: ``(*B, rows, c)`` with ``rows == n`` (or ``m`` with ``transpose=True``); its batch
            dimensions have the rank of ``data``'s and broadcast against them.
        offsets: static, sorted, distinct diagonal offsets (``len(offsets) == n_diags``).
        shape: the matrix shape ``(m, n)``.
        transpose: compute ``A^T @ x`` instead.
        block_sizes: tile sizes; ``BlockSizes.default(shape, c, dtype)`` when ``None``.
        interpret: run the kernel in Pallas' interpreter (any backend, for tests).

    Returns:
        ``(*B, m, c)`` (or ``(*B, n, c)``) of the inputs' dtype.

    Example:
        >>> from jaxdia._kernels.pallas_triton import spmm
        >>> import numpy as np
        >>> data = np.array([[1., 2., 3.], [4., 5., 6.]], np.float32)
        >>> y = spmm(data, np.ones((3, 1), np.float32), offsets=(0, 1), shape=(3, 3),
        ...          interpret=True)
        >>> y[:, 0].tolist()  # [1 + 5, 2 + 6, 3]
        [6.0, 8.0, 3.0]
    """
    data, x, dtype, batch, n_cols = product_operands(data, x)
    m, n = shape
    out_rows = n if transpose else m
    out_shape = (*batch, out_rows, n_cols)
    if not offsets or math.prod(out_shape) == 0 or m == 0 or n == 0:
        return jnp.zeros(out_shape, dtype)
    if block_sizes is None:
        block_sizes = BlockSizes.default(shape, n_cols, dtype)
    acc_dtype = accumulation_dtype(jnp.finfo(dtype).dtype)  # of one real plane
    data_planes = [_flatten_batch(p) for p in _planes(data.astype(dtype))]
    x_planes = [_flatten_batch(p) for p in _planes(x.astype(dtype))]
    n_batch = math.prod(batch)
    plane_dtype = data_planes[0].dtype
    kernel = functools.partial(
        _spmm_kernel,
        n_planes=len(data_planes),
        offsets=tuple(offsets),
        shape=(m, n),
        transpose=transpose,
        batch=batch,
        data_batch=tuple(data.shape[:-2]),
        x_batch=tuple(x.shape[:-2]),
        n_cols=n_cols,
        acc_dtype=acc_dtype,
        block_rows=block_sizes.rows,
        block_cols=block_sizes.cols,
    )
    out = pl.pallas_call(
        kernel,
        out_shape=[
            kernel_out_shape((n_batch, out_rows, n_cols), plane_dtype, x) for _ in data_planes
        ],
        grid=(
            pl.cdiv(out_rows, block_sizes.rows),
            pl.cdiv(n_cols, block_sizes.cols),
            n_batch,
        ),
        compiler_params=block_sizes.compiler_params(),
        interpret=interpret,
        name="jaxdia_spmm_t" if transpose else "jaxdia_spmm",
    )(*data_planes, *x_planes)
    y = out[0] if len(out) == 1 else lax.complex(*out)
    return y.reshape(out_shape).astype(dtype)


# ---------------------------------------------------------------------------------------
# sddmm: D[k, j] = sum_c g[j - offsets[k], c] * x[j, c].


def _sddmm_kernel(
    # inputs
    *refs,
    # static configuration
    n_planes: int,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    batch: tuple[int, ...],
    g_batch: tuple[int, ...],
    x_batch: tuple[int, ...],
    n_cols: int,
    acc_dtype,
    # block information
    block_rows: int,
    block_cols: int,
):
    g_refs = refs[:n_planes]
    x_refs = refs[n_planes : 2 * n_planes]
    out_refs = refs[2 * n_planes :]
    m, n = shape
    col_block, flat_batch = pl.program_id(0), pl.program_id(1)
    g_b = broadcast_batch_index(flat_batch, batch, g_batch)
    x_b = broadcast_batch_index(flat_batch, batch, x_batch)

    j = col_block * block_rows + _iota(block_rows)  # matrix (= data) columns
    j_clamped = _clamp(j, n)
    bounds = [diagonal_bounds(offset, shape) for offset in offsets]
    live = [k for k, (start, stop) in enumerate(bounds) if start < stop]
    in_bounds = {k: (j >= bounds[k][0]) & (j < bounds[k][1]) for k in live}

    def column_step(step, sums):
        cols = step * block_cols + _iota(block_cols)
        col_ok = (cols < n_cols)[None, :]
        cols_clamped = _clamp(cols, n_cols)[None, :]
        x_block = _load(
            x_refs, (x_b, j_clamped[:, None], cols_clamped), (j < n)[:, None] & col_ok, acc_dtype
        )
        new_sums = []
        for k, total in zip(live, sums):
            g_rows = _clamp(j - offsets[k], m)[:, None]
            g_block = _load(
                g_refs, (g_b, g_rows, cols_clamped), in_bounds[k][:, None] & col_ok, acc_dtype
            )
            product = _mul(g_block, x_block)
            new_sums.append(tuple(t + p.sum(axis=1) for t, p in zip(total, product)))
        return new_sums

    zeros = tuple(jnp.zeros((block_rows,), acc_dtype) for _ in range(n_planes))
    sums = lax.fori_loop(0, pl.cdiv(n_cols, block_cols), column_step, [zeros] * len(live))
    sums = dict(zip(live, sums))
    store_mask = j < n
    for k in range(len(offsets)):
        for plane, out_ref in enumerate(out_refs):
            # Padding slots get an exact 0 (not a sum of masked loads).
            value = jnp.where(in_bounds[k], sums[k][plane], 0) if k in sums else zeros[plane]
            pltriton.store(
                out_ref.at[flat_batch, k, j], value.astype(out_ref.dtype), mask=store_mask
            )


def sddmm(
    g: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    block_sizes: BlockSizes | None = None,
    interpret: bool = False,
) -> Array:
    """``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` with a Pallas Triton kernel.

    It is the cotangent of ``data`` in ``y = A @ x`` (``g`` the cotangent of ``y``).

    Args:
        g: ``(*B, m, c)``.
        x: ``(*B, n, c)``; its batch dimensions have the rank of ``g``'s and broadcast
            against them.
        offsets: static, sorted, distinct diagonal offsets.
        shape: the matrix shape ``(m, n)``.
        block_sizes: tile sizes (``rows``: data columns per program, ``cols``: columns of
            ``x`` per loop step); ``BlockSizes.default(shape, c, dtype, op="sddmm")`` when
            ``None``.
        interpret: run the kernel in Pallas' interpreter (any backend, for tests).

    Returns:
        ``(*B, len(offsets), n)`` of the inputs' dtype, exactly 0 in padding slots.

    Example:
        >>> from jaxdia._kernels.pallas_triton import sddmm
        >>> import numpy as np
        >>> g = np.array([[1.], [2.]], np.float32)
        >>> x = np.array([[3.], [4.]], np.float32)
        >>> sddmm(g, x, offsets=(-1, 0), shape=(2, 2), interpret=True).tolist()
        [[6.0, 0.0], [3.0, 8.0]]
    """
    g, x, dtype, batch, n_cols = product_operands(g, x)
    m, n = shape
    out_shape = (*batch, len(offsets), n)
    if math.prod(out_shape) == 0 or m == 0 or n_cols == 0:
        return jnp.zeros(out_shape, dtype)
    if block_sizes is None:
        block_sizes = BlockSizes.default(shape, n_cols, dtype, op="sddmm")
    acc_dtype = accumulation_dtype(jnp.finfo(dtype).dtype)  # of one real plane
    g_planes = [_flatten_batch(p) for p in _planes(g.astype(dtype))]
    x_planes = [_flatten_batch(p) for p in _planes(x.astype(dtype))]
    n_batch = math.prod(batch)

    kernel = functools.partial(
        _sddmm_kernel,
        n_planes=len(g_planes),
        offsets=tuple(offsets),
        shape=(m, n),
        batch=batch,
        g_batch=tuple(g.shape[:-2]),
        x_batch=tuple(x.shape[:-2]),
        n_cols=n_cols,
        acc_dtype=acc_dtype,
        block_rows=block_sizes.rows,
        block_cols=block_sizes.cols,
    )
    out = pl.pallas_call(
        kernel,
        out_shape=[
            kernel_out_shape((n_batch, len(offsets), n), g_planes[0].dtype, x) for _ in g_planes
        ],
        grid=(pl.cdiv(n, block_sizes.rows), n_batch),
        compiler_params=block_sizes.compiler_params(),
        interpret=interpret,
        name="jaxdia_sddmm",
    )(*g_planes, *x_planes)
    d = out[0] if len(out) == 1 else lax.complex(*out)
    return d.reshape(out_shape).astype(dtype)
