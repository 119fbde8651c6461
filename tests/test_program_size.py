"""The central programs do not grow with ``n``, beyond the ``log2 n`` levels of a
reduction, on any platform: lowering only (abstract arguments, nothing allocated or
compiled), for ``cpu``, ``tpu`` and ``cuda``.

XLA's compile time follows the program it is given. On a TPU it followed ``n``: a
tridiagonal ``solve_banded`` compiled in 3 s at ``n = 1e3``, 30 s at ``1e5`` and about
135 s at ``1e6``, and failed at ``1e7`` for want of 20 GB of memory. The programs held
tables of ``n`` elements as constants (cyclic reduction's failure bookkeeping, one per
level; LAPACK-layout masks, one per diagonal). Two rules hold that out:

* No dense constant above :data:`MAX_CONSTANT` elements, whatever ``n`` (splat
  constants, one value broadcast, cost nothing). What is left are tables of the band:
  the largest, 300 elements, comes with 21 diagonals.
* The text (lines and bytes) is affine in ``log n``: lowered at ``n_a < n_b < n_c``, its
  size ``s`` may grow from ``n_b`` to ``n_c`` by at most ``1.25 * max(s_b - s_a, 0) *
  log2(n_c / n_b) / log2(n_b / n_a) + slack * s_b`` (:data:`GROWTH_FACTOR`,
  :data:`SLACK`: 1% of the lines, 3% of the bytes): the growth per doubling measured
  between the two smaller sizes, times the doublings, with a margin (a level of cyclic
  reduction or of multigrid adds the same operations at every size; shapes printed with
  more digits add a little). A program without levels (the products, solves on CPU)
  may not grow at all beyond the slack. The products' sizes (:data:`SIZES`) are past
  the small-size strategies (traces sum small windows differently below ``2^16``
  slots); the factorizations' (:data:`LEVEL_SIZES`) are smaller, their lowering taking
  longer with the levels.

A third rule is TPU's: it lays an array's two minor dims out in tiles of 8 x 128 elements
(1, 2 or 4 rows where the second-minor dim is that small), so an array of many small
blocks with the blocks major, ``(N, m, m)``, spends a tile on each block (the measured
TPU programs above: ``f32[1,50000,1,1,1]`` took 24 MiB, 512 bytes a number, and XLA's
generated code followed the tiles). Dims of one count where they are minor: that buffer
is ``50000`` blocks of ``1 x 1`` with trailing ones, tiled one row each, where
``f32[1,1,100000]`` took its 400 kB: so a vector travels as a row ``(1, n)`` or 1-D,
never as a column ``(n, 1)``. Lowered for ``tpu`` at ``n = 2^18``, no array of the
programs that run cyclic reduction, of multigrid-CG's and of the products may have
tiles holding more than :data:`TILE_WASTE` times its elements and more than ``4 n``
elements beyond them (:func:`wasteful_arrays`): blocks with the blocks major waste tens
of ``n``, a column ``127 n``; the deepest levels, whose few blocks leave lanes empty, a
fixed amount (``m^3`` tiles of 128 lanes, below ``4 n`` for the bands tested).

A factorization's layout is chosen when it is traced, for the default platform: each
case traces as that platform does (``_dispatch.default_platform`` patched).
"""

from __future__ import annotations

import math
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.interpreters.mlir import ir

import jaxdia

from .test_lowering import lowered

#: The largest dense constant a program may hold (elements), independent of ``n``.
MAX_CONSTANT = 1024
#: ``n_a < n_b < n_c`` of the 1-D programs, and the sides of the 2-D multigrid grids
#: (2, 3 and 4 levels on CPU). The factorizations' are smaller (their lowering grows
#: with the levels; every size here takes the same path).
SIZES = (1 << 16, 1 << 17, 1 << 20)
LEVEL_SIZES = (1 << 12, 1 << 13, 1 << 16)
SIDES = (128, 256, 512)
#: The growth allowed beyond the extrapolation: a factor on the growth per doubling
#: measured between the two smaller sizes (levels differ a little with the parity of
#: their sizes), and a share of the program for the digits of larger shapes.
GROWTH_FACTOR = 1.25
SLACK = {"lines": 0.01, "bytes": 0.03}
PLATFORMS = ("cpu", "tpu", "cuda")
DIAGONALS = (3, 21)
#: The cases the fast tier leaves to the full one (see :func:`cases`).
FULL = pytest.mark.full


