"""Shared builders and HLO readers of the sharded tests (tests/sharded/).

Matrices (``random_matrix``, ``poisson_2d``, and tests/grids.py's ``poisson`` and
``jump``), meshes of the 8 fake CPU devices (``auto_mesh``, ``explicit_mesh_of``),
placement and comparison (``put``, ``spec_of``, ``close``, ``expect_error``), and the
collectives of compiled HLO text (``collective_traffic``, ``loop_traffic``, ...), which
benchmarks/bench_sharded.py and bench_distributed.py import too. The imports of jaxdia's
private modules the sharded tests need are here and nowhere else in tests/sharded/.
"""

from __future__ import annotations

import re

import jax
import numpy as np
import scipy.sparse as sp
from jax.sharding import AxisType, NamedSharding, PartitionSpec

import jaxdia
from jaxdia import _dispatch
from jaxdia._geometry import band_widths
from tests.grids import jump, poisson

__all__ = [
    "COLLECTIVES",
    "auto_mesh",
    "band_widths",
    "close",
    "collective_bytes",
    "collective_traffic",
    "computation_traffic",
    "expect_error",
    "explicit_mesh_of",
    "jump",
    "krylov_iteration_traffic",
    "loop_traffic",
    "looped",
    "poisson",
    "poisson_2d",
    "put",
    "random_matrix",
    "scipy_of",
    "spec_of",
]


def auto_mesh(devices=8, name="rows"):
    return jax.make_mesh(
        (devices,), (name,), axis_types=(AxisType.Auto,), devices=jax.devices()[:devices]
    )


def random_matrix(rng, n, offsets, dtype=np.float64):
    data = rng.standard_normal((len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal((len(offsets), n))
    # Garbage in SciPy's padding slots: the sharded product must never read it.
    for k, offset in enumerate(offsets):
        data[k, : max(0, offset)] = np.nan
        data[k, min(n, n + offset) :] = np.nan
    return jaxdia.DiaMatrix(data.astype(dtype), offsets, (n, n))


def scipy_of(A):
    data = np.nan_to_num(np.asarray(A.data), nan=0.0)
    return sp.dia_array((data, A.offsets), shape=A.shape)


def poisson_2d(side, dtype=np.float64):
    """The 5-point Laplacian on a side x side grid (SPD), as a DiaMatrix."""
    one = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    eye = sp.eye_array(side)
    S = (sp.kron(eye, one) + sp.kron(one, eye)).todia()
    return jaxdia.DiaMatrix.from_scipy(S.astype(dtype))


_ITEMSIZE = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "f16": 2,
    "bf16": 2,
    "s16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "c64": 8,
    "c128": 16,
}


_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\S* ([\w-]+)\((.*?)\)")


COLLECTIVES = ("collective-permute", "all-gather", "all-reduce", "all-to-all", "reduce-scatter")


def collective_traffic(hlo: str) -> dict[str, dict[str, int]]:
    """Per kind of collective in compiled HLO text: count, and bytes per device.

    Reads ``jax.jit(f).lower(...).compile().as_text()``: every instruction's result size
    is recorded by name, then the operands of each collective are looked up. ``sent`` is
    the operands' size (what each device contributes), ``received`` the result's (for an
    all-gather, less the device's own block). Written for CPU HLO, whose collectives are
    synchronous (GPU HLO splits them into ``-start``/``-done`` pairs with tuple results).
    """
    sizes: dict[str, int] = {}
    totals: dict[str, dict[str, int]] = {}
    for line in hlo.splitlines():
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, dtype, dims, kind, operands = match.groups()
        size = _ITEMSIZE.get(dtype, 0) * int(np.prod([int(d) for d in dims.split(",") if d]))
        sizes[name] = size
        if kind in COLLECTIVES:
            sent = sum(sizes.get(op, 0) for op in re.findall(r"%([\w.-]+)", operands))
            entry = totals.setdefault(kind, {"count": 0, "sent": 0, "received": 0})
            entry["count"] += 1
            entry["sent"] += sent
            entry["received"] += size - sent if kind == "all-gather" else size
    return totals


def collective_bytes(hlo: str) -> dict[str, int]:
    """Bytes each device sends, per kind of collective (see ``collective_traffic``)."""
    return {kind: entry["sent"] for kind, entry in collective_traffic(hlo).items()}


def close(actual, expected, tol=1e-12):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=tol, atol=tol)


