"""Pallas Mosaic GPU kernels for the DIA products ``A @ X``, ``A^T @ X`` and SDDMM.

The semantics are exactly those of :mod:`jaxdia._kernels.xla` (``spmm_xla``, ``sddmm_xla``); this
module only changes how they run on an NVIDIA GPU of compute capability 9.0 or newer
(Hopper, Blackwell), where Pallas's Mosaic GPU backend copies with the TMA engine. It is
imported lazily by the platform lowering rules, so importing :mod:`jaxdia` never imports
Pallas. ``docs/design.md`` ("GPU (Mosaic GPU)") argues the design with its roofline.

Design:

* a 1-D grid over (flattened broadcast batch) x (tiles of ``rows`` output rows); each
  program handles one tile. The last tile of a batch entry is shifted back to end at the
  last row (it recomputes, and rewrites with the same values, rows of its neighbour), so
  every tile is full and every store in bounds; outputs shorter than one tile are
  computed into a tile-sized buffer and sliced;
* every operand is read through TMA copies of at most 256 elements (TMA's limit per box
  dimension) into shared memory: for each diagonal, the slice of ``data`` its rows need,
  and for each group of diagonals whose shifts lie within a tile of each other, one
  slice of ``X``'s column covering all of them (the tile plus its halo). TMA starts a
  copy at any element and fills what lies past the end of the array with zeros. Copies
  never start before the array's first element (Pallas's GPU interpreter does not fill
  there, and a negative start is not needed): a window that would is started at 0 and
  read from a shifted position, with a tile of spare shared memory in front of the
  buffers so that the shifted read stays inside them;
* the products read each window at a static shift (a dynamic one at the array's start)
  with one element per thread and load (no vector loads, which need alignment that a
  shift breaks); a select with the diagonal's static row bounds keeps padding slots,
  rows outside the matrix and stale shared memory out of every sum, so none of them is
  ever read as an entry;
* ``X`` is read column by column, so the kernels take it column-major: the wrappers
  transpose ``(rows, c)`` operands to ``(c, rows)`` (a free reshape for one column) and
  the result back. Columns are processed in blocks of ``cols``; ``data``'s windows are
  loaded once per tile for all of them;
* float32, bfloat16 and float16 (accumulated in float32), and float64, which TMA does not
  copy as a float: it is moved as uint64 and bitcast in registers (where the installed
  JAX lowers that bitcast). Complex dtypes are not handled here (XLA or Triton are).

Each operand is addressed as 2-D ``(lines, width)`` (a line is one diagonal or one column
of one batch entry) when a line's byte size is a multiple of 16 (TMA's stride rule), else
as its flat 1-D form; TMA's coordinates are 32-bit, which bounds the flat form to 2**31
elements (:func:`feasible` says when an operand is too large for both).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

from .._geometry import accumulation_dtype, live_terms
from .pallas_common import broadcast_batch_index, kernel_out_shape, product_operands
from .pallas_mosaic_gpu_plan import (
    BlockSizes,
    Plan,
    View,
    operand_views,
    storage_dtype,
    tile_plan,
)

_FLOAT_DTYPES = frozenset(np.dtype(d) for d in (jnp.float32, jnp.bfloat16, jnp.float16))
_LANE = plgpu.LoweringSemantics.Lane
# A Hopper-class GPU: TMA, and Mosaic GPU's primary target.
MIN_COMPUTE_CAPABILITY = (9, 0)


def _lowers(primitive) -> bool:
    """Whether the installed Mosaic GPU lowers ``primitive`` with Lane semantics (read
    from its private rule table; a JAX that moved the table counts as not lowering)."""
    try:
        from jax._src.pallas.mosaic_gpu import core, lowering

        semantics = core.PrimitiveSemantics.Warpgroup
        return primitive in lowering.mosaic_lowering_rules[(_LANE, semantics)]
    except (ImportError, AttributeError, KeyError):
        return False


@functools.cache
def _float64_lowers() -> bool:
    return _lowers(lax.bitcast_convert_type_p)


def _interpreter_casts_layouts() -> bool:
    """Whether Pallas's GPU interpreter accepts ``layout_cast`` (jax 0.10.2's does not,
    0.12's does). A layout only decides which thread holds which element, so the
    interpreter computes the same values without it."""
    return jax.__version_info__ >= (0, 12)


def supports(dtype) -> bool:
    """Whether the Mosaic GPU kernels handle ``dtype`` with the installed JAX.

    Example:
        >>> from jaxdia._kernels.pallas_mosaic_gpu import supports
        >>> import jax.numpy as jnp
        >>> supports(jnp.float32), supports(jnp.complex64), supports(jnp.int32)
        (True, False, False)
    """
    dtype = np.dtype(dtype)
    return dtype in _FLOAT_DTYPES or (dtype == np.float64 and _float64_lowers())


def unsupported_device() -> str | None:
    """Why the GPU being compiled for cannot run the kernels, or ``None`` if it can.

    Without a GPU (lowering on a CPU-only machine) the target is taken to be Hopper, as
    Mosaic GPU itself does.
    """
    if jax.default_backend() != "gpu":
        return None
    device = jax.devices()[0]
    capability = getattr(device, "compute_capability", None)
    if not isinstance(capability, str) or not capability[:1].isdigit():
        return f"Mosaic GPU does not run on {device.device_kind}"  # e.g. ROCm's gfx names
    if tuple(int(part) for part in capability.split(".")[:2]) < MIN_COMPUTE_CAPABILITY:
        return (
            f"{device.device_kind} has compute capability {capability}; the Mosaic GPU "
            "kernels copy with TMA, which needs 9.0 (Hopper) or newer"
        )
    return None


# ---------------------------------------------------------------------------------------
# In-kernel helpers.


class _Kernel:
    """The static configuration and helpers one kernel body uses."""

    def __init__(self, plan: Plan, dtype: np.dtype, cast_layouts: bool):
        self.plan = plan
        self.dtype = dtype
        self.acc = accumulation_dtype(dtype)
        self.cast_layouts = cast_layouts
        self.layout = plgpu.Layout.WG_STRIDED((plan.rows,), vec_size=1)

    def iota(self):
        value = lax.broadcasted_iota(jnp.int32, (self.plan.rows,), 0)
        return plgpu.layout_cast(value, self.layout) if self.cast_layouts else value

    def copy(self, ref, view: View, line, start, smem, offset: int, length: int, barrier):
        """Copies ``length`` elements of ``line`` from row ``start`` into ``smem`` at
        ``offset``; returns where row ``start`` lands there (dynamic: below ``offset``
        when the copy had to start at the array's first element instead)."""
        coordinate = view.coordinate(line, start)
        first = jnp.maximum(coordinate, 0)
        chunk = self.plan.chunk
        for j in range(0, length, chunk):
            plgpu.copy_gmem_to_smem(
                view.at(ref, line, first + j, chunk),
                smem.at[pl.ds(offset + j, chunk)],
                barrier,
            )
        return offset + jnp.minimum(coordinate, 0)

    def read(self, smem, position):
        """``rows`` elements from ``position`` (clamped to the buffer: a position below
        it only occurs for windows none of whose rows is read as an entry), converted
        to the accumulation dtype."""
        value = smem[pl.ds(jnp.maximum(position, 0), self.plan.rows)]
        if self.cast_layouts:
            value = plgpu.layout_cast(value, self.layout)
        if self.dtype == np.float64:
            return lax.bitcast_convert_type(value, jnp.float64)
        return value.astype(self.acc)

    def stored(self, value):
        if self.dtype == np.float64:
            return lax.bitcast_convert_type(value, jnp.uint64)
        return value.astype(self.dtype)

    def zeros(self):
        value = jnp.zeros((self.plan.rows,), self.acc)
        return plgpu.layout_cast(value, self.layout) if self.cast_layouts else value

    def store(self, smem, offset: int, ref, view: View, line, start):
        chunk = self.plan.chunk
        for j in range(0, self.plan.rows, chunk):
            plgpu.copy_smem_to_gmem(
                smem.at[pl.ds(offset + j, chunk)],
                view.at(ref, line, view.coordinate(line, start) + j, chunk),
            )

    def column_blocks(self, n_cols: int, block, carry=None):
        """Runs ``block(first_column, width, barrier_index, carry)`` over the columns: the
        first block (barrier 0), the full blocks in a loop (barrier 1), the rest (2)."""
        cols = self.plan.cols
        first = min(cols, n_cols)
        carry = block(0, first, 0, carry)
        full, rest = divmod(n_cols - first, cols)
        if full:
            carry = lax.fori_loop(0, full, lambda i, c: block(first + i * cols, cols, 1, c), carry)
        if rest:
            carry = block(n_cols - rest, rest, 2, carry)
        return carry


def _barriers(plan: Plan, n_cols: int) -> list:
    """The barriers of the three kinds of column block (see ``_Kernel.column_blocks``);
    one that no block uses is never waited on."""
    first = min(plan.cols, n_cols)
    rest = (n_cols - first) % plan.cols
    arrivals = (plan.copies(first, True), plan.copies(plan.cols, False), plan.copies(rest, False))
    return [plgpu.Barrier(num_arrivals=max(a, 1)) for a in arrivals]


def _grid_position(rows: int, extent: int, batch: tuple[tuple[int, ...], ...]):
    """(flat batch index, first row, the two inputs' batch indices) of this program's
    tile of ``rows`` of the output's ``extent``; ``batch`` holds the broadcast batch and
    the inputs' batch shapes."""
    tiles = -(-extent // rows)
    program = lax.axis_index("programs")
    flat_batch = lax.div(program, np.int32(tiles))
    tile = lax.rem(program, np.int32(tiles))
    start = jnp.minimum(tile * rows, extent - rows)
    a_b = broadcast_batch_index(flat_batch, batch[0], batch[1])
    x_b = broadcast_batch_index(flat_batch, batch[0], batch[2])
    return flat_batch, start, a_b, x_b


# ---------------------------------------------------------------------------------------
# spmm: y = A @ x (or A^T @ x).


def _spmm_body(
    data_ref,
    x_ref,
    y_ref,
    data_smem,
    x_smem,
    y_smem,
    *barriers,
    k: _Kernel,
    views: tuple[View, View, View],
    batch: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
    n_cols: int,
    extent: int,
):
    plan = k.plan
    data_view, x_view, y_view = views
    flat_batch, r0, data_b, x_b = _grid_position(plan.rows, extent, batch)
    rows = r0 + k.iota()
    data_at = []
    for i, term in enumerate(plan.terms):
        line = data_b * plan.n_diags + term.k
        data_at.append(
            k.copy(
                data_ref,
                data_view,
                line,
                r0 + term.shift_d,
                data_smem,
                plan.rows * (1 + i),
                plan.rows,
                barriers[0],
            )
        )
    windows = plan.windows

    def block(col0, width, barrier, carry):
        x_at = []
        for ci in range(width):
            line = x_b * n_cols + col0 + ci
            base = plan.rows + ci * windows.size
            x_at.append(
                [
                    k.copy(
                        x_ref,
                        x_view,
                        line,
                        r0 + start,
                        x_smem,
                        base + offset,
                        length,
                        barriers[barrier],
                    )
                    for start, offset, length in zip(
                        windows.starts, windows.offsets, windows.lengths
                    )
                ]
            )
        plgpu.barrier_wait(barriers[barrier])
        sums = [None] * width
        for i, term in enumerate(plan.terms):
            d = k.read(data_smem, data_at[i])
            inside = (rows >= term.lo) & (rows < term.hi)
            w, shift = windows.reads[i]
            for ci in range(width):
                product = jnp.where(inside, d * k.read(x_smem, x_at[ci][w] + shift), 0)
                sums[ci] = product if sums[ci] is None else sums[ci] + product
        plgpu.wait_smem_to_gmem(0, wait_read_only=True)  # the last block's output is read
        for ci in range(width):
            y_smem[pl.ds(ci * plan.rows, plan.rows)] = k.stored(sums[ci])
        plgpu.commit_smem()
        for ci in range(width):
            k.store(y_smem, ci * plan.rows, y_ref, y_view, flat_batch * n_cols + col0 + ci, r0)
        return carry

    k.column_blocks(n_cols, block)
    plgpu.wait_smem_to_gmem(0)


def _column_major(array: Array, storage: np.dtype) -> Array:
    """``(*B, rows, c)`` as ``(prod(B) * c, rows)`` lines in the dtype TMA moves."""
    array = jnp.swapaxes(array, -1, -2)
    if storage != array.dtype:
        array = lax.bitcast_convert_type(array, storage)
    return array.reshape(-1, array.shape[-1])


def _lines(array: Array, storage: np.dtype) -> Array:
    """``(*B, lines, width)`` as ``(prod(B) * lines, width)`` in the dtype TMA moves."""
    if storage != array.dtype:
        array = lax.bitcast_convert_type(array, storage)
    return array.reshape(-1, array.shape[-1])


def _from_storage(array: Array, dtype: np.dtype) -> Array:
    return lax.bitcast_convert_type(array, dtype) if array.dtype != dtype else array


def _interpret_params(interpret: bool):
    if not interpret:
        return None
    from jax._src.pallas.mosaic_gpu.interpret.params import InterpretGPUParams

    if jax.__version_info__ >= (0, 12):
        return InterpretGPUParams()
    # jax 0.10.2's interpreter raises where a TMA copy reaches past the array's end
    # (the hardware fills zeros there); reading NaNs instead is as good a test that no
    # such element reaches a sum.
    return InterpretGPUParams(out_of_bounds_reads="uninitialized")


def _check_dtype(dtype, function: str) -> np.dtype:
    dtype = np.dtype(dtype)
    if not supports(dtype):
        raise TypeError(
            f"{function}: the Mosaic GPU kernels take float32, bfloat16, float16"
            f"{' and float64' if _float64_lowers() else ''}, got {dtype.name}"
        )
    return dtype


def _no_tile(op: str, offsets: Sequence[int]) -> str:
    spread = max(offsets, default=0) - min(offsets, default=0)
    return (
        f"no tile of {op} with {len(offsets)} diagonals spread over {spread} rows fits "
        "shared memory"
    )


def feasible(
    op: str,
    a_shape: tuple[int, ...],
    b_shape: tuple[int, ...],
    dtype,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool = False,
) -> str | None:
    """Why the Mosaic GPU kernel cannot compute this product, or ``None`` if it can.

    ``a_shape``/``b_shape`` are the operand shapes of the primitive (``data``, ``x`` for
    ``op="spmm"``; ``g``, ``x`` for ``"sddmm"``).

    Example:
        >>> from jaxdia._kernels.pallas_mosaic_gpu import feasible
        >>> import jax.numpy as jnp
        >>> feasible("spmm", (3, 100), (100, 1), jnp.float32, offsets=(-1, 0, 1),
        ...          shape=(100, 100)) is None
        True
        >>> feasible("spmm", (3, 100), (100, 1), jnp.complex64, offsets=(-1, 0, 1),
        ...          shape=(100, 100))
        'dtype complex64 is not one the Mosaic GPU kernels take'
    """
    dtype = np.dtype(dtype)
    if not supports(dtype):
        return f"dtype {dtype.name} is not one the Mosaic GPU kernels take"
    setup = _setup(op, a_shape, b_shape, dtype, offsets, shape, transpose)
    return setup if isinstance(setup, str) else None


def _operand_lines(op, a_shape, b_shape, shape, transpose, plan):
    """(lines, width) of both inputs and the output, as the kernels address them."""
    m, n = shape
    batch = math.prod(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    n_cols = b_shape[-1]
    if op == "spmm":
        out_rows = max(n if transpose else m, plan.rows)
        return (
            (math.prod(a_shape[:-2]) * a_shape[-2], n),
            (math.prod(b_shape[:-2]) * n_cols, b_shape[-2]),
            (batch * n_cols, out_rows),
        )
    return (
        (math.prod(a_shape[:-2]) * n_cols, m),
        (math.prod(b_shape[:-2]) * n_cols, n),
        (batch * plan.n_diags, max(n, plan.rows)),
    )


def _setup(
    op: str,
    a_shape: tuple[int, ...],
    x_shape: tuple[int, ...],
    dtype: np.dtype,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool,
    block_sizes: BlockSizes | None = None,
) -> tuple[Plan, np.dtype, tuple[View, View, View]] | str:
    """The plan, the dtype TMA moves and the operands' views of a product, or why the
    kernel cannot compute it (no tile fits, or an operand is too large)."""
    if block_sizes is None:
        n_cols = x_shape[-1]
        block_sizes = BlockSizes.default(shape, offsets, n_cols, dtype, op=op, transpose=transpose)
    if block_sizes is None:
        return _no_tile(op, offsets)
    terms = live_terms(offsets, shape, transpose if op == "spmm" else True)
    plan = tile_plan(op, terms, len(offsets), block_sizes)
    storage = storage_dtype(dtype)
    lines = _operand_lines(op, a_shape, x_shape, shape, transpose, plan)
    views = operand_views(plan, lines, storage.itemsize)
    if views is None:
        return "an operand is too large for TMA's 32-bit coordinates"
    return plan, storage, views


def _run(
    op: str,
    a: Array,
    x: Array,
    dtype: np.dtype,
    batch: tuple[int, ...],
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    transpose: bool,
    block_sizes: BlockSizes | None,
    interpret: bool,
) -> Array:
    """The kernel of ``op`` on ``a`` (``data`` for ``"spmm"``, ``g`` for ``"sddmm"``) and
    ``x`` of the broadcast ``batch``: one program per tile of ``plan.rows`` of the
    output's extent (its rows, or ``data``'s columns) per batch entry; the output
    ``(prod(batch), lines, extent)`` in ``dtype``. Raises the ValueError of
    :func:`feasible` when no tile fits or an operand is too large."""
    setup = _setup(op, a.shape, x.shape, dtype, offsets, shape, transpose, block_sizes)
    if isinstance(setup, str):
        raise ValueError(f"{op}: {setup}")
    plan, storage, views = setup
    spmm = op == "spmm"
    extent = (shape[1] if transpose else shape[0]) if spmm else shape[1]
    n_cols, alloc = x.shape[-1], max(extent, plan.rows)
    operands = (
        (_lines if spmm else _column_major)(a.astype(dtype), storage).reshape(views[0].shape()),
        _column_major(x.astype(dtype), storage).reshape(views[1].shape()),
    )
    k = _Kernel(plan, dtype, cast_layouts=not interpret or _interpreter_casts_layouts())
    batches = (batch, tuple(a.shape[:-2]), tuple(x.shape[:-2]))
    kernel = _spmm_body if spmm else _sddmm_body
    body = functools.partial(kernel, k=k, views=views, batch=batches, n_cols=n_cols, extent=alloc)
    out = plgpu.kernel(
        body,
        out_type=kernel_out_shape(views[2].shape(), storage, x),
        scratch_types=[
            plgpu.SMEM((plan.direct_size,), storage),
            plgpu.SMEM((plan.grouped_size,), storage),
            plgpu.SMEM((plan.out_size,), storage),
            *_barriers(plan, n_cols),
        ],
        grid=(math.prod(batch) * -(-alloc // plan.rows),),
        grid_names=("programs",),
        compiler_params=plgpu.CompilerParams(lowering_semantics=_LANE),
        interpret=_interpret_params(interpret),
        kernel_name=f"jaxdia_{op}_t" if spmm and transpose else f"jaxdia_{op}",
    )(*operands)
    return _from_storage(out.reshape(math.prod(batch), -1, alloc)[..., :extent], dtype)


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
    """``A @ x`` (or ``A^T @ x``, no conjugation) with a Pallas Mosaic GPU kernel.

    Args:
        data: ``(*B, n_diags, n)`` diagonals in SciPy's DIA layout.
        x: ``(*B, rows, c)`` with ``rows == n`` (or ``m`` with ``transpose=True``); its batch
            dimensions have the rank of ``data``'s and broadcast against them.
        offsets: static, sorted, distinct diagonal offsets (``len(offsets) == n_diags``).
        shape: the matrix shape ``(m, n)``.
        transpose: compute ``A^T @ x`` instead.
        block_sizes: tile sizes; ``BlockSizes.default(...)`` when ``None``.
        interpret: run the kernel in Pallas's GPU interpreter (any backend, for tests).

    Returns:
        ``(*B, m, c)`` (or ``(*B, n, c)``) of the inputs' dtype.

    Raises:
        TypeError: for a dtype the kernels do not take (see :func:`supports`).
        ValueError: when no tile fits or an operand is too large (see :func:`feasible`).

    Example:
        >>> from jaxdia._kernels.pallas_mosaic_gpu import spmm
        >>> import numpy as np
        >>> data = np.array([[1., 2., 3.], [4., 5., 6.]], np.float32)
        >>> y = spmm(data, np.ones((3, 1), np.float32), offsets=(0, 1), shape=(3, 3),
        ...          interpret=True)
        >>> y[:, 0].tolist()  # [1 + 5, 2 + 6, 3]
        [6.0, 8.0, 3.0]
    """
    data, x, dtype, batch, n_cols = product_operands(data, x)
    dtype = _check_dtype(dtype, "spmm")
    m, n = shape
    out_rows = n if transpose else m
    out_shape = (*batch, out_rows, n_cols)
    terms = live_terms(offsets, shape, transpose)
    if not terms or math.prod(out_shape) == 0:
        return jnp.zeros(out_shape, dtype)
    y = _run("spmm", data, x, dtype, batch, offsets, shape, transpose, block_sizes, interpret)
    return jnp.swapaxes(y, -1, -2).reshape(out_shape)


# ---------------------------------------------------------------------------------------
# sddmm: D[k, j] = sum_c g[j - offsets[k], c] * x[j, c].


def _sddmm_body(
    g_ref,
    x_ref,
    d_ref,
    x_smem,
    g_smem,
    d_smem,
    *barriers,
    k: _Kernel,
    views: tuple[View, View, View],
    batch: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]],
    n_cols: int,
    extent: int,
):
    plan = k.plan
    g_view, x_view, d_view = views
    flat_batch, j0, g_b, x_b = _grid_position(plan.rows, extent, batch)
    windows = plan.windows

    def block(col0, width, barrier, sums):
        x_at, g_at = [], []
        for ci in range(width):
            x_at.append(
                k.copy(
                    x_ref,
                    x_view,
                    x_b * n_cols + col0 + ci,
                    j0,
                    x_smem,
                    plan.rows * (1 + ci),
                    plan.rows,
                    barriers[barrier],
                )
            )
            base = plan.rows + ci * windows.size
            g_at.append(
                [
                    k.copy(
                        g_ref,
                        g_view,
                        g_b * n_cols + col0 + ci,
                        j0 + start,
                        g_smem,
                        base + offset,
                        length,
                        barriers[barrier],
                    )
                    for start, offset, length in zip(
                        windows.starts, windows.offsets, windows.lengths
                    )
                ]
            )
        plgpu.barrier_wait(barriers[barrier])
        sums = list(sums)
        for ci in range(width):
            xv = k.read(x_smem, x_at[ci])
            for i in range(len(plan.terms)):
                w, shift = windows.reads[i]
                sums[i] = sums[i] + k.read(g_smem, g_at[ci][w] + shift) * xv
        return tuple(sums)

    sums = k.column_blocks(n_cols, block, tuple(k.zeros() for _ in plan.terms))
    columns = j0 + k.iota()
    by_diagonal = {term.k: (term, total) for term, total in zip(plan.terms, sums)}
    for diagonal in range(plan.n_diags):
        if diagonal in by_diagonal:
            term, total = by_diagonal[diagonal]
            # Padding slots get an exact 0, whatever the stale rows summed to.
            value = jnp.where((columns >= term.lo) & (columns < term.hi), total, 0)
        else:
            value = k.zeros()
        d_smem[pl.ds(diagonal * plan.rows, plan.rows)] = k.stored(value)
    plgpu.commit_smem()
    for diagonal in range(plan.n_diags):
        k.store(
            d_smem, diagonal * plan.rows, d_ref, d_view, flat_batch * plan.n_diags + diagonal, j0
        )
    plgpu.wait_smem_to_gmem(0)


def sddmm(
    g: Array,
    x: Array,
    *,
    offsets: tuple[int, ...],
    shape: tuple[int, int],
    block_sizes: BlockSizes | None = None,
    interpret: bool = False,
) -> Array:
    """``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]`` with a Pallas Mosaic GPU kernel.

    It is the cotangent of ``data`` in ``y = A @ x`` (``g`` the cotangent of ``y``).

    Args:
        g: ``(*B, m, c)``.
        x: ``(*B, n, c)``; its batch dimensions have the rank of ``g``'s and broadcast
            against them.
        offsets: static, sorted, distinct diagonal offsets.
        shape: the matrix shape ``(m, n)``.
        block_sizes: tile sizes (``rows``: data columns per program, ``cols``: columns of
            ``x`` per loop step); ``BlockSizes.default(..., op="sddmm")`` when ``None``.
        interpret: run the kernel in Pallas's GPU interpreter (any backend, for tests).

    Returns:
        ``(*B, len(offsets), n)`` of the inputs' dtype, exactly 0 in padding slots.

    Raises:
        TypeError: for a dtype the kernels do not take (see :func:`supports`).
        ValueError: when no tile fits or an operand is too large (see :func:`feasible`).

    Example:
        >>> from jaxdia._kernels.pallas_mosaic_gpu import sddmm
        >>> import numpy as np
        >>> g = np.array([[1.], [2.]], np.float32)
        >>> x = np.array([[3.], [4.]], np.float32)
        >>> sddmm(g, x, offsets=(-1, 0), shape=(2, 2), interpret=True).tolist()
        [[6.0, 0.0], [3.0, 8.0]]
    """
    g, x, dtype, batch, n_cols = product_operands(g, x)
    dtype = _check_dtype(dtype, "sddmm")
    m, n = shape
    out_shape = (*batch, len(offsets), n)
    terms = live_terms(offsets, shape, True)
    if math.prod(out_shape) == 0 or not terms or n_cols == 0:
        return jnp.zeros(out_shape, dtype)
    d = _run("sddmm", g, x, dtype, batch, offsets, shape, False, block_sizes, interpret)
    return d.reshape(out_shape)