def band(n: int, count: int, periodic: bool = False):
    """An abstract ``n x n`` float32 DiaMatrix of ``count`` diagonals around the main one
    (``periodic``: and the corners ``+-(n - 1)``)."""
    offsets = tuple(range(-(count // 2), count - count // 2))
    if periodic:
        offsets = (-(n - 1), *offsets, n - 1)
    return jax.eval_shape(
        lambda d: jaxdia.DiaMatrix(d, offsets, (n, n)),
        jax.ShapeDtypeStruct((len(offsets), n), np.float32),
    )


def vector(n: int):
    return jax.ShapeDtypeStruct((n,), np.float32)


def stencil_ode(offsets):
    """``y' = f(y)`` whose Jacobian has these ``offsets``: ``-2 y`` plus the mean of
    ``y[i + o]``."""

    def fun(t, y):
        n = y.shape[0]
        before = max(-offsets[0], 0)
        padded = jnp.pad(y, (before, max(offsets[-1], 0)))
        near = [padded[before + o : before + o + n] for o in offsets if o]
        return -2.0 * y + sum(near) / len(near)

    return fun


def banded_program(name: str, n: int, count: int):
    """``(f, args)`` of a 1-D program on ``count`` diagonals."""
    A, b = band(n, count), vector(n)

    def integrate(y0):
        return jaxdia.solve_ivp(stencil_ode(A.offsets), (0.0, 1.0), y0, jac_offsets=A.offsets).y

    programs = {
        "A @ x": (lambda A, x: A @ x, (A, b)),
        "A.T @ x": (lambda A, x: A.T @ x, (A, b)),
        "traces": (lambda A: A.traces(list(A.offsets)), (A,)),
        "grad wrt data": (jax.grad(lambda A, x: jnp.sum(A @ x)), (A, b)),
        "solve_banded": (jaxdia.solve_banded, (A, b)),
        "periodic solve_banded": (jaxdia.solve_banded, (band(n, count, periodic=True), b)),
        "lu_factor + solve": (lambda A, b: jaxdia.lu_factor(A).solve(b), (A, b)),
        "cho_factor + solve": (lambda A, b: jaxdia.cho_factor(A).solve(b), (A, b)),
        "slogdet": (jaxdia.slogdet, (A,)),
        "selected_inverse": (lambda A: jaxdia.selected_inverse(A).data, (A,)),
        "grad slogdet": (jax.grad(lambda A: jaxdia.slogdet(A)[1]), (A,)),
        "solve_ivp (BDF)": (lambda y0: integrate(y0), (b,)),
    }
    return programs[name]


def multigrid_program(name: str, side: int):
    """``(f, args)``: multigrid-CG on the 2-D Poisson problem, its setup in the program
    or ``M`` an argument (its pytree is the one ``jaxdia.multigrid`` builds eagerly)."""
    size = side * side
    offsets = (-side, -1, 0, 1, side)
    A = jax.eval_shape(
        lambda d: jaxdia.DiaMatrix(d, offsets, (size, size)),
        jax.ShapeDtypeStruct((5, size), np.float32),
    )
    b, grid = vector(size), (side, side)
    if name == "multigrid-CG":
        return (lambda A, b: jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid), maxiter=100)[0]), (A, b)
    M = jax.eval_shape(lambda A: jaxdia.multigrid(A, grid), A)
    return (lambda A, M, b: jaxdia.cg(A, b, M=M, maxiter=100)[0]), (A, M, b)


# -- the rules ---------------------------------------------------------------------------------


def dense_constants(lowering) -> list[tuple[int, str, str]]:
    """``(elements, type, location)`` of every dense (not splat) constant, in every
    function of the lowered module."""
    found = []

    def walk(operation) -> None:
        for region in operation.regions:
            for block in region.blocks:
                for op in block.operations:
                    if op.operation.name == "stablehlo.constant":
                        value = ir.DenseElementsAttr(op.operation.attributes["value"])
                        if not value.is_splat:
                            elements = math.prod(ir.RankedTensorType(value.type).shape)
                            where = str(op.location)[:160]
                            found.append((elements, str(value.type), where))
                    walk(op.operation)

    walk(lowering.compiler_ir("stablehlo").operation)
    return found


def check_sizes(build, sizes, platform: str, label: str) -> None:
    """The rules (see the module docstring) for ``build(size)``'s program: no large
    constant, growth affine in ``log n``."""
    measured = []
    for size in sizes:
        f, args = build(size)
        lowering = lowered(f, *args, platform=platform)
        large = [c for c in dense_constants(lowering) if c[0] > MAX_CONSTANT]
        assert not large, (
            f"{label} on {platform}, size {size}: dense constants of more than "
            f"{MAX_CONSTANT} elements (elements, type, location): {large[:3]}"
        )
        text = lowering.as_text()
        measured.append({"lines": text.count("\n"), "bytes": len(text)})
    a, b, c = sizes
    doublings = math.log2(c / b) / math.log2(b / a)
    for key, slack in SLACK.items():
        s_a, s_b, s_c = (m[key] for m in measured)
        allowed = GROWTH_FACTOR * max(s_b - s_a, 0) * doublings + slack * s_b
        assert s_c - s_b <= allowed, (
            f"{label} on {platform}: {key} {s_a}, {s_b}, {s_c} at sizes {sizes}; from "
            f"{b} to {c} it grew by {s_c - s_b}, more than affine in log n allows "
            f"({allowed:.0f})"
        )


# -- the programs ------------------------------------------------------------------------------

PRODUCTS = ("A @ x", "A.T @ x", "traces", "grad wrt data")
FACTORIZATIONS = (
    "solve_banded",
    "periodic solve_banded",
    "lu_factor + solve",
    "cho_factor + solve",
    "slogdet",
    "grad slogdet",
    "selected_inverse",
)


def cases(names, platforms, counts, fast):
    """``(name, count, platform)`` parameters, those not in ``fast`` in the full tier
    (the fast tier keeps every rule and platform once, in seconds)."""
    return [
        pytest.param(name, count, platform, marks=() if (name, count, platform) in fast else FULL)
        for name in names
        for count in counts
        for platform in platforms
    ]


#: The fast tier: each rule once, on the programs this file was written for (cyclic
#: reduction lowered for tpu, at 3 and 21 diagonals; the selected inverse's on CPU; a
#: LAPACK solve on CPU; a product); the rest in the full tier.
FAST_PRODUCTS = {("A.T @ x", 21, "tpu")}
FAST_FACTORIZATIONS = {
    ("solve_banded", 3, "tpu"),
    ("lu_factor + solve", 21, "tpu"),
    ("selected_inverse", 3, "cpu"),
    ("solve_banded", 21, "cpu"),
}


@pytest.mark.parametrize(
    "name, count, platform", cases(PRODUCTS, PLATFORMS, DIAGONALS, FAST_PRODUCTS)
)
def test_products_do_not_grow_with_n(name, count, platform, traced_as):
    traced_as(platform)
    check_sizes(
        lambda n: banded_program(name, n, count), SIZES, platform, f"{name}, {count} diagonals"
    )


@pytest.mark.parametrize(
    # 5 diagonals too: cyclic reduction's 2 x 2 blocks are a program of their own
    "name, count, platform",
    cases(FACTORIZATIONS, PLATFORMS, (3, 5, 21), FAST_FACTORIZATIONS),
)
def test_factorizations_grow_by_levels_only(name, count, platform, traced_as):
    traced_as(platform)
    check_sizes(
        lambda n: banded_program(name, n, count),
        LEVEL_SIZES,
        platform,
        f"{name}, {count} diagonals",
    )


@pytest.mark.parametrize(
    "name, count, platform",
    cases(["solve_ivp (BDF)"], PLATFORMS, DIAGONALS, set()),
)
def test_bdf_integration_does_not_grow_with_n(name, count, platform, traced_as):
    traced_as(platform)
    check_sizes(
        lambda n: banded_program(name, n, count),
        LEVEL_SIZES,
        platform,
        f"{name}, {count} diagonals",
    )


MULTIGRID = ("multigrid-CG", "multigrid-CG, M built before")


@pytest.mark.parametrize(
    "name, count, platform",
    cases(MULTIGRID, PLATFORMS, (5,), set()),
)
def test_multigrid_grows_by_levels_only(name, count, platform, traced_as):
    traced_as(platform)
    check_sizes(lambda side: multigrid_program(name, side), SIDES, platform, name)


# -- the rules catch what they are for ----------------------------------------------------------


def test_the_rules_catch_tables_and_growth():
    def with_table(n):  # an n-element index table, as the failure bookkeeping had
        return (lambda x: x + jnp.asarray(np.arange(n, dtype=np.float32))), (vector(n),)

    with pytest.raises(AssertionError, match="dense constants"):
        check_sizes(with_table, SIZES, "tpu", "table")

    def unrolled(n):  # a piece of program per 2^14 rows
        def f(x):
            return jnp.concatenate([2 * x[i : i + (1 << 14)] for i in range(0, n, 1 << 14)])

        return f, (vector(n),)

    with pytest.raises(AssertionError, match="affine in log n"):
        check_sizes(unrolled, SIZES, "cpu", "unrolled")


# -- TPU tiles ------------------------------------------------------------------------------------

#: The ratio of an array's TPU tiles to its elements above which it is wasteful (where the
#: waste is also more than ``4 n`` elements): an ``m x m`` block with the blocks major wastes
#: 20x at ``m = 10`` and 64x at ``m = 2``; blocks of ``m > 16`` rows (which cyclic
#: reduction keeps in front, see ``band_parallel.LANE_BLOCKS``) waste 2x to 10x.
TILE_WASTE = 8
TILE_N = 1 << 18
#: A tensor type's dims and element type (``f32``, ``complex<f32>``, ``i32``, ``i1``, ...).
_TENSOR = re.compile(r"tensor<((?:\d+x)+)([a-z]+)")


def tpu_tiles(shape: tuple[int, ...]) -> int:
    """The elements TPU's tiles of ``shape`` hold: the last dim in lanes of 128, the
    second-minor in rows of 8 (or the power of two up to 8 that holds it)."""
    if not shape:
        return 1
    lanes = -(-shape[-1] // 128) * 128
    if len(shape) == 1:
        return lanes
    rows = min(8, 1 << max(shape[-2] - 1, 0).bit_length())
    return math.prod(shape[:-2]) * -(-shape[-2] // rows) * rows * lanes


def wasteful_arrays(text: str, n: int) -> list[tuple[tuple[int, ...], int]]:
    """``(shape, tiles)`` of every floating-point ``tensor<...>`` type in StableHLO
    ``text`` whose TPU tiles (:func:`tpu_tiles`, dims of one included) hold more than
    :data:`TILE_WASTE` times its elements and more than ``4 n`` elements beyond them
    (ones in front multiply nothing). Integer and boolean tensors
    are left out: a gather's indices (a trailing index vector of one or two) and the
    masks are computed from iotas inside the fusion that reads them."""
    found = set()
    for match in _TENSOR.finditer(text):
        if match.group(2)[0] not in "fbc":  # f32, bf16, complex<...>
            continue
        # Dims of one count where they are minor: TPU tiled f32[1,50000,1,1,1] as 50000
        # tiles of one row (512 bytes a number), and f32[1,1,100000] as one row.
        shape = tuple(int(d) for d in match.group(1).split("x")[:-1])
        elements, tiles = math.prod(shape), tpu_tiles(shape)
        if tiles > TILE_WASTE * elements and tiles - elements > 4 * n:
            found.add((shape, tiles))
    return sorted(found)


CYCLIC_REDUCTION = (
    "solve_banded",
    "periodic solve_banded",
    "lu_factor + solve",
    "cho_factor + solve",
    "slogdet",
    "selected_inverse",
)
FAST_TILES = {("solve_banded", 3), ("lu_factor + solve", 21), ("selected_inverse", 3)}
#: Not cyclic reduction's: the periodic split keeps ``U`` and ``Z = B^-1 U`` as ``(n, r)``
#: (``jaxdia._linalg.periodic``), the corner rank ``r = 2`` in the lanes.
PERIODIC_COLUMNS = pytest.mark.xfail(
    strict=True, reason="periodic.py's corrections Z = B^-1 U are (n, r), r in the lanes"
)


def _tile_marks(name: str, count: int) -> list:
    marks = [] if (name, count) in FAST_TILES else [FULL]
    return [*marks, PERIODIC_COLUMNS] if name.startswith("periodic") else marks


@pytest.mark.parametrize(
    "name, count",
    [
        pytest.param(name, count, marks=_tile_marks(name, count))
        for name in CYCLIC_REDUCTION
        for count in DIAGONALS
    ],
)
def test_cyclic_reduction_fills_tpu_tiles(name, count, traced_as):
    """Cyclic reduction's arrays keep the blocks in the lanes (see
    :mod:`jaxdia._kernels.band_parallel`): no array wastes TPU's tiles, and no interleave
    is an interior pad."""
    traced_as("tpu")
    f, args = banded_program(name, TILE_N, count)
    text = lowered(f, *args, platform="tpu").as_text()
    bad = wasteful_arrays(text, TILE_N)
    assert not bad, (
        f"{name}, {count} diagonals, lowered for tpu at n = {TILE_N}: arrays whose TPU tiles "
        f"hold more than {TILE_WASTE}x their elements (shape, tiled elements): {bad[:4]}"
    )
    assert not interior_pads(text), f"{name}, {count} diagonals: {interior_pads(text)[:4]}"


#: multigrid-CG with its setup in the program: the Galerkin products build the coarse
#: stencils with the cells minor, ``(*grid, 9)`` (``jaxdia._linalg.stencil``).
STENCIL_CELLS = pytest.mark.xfail(
    strict=True, reason="the setup's stencils are (*grid, cells), the 9 cells in the lanes"
)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param("multigrid-CG, M built before"),
        pytest.param("multigrid-CG", marks=[FULL, STENCIL_CELLS]),
    ],
)
def test_multigrid_fills_tpu_tiles(name, traced_as):
    """multigrid-CG's vectors stay 1-D, or rows where they meet a product (see
    :mod:`jaxdia._kernels.primitives`): no ``(n, 1)`` column, no batch of one, and no
    interleave is an interior pad."""
    traced_as("tpu")
    side = math.isqrt(TILE_N)
    f, args = multigrid_program(name, side)
    text = lowered(f, *args, platform="tpu").as_text()
    bad = wasteful_arrays(text, TILE_N)
    assert not bad, (
        f"{name}, lowered for tpu at {side}^2: arrays whose TPU tiles hold more than "
        f"{TILE_WASTE}x their elements (shape, tiled elements): {bad[:4]}"
    )
    assert not interior_pads(text), f"{name}: {interior_pads(text)[:4]}"


@pytest.mark.parametrize("name", [pytest.param("A @ x"), pytest.param("A.T @ x", marks=FULL)])
def test_products_of_a_vector_fill_tpu_tiles(name, traced_as):
    traced_as("tpu")
    f, args = banded_program(name, TILE_N, 3)
    bad = wasteful_arrays(lowered(f, *args, platform="tpu").as_text(), TILE_N)
    assert not bad, f"{name} lowered for tpu: {bad[:4]}"


def interior_pads(text: str) -> list[str]:
    """The ``interior`` of every ``stablehlo.pad`` in ``text`` that spreads its operand
    out (a nonzero interior). On TPU such a pad along the lanes is code proportional to
    its length (``jaxdia._dispatch.interleave_by_scatter``): the interleaves there are
    scatters."""
    found = re.findall(r"stablehlo\.pad .*?interior = (?:array<i64: |\[)([\d, ]+)", text)
    return [f for f in found if any(int(v) for v in f.split(","))]


def test_interleaves_scatter_on_tpu_only(traced_as):
    """The interleave's form is the platform's: multigrid-CG (its interpolation) and
    cyclic reduction (its back-substitution, forced on CPU) lowered for ``platform``
    interleave by scatters on TPU, by interior pads elsewhere. The same programs are
    lowered for cpu, tpu and cpu again in one test: ``traced_as`` keeps each platform's
    traces apart (no trace made for one is lowered for another)."""
    f, args = multigrid_program("multigrid-CG, M built before", 32)
    _, (A, b) = banded_program("solve_banded", 64, 3)
    forced = lambda A, b: jaxdia.solve_banded(A, b, method="parallel")  # noqa: E731
    for platform in ("cpu", "tpu", "cpu"):
        traced_as(platform)
        scatter = platform == "tpu"
        texts = [
            lowered(f, *args, platform=platform).as_text(),
            lowered(forced, A, b, platform=platform).as_text(),
        ]
        for text in texts:
            assert ("stablehlo.scatter" in text) == scatter
            assert bool(interior_pads(text)) != scatter


def test_the_tile_rule_catches_blocks_in_front():
    def blocks(shape):
        return (lambda x: 2 * x.reshape(shape)), (vector(TILE_N),)

    for shape, wasteful in [
        ((TILE_N // 4, 2, 2), True),  # the blocks major: a tile each
        ((TILE_N // 2, 2), True),  # pairs as columns: two lanes of 128 used
        ((TILE_N, 1), True),  # a column: a tile of one row per element
        ((TILE_N, 1, 1), True),  # ones after the long dim, as the old buffers had
        ((1, TILE_N, 1), True),
        ((2, 2, TILE_N // 4), False),  # the blocks in the lanes
        ((1, TILE_N), False),  # a row: tiles of one row
        ((1, 1, TILE_N), False),  # ones in front cost nothing
        ((4, TILE_N // 4), False),  # a few rows: tiles of 4 rows
        ((TILE_N // 1024, 32, 32), False),  # blocks large enough to fill their tiles
    ]:
        f, args = blocks(shape)
        found = wasteful_arrays(lowered(f, *args, platform="tpu").as_text(), TILE_N)
        assert bool(found) == wasteful, (shape, found)