def explicit_mesh_of(shape=(8,), names=("rows",), kind=AxisType.Explicit):
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(names))


def put(array, mesh, *spec):
    return jax.device_put(np.asarray(array), NamedSharding(mesh, PartitionSpec(*spec)))


def spec_of(array):
    """The sharding spec of ``array``, trailing replicated dims dropped (as JAX prints it)."""
    spec = list(array.sharding.spec)
    while spec and spec[-1] is None:
        spec.pop()
    return tuple(spec)


def loop_traffic(hlo: str) -> dict[str, dict[str, int]]:
    """``collective_traffic`` of one iteration of the (first) while loop in ``hlo``: its
    body and its condition, each run once per iteration."""
    match = re.search(r"condition=%([\w.-]+), body=%([\w.-]+)", hlo)
    assert match, "no while loop in the HLO"
    blocks = {}
    for block in re.split(r"\n(?=\S)", hlo):
        head = re.match(r"(?:ENTRY )?%([\w.-]+) ", block)
        if head:
            blocks[head.group(1)] = block
    totals: dict[str, dict[str, int]] = {}
    for name in match.groups():
        for kind, entry in collective_traffic(blocks[name]).items():
            into = totals.setdefault(kind, dict.fromkeys(entry, 0))
            for key, value in entry.items():
                into[key] += value
    return totals


def computation_traffic(hlo: str, name: str) -> dict[str, dict[str, int]]:
    """``collective_traffic`` of computation ``name`` of ``hlo`` and of the branches of
    its conditionals (each branch counted once: in a loop of half steps that alternate
    between two branches, a body's own collectives run twice per pair of halves)."""
    blocks = {}
    for block in re.split(r"\n(?=\S)", hlo):
        head = re.match(r"(?:ENTRY )?%([\w.-]+) ", block)
        if head:
            blocks[head.group(1)] = block
    totals = collective_traffic(blocks[name])
    for branches in re.findall(r"branch_computations=\{([^}]*)\}", blocks[name]):
        for branch in re.findall(r"%([\w.-]+)", branches):
            for kind, entry in computation_traffic(hlo, branch).items():
                into = totals.setdefault(kind, dict.fromkeys(entry, 0))
                for key, value in entry.items():
                    into[key] += value
    return totals


def krylov_iteration_traffic(hlo: str, half_steps: bool) -> dict[str, dict[str, int]]:
    """The collectives of one iteration of the (first) while loop of ``hlo``: body and
    condition, with their conditionals' branches; for a loop of half steps (jaxdia's
    BiCGStab) the body's own collectives twice and each branch once."""
    match = re.search(r"condition=%([\w.-]+), body=%([\w.-]+)", hlo)
    assert match, "no while loop in the HLO"
    condition, body = match.groups()
    totals: dict[str, dict[str, int]] = {}
    own = collective_traffic(
        next(b for b in re.split(r"\n(?=\S)", hlo) if b.startswith(f"%{body} "))
    )
    for part, times in (
        (computation_traffic(hlo, condition), 1),
        (computation_traffic(hlo, body), 1),
    ):
        for kind, entry in part.items():
            into = totals.setdefault(kind, dict.fromkeys(entry, 0))
            for key, value in entry.items():
                into[key] += times * value
    if half_steps:
        for kind, entry in own.items():
            for key, value in entry.items():
                totals[kind][key] += value
    return totals


def expect_error(kind, pattern, f):
    try:
        f()
    except kind as error:
        assert re.search(pattern, str(error)), str(error)
    else:
        raise AssertionError(f"no {kind.__name__} matching {pattern!r}")


def looped(level) -> bool:
    """Whether a level's products are the loop over its diagonals on CPU."""
    return (
        len(level.offsets) > _dispatch.LOOPED_DIAGONALS and level.shape[0] <= _dispatch.LOOPED_UP_TO
    )
