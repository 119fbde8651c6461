"""The JAX primitives of jaxdia: two bilinear ones behind every product, one linear one
behind traces and diagonals.

* ``dia_spmm(data, x; offsets, shape, transpose, rows)``: ``A @ x``, or ``A^T @ x`` reading
  the same ``data`` (plain transpose, no conjugation); ``x`` columns ``(*B, n, c)``, or
  with ``rows`` its ``c`` vectors as rows ``(*B, c, n)``, and the result alike. Rows keep
  a vector's entries minor: TPU tiles an ``(n, 1)`` column one row per element, so its
  kernel takes rows (the layout it computes in) and the other implementations columns.
* ``dia_sddmm(g, x; offsets, shape)``: ``D[k, j] = sum_c g[j - offsets[k], c] * x[j, c]``
  in bounds, 0 in padding slots: the cotangent of ``data``.
* ``jaxdia_run_sums(x; runs)``: sums of *runs* of the flattened ``x`` (see
  :mod:`jaxdia._kernels.xla_runs`): the diagonals of a dense matrix or of DIA ``data``.

The two products are linear in each argument, and the transpose of one is the other, so
``ad.defbilinear`` gives JVP and transpose rules that close under any order of
differentiation (``docs/design.md`` lists the designs that did not). Batching rules fold a
batch of ``x`` alone into columns and otherwise give the operands a leading batch axis
(the primitives accept batch dims of equal rank that broadcast). Inside ``shard_map``
(with its default ``check_vma=True``) the operands are first made to vary over the same
manual mesh axes, as ``jax.numpy``'s binary operations do, and the result varies over
them too; differentiation then sums the cotangent of a replicated operand over the axes
(the transpose of that cast). Lowering is chosen per platform (``choose_implementation``):
the Pallas kernels (``pallas_mosaic_gpu``, else ``pallas_triton``, on cuda;
``pallas_triton`` on rocm; ``pallas_tpu`` on tpu; imported only when lowering for those
platforms) where they can compute the product, else the XLA implementation of ``_xla``.

Run sums are linear: ``ad.deflinear2`` gives their JVP and transpose (a scatter of the
cotangent onto the runs; reverse mode through the kernel's loops would carry an
O(m * n) cotangent through every iteration), and their batching rule hands ``vmap``'s
batch to the kernel as leading dims, so the kernel's strategy sees the whole batch.
"""

from __future__ import annotations

import inspect
from functools import partial
from types import ModuleType

import jax
import numpy as np
from jax import lax, numpy as jnp
from jax._src import dispatch
from jax.core import ShapedArray, Tracer
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir
from jax.sharding import NamedSharding, PartitionSpec

from .. import _dispatch
from .._geometry import index_dtype
from .._sharding import on_auto_axes
from .xla import sddmm_xla, spmm_xla
from .xla_runs import Run, positions, run_sums_xla, sum_dtype

_XLA_IMPLS = {"spmm": spmm_xla, "sddmm": sddmm_xla}

#: ``implementation=`` names that force one Pallas family.
_FORCEABLE = ("mosaic", "triton")

spmm_p = Primitive("dia_spmm")
sddmm_p = Primitive("dia_sddmm")


def _varying_axes(value) -> frozenset:
    """The manual mesh axes ``value`` varies over (empty outside ``shard_map``)."""
    return jax.typeof(value).manual_axis_type.varying


def _vary_alike(*operands):
    """The operands, each cast to vary over every manual axis that one of them varies over."""
    if not any(isinstance(operand, Tracer) for operand in operands):
        return operands  # concrete arrays vary over nothing
    axes = frozenset().union(*map(_varying_axes, operands))
    cast = []
    for operand in operands:
        missing = tuple(axes - _varying_axes(operand))
        cast.append(lax.pcast(operand, missing, to="varying") if missing else operand)
    return cast


def spmm(data, x, *, offsets, shape, transpose=False, implementation=None, rows=False):
    """``A @ x`` (``transpose=False``) or ``A^T @ x`` through the ``dia_spmm`` primitive;
    ``rows``: ``x`` and the result as rows ``(*B, c, n)`` (see the module docstring)."""
    return spmm_p.bind(
        *_vary_alike(data, x),
        offsets=offsets,
        shape=shape,
        transpose=transpose,
        implementation=implementation,
        rows=rows,
    )


def sddmm(g, x, *, offsets, shape, implementation=None):
    """The data cotangent ``D`` through the ``dia_sddmm`` primitive."""
    return sddmm_p.bind(
        *_vary_alike(g, x), offsets=offsets, shape=shape, implementation=implementation
    )


# -- abstract evaluation -------------------------------------------------------------------


def _batch_shape(a, b, what):
    if len(a.shape) != len(b.shape):
        raise ValueError(f"{what}: operand ranks differ: {a.shape} and {b.shape}")
    try:
        return tuple(jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    except ValueError:
        raise ValueError(f"{what}: batch dims do not broadcast: {a.shape} and {b.shape}") from None


def _spec_entries(aval: ShapedArray) -> tuple:
    spec = tuple(aval.sharding.spec)
    return spec + (None,) * (len(aval.shape) - len(spec))


def output_aval(
    out_shape, dtype, *operands: ShapedArray, tail: tuple = (None, None)
) -> ShapedArray:
    """A primitive's result type: inside ``shard_map``, varying over the operands' manual
    mesh axes (which must agree: see ``_vary_alike``); on ``Explicit`` mesh axes, sharded
    as the operands' types say.

    The operands have equal rank. The result's dims before its last ``len(tail)`` are
    batch dims, sharded as the operands of full length there are (operands sharded
    differently raise); ``tail`` gives the spec entries of the last dims.
    """
    first, *rest = operands
    mat = first.manual_axis_type
    for other in rest:
        if other.manual_axis_type.varying != mat.varying:
            raise ValueError(
                "operands vary over different manual mesh axes: "
                f"{[sorted(a.manual_axis_type.varying, key=str) for a in operands]}"
            )
    typed = [a for a in operands if any(e is not None for e in _spec_entries(a))]
    if not mat.varying and not typed:
        return ShapedArray(out_shape, dtype)
    batch = []
    for i in range(len(out_shape) - len(tail)):
        entries = {_spec_entries(a)[i] for a in typed if a.shape[i] == out_shape[i]}
        entries.discard(None)
        if len(entries) > 1:
            raise ValueError(
                f"operands are sharded differently along batch dim {i}: "
                f"{[a.str_short() for a in operands]}; reshard one like the other"
            )
        batch.append(entries.pop() if entries else None)
    mesh = (typed[0] if typed else first).sharding.mesh
    sharding = NamedSharding(mesh, PartitionSpec(*batch, *tail))
    if not mat.varying:
        return ShapedArray(out_shape, dtype, sharding=sharding)
    return ShapedArray(out_shape, dtype, sharding=sharding, manual_axis_type=mat)


def _spmm_abstract_eval(data, x, *, offsets, shape, transpose, implementation, rows):
    m, n = shape
    if data.shape[-2:] != (len(offsets), n):
        raise ValueError(f"dia_spmm: data shape {data.shape} does not match {offsets}, {shape}")
    length, columns = (-1, -2) if rows else (-2, -1)
    if x.shape[length] != (m if transpose else n):
        raise ValueError(
            f"dia_spmm: x shape {x.shape} does not match {shape} (transpose={transpose}, "
            f"rows={rows})"
        )
    if data.dtype != x.dtype:
        raise TypeError(f"dia_spmm: dtypes differ: {data.dtype} and {x.dtype}")
    batch = _batch_shape(data, x, "dia_spmm")
    out_rows, spec = n if transpose else m, _spec_entries(x)[columns]
    if rows:
        out_shape, tail = (*batch, x.shape[-2], out_rows), (spec, None)
    else:
        out_shape, tail = (*batch, out_rows, x.shape[-1]), (None, spec)
    # The rows are never split here (sharded products run per device); x's columns are.
    return output_aval(out_shape, x.dtype, data, x, tail=tail)


def _sddmm_abstract_eval(g, x, *, offsets, shape, implementation):
    m, n = shape
    if g.shape[-2] != m or x.shape[-2] != n or g.shape[-1] != x.shape[-1]:
        raise ValueError(f"dia_sddmm: g {g.shape} and x {x.shape} do not match {shape}")
    if g.dtype != x.dtype:
        raise TypeError(f"dia_sddmm: dtypes differ: {g.dtype} and {x.dtype}")
    batch = _batch_shape(g, x, "dia_sddmm")
    return output_aval((*batch, len(offsets), n), x.dtype, g, x)


spmm_p.def_abstract_eval(_spmm_abstract_eval)
sddmm_p.def_abstract_eval(_sddmm_abstract_eval)
spmm_p.def_impl(partial(dispatch.apply_primitive, spmm_p))
sddmm_p.def_impl(partial(dispatch.apply_primitive, sddmm_p))


# -- differentiation: bilinear, each primitive transposes to the other -----------------------


def _unbroadcast(value, aval):
    """Sums ``value`` over the batch dims that the operand ``aval`` broadcast."""
    axes = tuple(
        i for i, (have, want) in enumerate(zip(value.shape, aval.shape)) if want == 1 and have != 1
    )
    return value.sum(axis=axes, keepdims=True) if axes else value


def _spmm_transpose_data(ct, data, x, *, offsets, shape, transpose, implementation, rows):
    g, y = (x, ct) if transpose else (ct, x)
    if rows:  # the data cotangent's primitive takes columns
        g, y = jnp.swapaxes(g, -1, -2), jnp.swapaxes(y, -1, -2)
    d = sddmm(g, y, offsets=offsets, shape=shape, implementation=implementation)
    return _unbroadcast(d, data.aval)


def _spmm_transpose_x(ct, data, x, *, offsets, shape, transpose, implementation, rows):
    y = spmm(
        data,
        ct,
        offsets=offsets,
        shape=shape,
        transpose=not transpose,
        implementation=implementation,
        rows=rows,
    )
    return _unbroadcast(y, x.aval)


def _sddmm_transpose_g(ct, g, x, *, offsets, shape, implementation):
    y = spmm(ct, x, offsets=offsets, shape=shape, transpose=False, implementation=implementation)
    return _unbroadcast(y, g.aval)


def _sddmm_transpose_x(ct, g, x, *, offsets, shape, implementation):
    y = spmm(ct, g, offsets=offsets, shape=shape, transpose=True, implementation=implementation)
    return _unbroadcast(y, x.aval)


ad.defbilinear(spmm_p, _spmm_transpose_data, _spmm_transpose_x)
ad.defbilinear(sddmm_p, _sddmm_transpose_g, _sddmm_transpose_x)


# -- batching ------------------------------------------------------------------------------


def _leading_batch(args, dims):
    """Moves each mapped axis to the front; unmapped operands get a size-1 front axis."""
    return [
        jnp.expand_dims(a, 0) if d is None else jnp.moveaxis(a, d, 0) for a, d in zip(args, dims)
    ]


def _spmm_batch(args, dims, **params):
    data, x = args
    data_dim, x_dim = dims
    if data_dim is None and params["rows"]:
        # A batch of right-hand sides alone is just more rows.
        x = jnp.moveaxis(x, x_dim, -3)
        batch_size, count = x.shape[-3:-1]
        x = x.reshape(*x.shape[:-3], batch_size * count, x.shape[-1])
        y = spmm_p.bind(data, x, **params)
        return y.reshape(*y.shape[:-2], batch_size, count, y.shape[-1]), y.ndim - 2
    if data_dim is None:
        # A batch of right-hand sides alone is just more columns.
        x = jnp.moveaxis(x, x_dim, -2)
        batch_size, columns = x.shape[-2:]
        x = x.reshape(*x.shape[:-2], batch_size * columns)
        y = spmm_p.bind(data, x, **params)
        return y.reshape(*y.shape[:-1], batch_size, columns), y.ndim - 1
    return spmm_p.bind(*_leading_batch(args, dims), **params), 0


def _sddmm_batch(args, dims, **params):
    return sddmm_p.bind(*_leading_batch(args, dims), **params), 0


batching.primitive_batchers[spmm_p] = _spmm_batch
batching.primitive_batchers[sddmm_p] = _sddmm_batch


# -- lowering ------------------------------------------------------------------------------


def _family(name: str) -> ModuleType:
    """The module of Pallas kernel family ``name`` (kernels named like the primitives,
    "spmm" and "sddmm", and a ``supports(dtype)`` predicate), imported only when lowering
    for its platform; each platform's families, best first, are
    ``jaxdia._dispatch.PALLAS_FAMILIES``."""
    if name == "mosaic":
        from . import pallas_mosaic_gpu as module
    elif name == "triton":
        from . import pallas_triton as module
    else:
        from . import pallas_tpu as module
    return module


def _unavailable(family: str, name: str, platform, avals, params) -> str | None:
    """Why kernel ``family`` cannot compute this ``name`` product, or None."""
    module = _family(family)
    dtype = avals[0].dtype
    if family != "mosaic":
        if module.supports(dtype):
            return None
        return f"the {module.__name__} kernels do not take dtype {np.dtype(dtype).name}"
    reason = module.unsupported_device()
    if reason is None:
        reason = module.feasible(
            name,
            avals[0].shape,
            avals[1].shape,
            dtype,
            offsets=params["offsets"],
            shape=params["shape"],
            transpose=params.get("transpose", False),
        )
    return reason


def choose_implementation(name: str, platform: str | None, avals, params, implementation):
    """The function that computes primitive ``name`` on ``platform`` for operands of
    types ``avals`` and the primitive's ``params``.

    ``None`` picks the first kernel family of the platform that can compute it, else XLA.
    On cuda that is Mosaic GPU from JAX 0.11 on (where Triton is deprecated) on a GPU of
    compute capability 9.0 or newer (or when lowering without a GPU), with XLA for what
    it does not take; Triton on older JAX or older GPUs. ``"pallas"`` takes the first
    family that can compute it (Mosaic GPU, then Triton on cuda) and raises where none
    can; ``"mosaic"`` and ``"triton"`` force one family.

    Raises:
      ValueError: when a forced kernel cannot run here, naming why.
    """
    if implementation == "xla":
        return _XLA_IMPLS[name]
    families = _dispatch.PALLAS_FAMILIES.get(platform or "", ())
    if implementation in _FORCEABLE:
        families = tuple(f for f in families if f == implementation)
    elif jax.__version_info__ < _dispatch.MOSAIC_GPU_DEFAULT_FROM_JAX:
        families = tuple(f for f in families if f != "mosaic")
    elif (
        implementation is None
        and "mosaic" in families
        and _family("mosaic").unsupported_device() is None
    ):
        # Where Mosaic GPU runs, what it does not take runs on XLA, not on the deprecated
        # Triton backend (which stays for older GPUs, and when forced).
        families = ("mosaic",)
    reasons = []
    for family in families:
        reason = _unavailable(family, name, platform, avals, params)
        if reason is None:
            return getattr(_family(family), name)
        reasons.append(reason)
    if implementation is None:
        return _XLA_IMPLS[name]
    family = {"pallas": "Pallas", "mosaic": "Mosaic GPU", "triton": "Pallas Triton"}
    where = f"on platform {platform or 'cpu'!r}"
    if not families:
        reasons.append(
            "Mosaic GPU kernels run on cuda, Triton ones on cuda and rocm, Mosaic TPU ones on tpu"
        )
    raise ValueError(
        f"implementation={implementation!r} was requested, but there is no "
        f"{family[implementation]} {name} kernel for dtype {np.dtype(avals[0].dtype).name} "
        f"{where}: {'; '.join(reasons)}. Use implementation=None to pick the best "
        "available, or 'xla'."
    )


def _lowering_rule(name, platform):
    def rule(ctx, *args, implementation, **params):
        rows = params.pop("rows", False)
        avals = ctx.avals_in
        if rows:  # the kernels' feasibility is stated for columns
            data, x = avals
            avals = (data, x.update(shape=(*x.shape[:-2], x.shape[-1], x.shape[-2])))
        fn = choose_implementation(name, platform, avals, params, implementation)
        if rows:
            fn = _on_rows(fn)
        return mlir.lower_fun(partial(fn, **params), multiple_results=False)(ctx, *args)

    return rule


def _on_rows(fn):
    """``fn`` (a product of columns) for rows: the implementations that take rows take
    them (the XLA one, on vectors; TPU's kernel, which computes in rows); the others
    get columns."""
    if "rows" in inspect.signature(fn).parameters:
        return partial(fn, rows=True)

    def on_columns(data, x, **params):
        return jnp.swapaxes(fn(data, jnp.swapaxes(x, -1, -2), **params), -1, -2)

    return on_columns


for _name, _prim in (("spmm", spmm_p), ("sddmm", sddmm_p)):
    mlir.register_lowering(_prim, _lowering_rule(_name, None))
    for _platform in _dispatch.PALLAS_FAMILIES:
        mlir.register_lowering(_prim, _lowering_rule(_name, _platform), platform=_platform)


# -- run sums (linear: ``ad.deflinear2`` gives JVP and transpose) -----------------------------

run_sums_p = Primitive("jaxdia_run_sums")
run_sums_p.def_impl(partial(dispatch.apply_primitive, run_sums_p))
run_sums_p.def_abstract_eval(
    lambda x, *, runs: output_aval((*x.shape[:-2], len(runs)), sum_dtype(x.dtype), x, tail=(None,))
)
mlir.register_lowering(run_sums_p, mlir.lower_fun(run_sums_xla, multiple_results=False))


@partial(jax.jit, static_argnums=1)
@on_auto_axes(last=False)
def run_sums(x, runs: tuple[Run, ...]):
    """Sums of ``runs`` of ``x`` (``(..., r, c)``, flattened over its last two axes).

    Jitted: an eager call is one C++ dispatch, where an eager bind of the primitive costs
    Python overhead on every call.
    """
    return run_sums_p.bind(x, runs=runs)


def _run_sums_transpose(ct, x, *, runs):
    # d(out[..., j]) / d(flat[..., i]) is 1 on run j's elements: scatter ct onto them.
    if type(ct) is ad.Zero or not runs:
        return (ad.Zero(x.aval),)
    *batch, r, c = x.aval.shape
    dtype = x.aval.dtype
    flat = jnp.zeros((*batch, r * c), dtype)
    length = max(size for _, _, size in runs)
    # Indices computed in the program: a static table would embed q * length ints.
    t = lax.broadcasted_iota(index_dtype(r * c), (len(runs), length), 1)
    index, valid = positions(runs, t)
    values = jnp.where(valid, ct[..., :, None].astype(dtype), jnp.zeros((), dtype))
    return (flat.at[..., index].add(values, mode="promise_in_bounds").reshape(x.aval.shape),)


ad.deflinear2(run_sums_p, _run_sums_transpose)


def _run_sums_batch(args, dims, *, runs):
    (x,), (dim,) = args, dims
    return run_sums_p.bind(jnp.moveaxis(x, dim, 0), runs=runs), 0


batching.primitive_batchers[run_sums_p] = _run_sums_batch


# -- forward only (the identity, whose transpose raises) --------------------------------------

forward_only_p = Primitive("jaxdia_forward_only")
forward_only_p.def_impl(lambda x, *, message: x)
forward_only_p.def_abstract_eval(lambda x, *, message: x)
mlir.register_lowering(forward_only_p, lambda ctx, x, *, message: [x])


def forward_only(x, message: str):
    """``x``, marked as differentiable in forward mode only: its JVP is itself on the
    tangent, and its transpose (reached first when reverse mode transposes a program that
    ends in it) raises ``ValueError(message)``, before JAX would fail deeper inside (a
    ``while_loop``, say) with a message that does not name the function."""
    return forward_only_p.bind(x, message=message)


def _forward_only_transpose(ct, x, *, message):
    raise ValueError(message)


ad.deflinear2(forward_only_p, _forward_only_transpose)
batching.primitive_batchers[forward_only_p] = lambda args, dims, *, message: (
    forward_only_p.bind(args[0], message=message),
    dims[0],
)
