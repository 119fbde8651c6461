"""The dispatch table of ``docs/design.md`` ("Dispatch"), pinned: which implementation runs
for each public product and solve path.

The structural rows (which banded factor a matrix gets: layout, widths, periodic split,
stored or one-shot, the fallback, the selected inverse's route) are checked first, from
the offsets alone, on the plan (``jaxdia._linalg.plan.choose``), without lowering.

The others name one row (or a few cells) of the table and assert what the lowered
StableHLO holds: the custom calls (LAPACK's routines through jaxdia's FFI targets
``jaxdia_lapack_<routine>``, JAX's own ``gtsv``, the Pallas kernels) and the loops (a
``while`` whose trip count grows with ``n`` is a loop over the rows: fine on CPU, a bug on
a GPU or TPU). A change of policy then fails here, where it must be made on purpose and
the table updated with it. The kernels' own lowering tests are in ``test_lowering.py``,
ILU(0)'s in ``test_ilu.py``.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdia
from jaxdia import _dispatch
from jaxdia._kernels import band_refine
from jaxdia._kernels.band_layouts import CH, CR, GB, GT, ONESHOT, PB, PT
from jaxdia._linalg import multigrid_hierarchy, stencil
from jaxdia._linalg.periodic import Split
from jaxdia._linalg.plan import Plan, Use, choose

from .test_lowering import lowered_text, while_loops

ACCELERATORS = ("cuda", "tpu")


def banded(n, offsets, dtype=np.float64, batch=(), seed=0):
    """A diagonally dominant banded matrix (so every method succeeds)."""
    rng = np.random.default_rng(seed)
    data = rng.uniform(-1, 1, (*batch, len(offsets), n)).astype(dtype)
    data[..., offsets.index(0), :] = 2.0 * len(offsets)
    return jaxdia.DiaMatrix(data, offsets, (n, n))


def lapack_calls(text: str) -> set[str]:
    """The LAPACK routines called through jaxdia's FFI targets."""
    return set(re.findall(r"jaxdia_lapack_(\w+)", text))


def loops_grow_with_n(fn, make_args, platform: str, n: int) -> bool:
    """Whether a ``while`` loop's trip count changes between ``n`` and ``4 n``: the kinds
    of loop differ (a loop over the rows, or over a level's blocks, shows a new trip count;
    a loop each level of a reduction runs, as the rolled pivot steps of a block's
    Gauss-Jordan, only repeats at the two more levels)."""
    return set(while_loops(fn, *make_args(n), platform=platform)) != set(
        while_loops(fn, *make_args(4 * n), platform=platform)
    )


# -- the plan: which banded factor, from the offsets alone -------------------------------------

TRIDIAGONAL, PENTADIAGONAL, WIDE = (-1, 0, 1), (-2, -1, 0, 1, 2), (-2, 0, 1)
#: Periodic tridiagonal and pentadiagonal offsets at n = 100 (corners at ±(n - k)).
PERIODIC = (-99, -1, 0, 1, 99)
PERIODIC_5 = (-99, -98, -2, -1, 0, 1, 2, 98, 99)
#: PERIODIC's split on CPU: the tridiagonal band, and the whole band as the fallback.
SPLIT = Split((1, 2, 3), 1, 1, (1, 1))
WHOLE = Plan(GB, (99, 99), pivoted=True)

PLANS = [
    # (offsets, n, lower, use, method, platform), the plan
    # LU: LAPACK's layouts on CPU, cyclic reduction on GPU and TPU, or as forced
    ((TRIDIAGONAL, 100, None, Use.FACTOR, "auto", "cpu"), Plan(GT, (), pivoted=True)),
    ((WIDE, 100, None, Use.FACTOR, "auto", "cpu"), Plan(GB, (2, 1), pivoted=True)),
    ((TRIDIAGONAL, 100, None, Use.FACTOR, "auto", "gpu"), Plan(CR, (1, 1))),
    ((WIDE, 100, None, Use.FACTOR, "auto", "tpu"), Plan(CR, (2, 1))),
    ((WIDE, 100, None, Use.FACTOR, "auto", "cuda"), Plan(CR, (2, 1))),
    (
        (WIDE, 100, None, Use.FACTOR, "parallel", "cpu"),
        Plan(CR, (2, 1), None, "parallel", pivoted=True),
    ),
    ((WIDE, 100, None, Use.FACTOR, "lapack", "tpu"), Plan(GB, (2, 1), None, "lapack")),
    ((TRIDIAGONAL, 100, None, Use.FACTOR, "scan", "gpu"), Plan(GT, (), None, "scan")),
    # Cholesky: one triangle's band; Takahashi's recurrences on LAPACK's factor on CPU
    ((TRIDIAGONAL, 100, False, Use.FACTOR, "auto", "cpu"), Plan(PT, (), False, takahashi=True)),
    (
        (PENTADIAGONAL, 100, True, Use.FACTOR, "auto", "cpu"),
        Plan(PB, (2, 1), True, takahashi=True),
    ),
    ((WIDE, 100, False, Use.FACTOR, "auto", "cpu"), Plan(PT, (), False, takahashi=True)),
    ((PENTADIAGONAL, 100, False, Use.FACTOR, "auto", "tpu"), Plan(CH, (2, 0), False)),
    (
        (PENTADIAGONAL, 100, False, Use.FACTOR, "parallel", "cpu"),
        Plan(CH, (2, 0), False, "parallel"),
    ),
    ((PENTADIAGONAL, 100, False, Use.FACTOR, "lapack", "gpu"), Plan(PB, (2, 0), False, "lapack")),
    # periodic: the band's layout, the corners split off, the whole band as the fallback
    (
        (PERIODIC, 100, None, Use.FACTOR, "auto", "cpu"),
        Plan(GT, (), split=SPLIT, fallback=WHOLE, pivoted=True),
    ),
    (
        (PERIODIC_5, 100, None, Use.FACTOR, "auto", "tpu"),
        Plan(CR, (2, 2), split=Split((2, 3, 4, 5, 6), 2, 2, (2, 2)), fallback=Plan(CR, (99, 99))),
    ),
    (
        ((-1, 0, 99), 100, None, Use.FACTOR, "auto", "cpu"),
        Plan(
            GT,
            (),
            split=Split((0, 1), 1, 0, (1, 0)),
            fallback=Plan(GB, (1, 99), pivoted=True),
            pivoted=True,
        ),
    ),
    # too small to tell the corners from the band, or corners too far in: the whole band
    ((TRIDIAGONAL, 2, None, Use.FACTOR, "auto", "cpu"), Plan(GT, (), pivoted=True)),
    (
        ((-40, -1, 0, 1, 40), 100, None, Use.FACTOR, "auto", "cpu"),
        Plan(GB, (40, 40), pivoted=True),
    ),
    # a Cholesky factor never splits: the corners are part of its band
    ((PERIODIC, 100, False, Use.FACTOR, "auto", "cpu"), Plan(PB, (99, 0), False, takahashi=True)),
    # one solve: a one-shot factor, unless periodic or LAPACK's layouts are forced
    ((WIDE, 100, None, Use.SOLVE, "auto", "cpu"), Plan(ONESHOT, (2, 1), pivoted=True)),
    ((TRIDIAGONAL, 100, None, Use.SOLVE, "auto", "tpu"), Plan(ONESHOT, (1, 1))),
    (
        (WIDE, 100, None, Use.SOLVE, "parallel", "cpu"),
        Plan(ONESHOT, (2, 1), None, "parallel", pivoted=True),
    ),
    ((WIDE, 100, None, Use.SOLVE, "lapack", "cpu"), Plan(GB, (2, 1), None, "lapack", pivoted=True)),
    ((TRIDIAGONAL, 100, None, Use.SOLVE, "scan", "cpu"), Plan(GT, (), None, "scan", pivoted=True)),
    (
        (PERIODIC, 100, None, Use.SOLVE, "auto", "cpu"),
        Plan(GT, (), split=SPLIT, fallback=WHOLE, pivoted=True),
    ),
    # repeated solves (eigsh's shift-invert): a tridiagonal matrix afresh each time
    ((TRIDIAGONAL, 100, None, Use.SOLVES, "auto", "cpu"), Plan(ONESHOT, (1, 1), pivoted=True)),
    ((WIDE, 100, None, Use.SOLVES, "auto", "cpu"), Plan(GB, (2, 1), pivoted=True)),
    ((WIDE, 100, None, Use.SOLVES, "auto", "gpu"), Plan(CR, (2, 1))),
    # multigrid's coarsest level: the stored LU on CPU, a dense inverse on GPU and TPU
    ((WIDE, 100, None, Use.COARSE, "auto", "cpu"), Plan(GB, (2, 1), pivoted=True)),
    ((WIDE, 100, None, Use.COARSE, "auto", "tpu"), Plan(CR, (2, 1), dense=True)),
    # the selected inverse: general (as the LU), Takahashi's on the Cholesky factor where
    # its band reaches every offset, a periodic Hermitian matrix as a general one
    ((WIDE, 100, None, Use.INVERSE, "auto", "cpu"), Plan(GB, (2, 1), pivoted=True)),
    (
        (PENTADIAGONAL, 100, False, Use.INVERSE, "auto", "cpu"),
        Plan(PB, (2, 0), False, takahashi=True),
    ),
    (((-3, 0, 1), 100, False, Use.INVERSE, "auto", "cpu"), Plan(PT, (), False)),
    ((PENTADIAGONAL, 100, False, Use.INVERSE, "auto", "gpu"), Plan(CH, (2, 0), False)),
    (
        ((0, 1, 99), 100, False, Use.INVERSE, "auto", "cpu"),
        Plan(GT, (), split=SPLIT, fallback=WHOLE, pivoted=True),
    ),
]


@pytest.mark.parametrize("question, plan", PLANS)
def test_the_plan_of_each_row(question, plan):
    offsets, n, lower, use, method, platform = question
    assert choose(offsets, n, lower, use=use, method=method, platform=platform) == plan


def test_the_plan_reads_the_default_platform_only_when_asked(monkeypatch):
    """``platform=None``: the default device's, read when the plan is asked for."""
    monkeypatch.setattr(_dispatch, "default_platform", lambda: "tpu")
    assert choose(WIDE, 100).layout is CR
    monkeypatch.setattr(_dispatch, "default_platform", lambda: "cpu")
    assert choose(WIDE, 100).layout is GB


def test_what_the_plan_says():
    periodic = choose(PERIODIC, 100, platform="cpu")
    assert periodic.stored and not periodic.compiled_whole
    assert periodic.band == Plan(GT, (), pivoted=True)
    assert choose(WIDE, 100, platform="cpu").compiled_whole
    assert not choose(WIDE, 100, use=Use.SOLVE, platform="cpu").stored
    assert not choose(WIDE, 100, use=Use.COARSE, platform="gpu").stored
    # plans are values: equal questions, equal (and hashable) answers
    assert hash(choose(WIDE, 100, platform="cpu")) == hash(Plan(GB, (2, 1), pivoted=True))
    for method in ("host", "fast", None, 1):
        with pytest.raises(ValueError, match=r"lu_factor: method must be one of \('auto'"):
            choose(WIDE, 100, method=method, function="lu_factor")  # type: ignore[arg-type]


def test_public_functions_refuse_an_unknown_method():
    A = banded(8, WIDE)
    calls = [
        lambda: jaxdia.lu_factor(A, method="host"),
        lambda: jaxdia.cho_factor(A, method="host"),
        lambda: jaxdia.solve_banded(A, jnp.ones(8), method="host"),
        lambda: jaxdia.solveh_banded(A, jnp.ones(8), method="host"),
        lambda: jaxdia.factorized(A, method="host"),
        lambda: jaxdia.slogdet(A, method="host"),
        lambda: jaxdia.selected_inverse(A, method="host"),
    ]
    for call in calls:
        with pytest.raises(ValueError, match="method must be one of"):
            call()


def test_the_factor_carries_its_plan():
    """A stored factor's solves run as its plan says (the method it was made with, also
    where ``"auto"`` would choose otherwise), and factors of different plans are different
    pytrees: their plans are static aux data."""
    A = banded(200, PENTADIAGONAL)
    solves = {"auto": {"gbtrs"}, "lapack": {"gbtrs"}, "scan": set(), "parallel": {"gbsv"}}
    for method, routines in solves.items():  # cyclic reduction's: gbsv where it refuses
        lu = jaxdia.lu_factor(A, method=method)
        text = lowered_text(lambda lu, b: lu.solve(b), lu, jnp.ones(200), platform="cpu")
        assert lapack_calls(text) == routines, method
    small = jaxdia.lu_factor(banded(8, PENTADIAGONAL), method="lapack")  # "auto": the scan
    text = lowered_text(lambda lu, b: lu.solve(b), small, jnp.ones(8), platform="cpu")
    assert lapack_calls(text) == {"gbtrs"}
    trees = {jax.tree_util.tree_structure(jaxdia.lu_factor(A, method=m)) for m in solves}
    assert len(trees) == len(solves)


def test_only_the_plan_chooses_a_factor():
    """No module but the plan asks the structural questions (whether a band is periodic,
    cyclic reduction or LAPACK's layouts, the selected inverse's route, multigrid's coarse
    solve): ``docs/design.md`` ("Dispatch")."""
    import pathlib

    questions = re.compile(
        r"periodic_split\(|factors_by_cyclic_reduction|selected_inverse_from_host_factor"
        r"|selected_inverse_pivots_by_scan|coarse_solve_by_inverse\("
    )
    package = pathlib.Path(jaxdia.__file__).parent
    askers = {
        str(path.relative_to(package))
        for path in package.rglob("*.py")
        if questions.search(path.read_text())
    }
    assert askers == {"_linalg/plan.py", "_dispatch.py"}


# -- stored factors: lu_factor, cho_factor -----------------------------------------------------

STORED = [
    # (factor, offsets, CPU routines of the factorization and of the solve)
    ("lu", (-1, 0, 1), {"gttrf", "gttrs"}),
    ("lu", (-2, -1, 0, 1, 2), {"gbtrf", "gbtrs"}),
    ("lu", (-1, 0, 3), {"gbtrf", "gbtrs"}),
    ("cho", (-1, 0, 1), {"pttrf", "pttrs"}),
    ("cho", (-2, -1, 0, 1, 2), {"pbtrf", "pbtrs"}),
]


def _factor_and_solve(kind):
    if kind == "lu":
        return lambda A, b: jaxdia.lu_factor(A).solve(b)
    return lambda A, b: jaxdia.cho_factor(A).solve(b)


def _spd(n, offsets, batch=()):
    A = banded(n, offsets, batch=batch)
    return (A + A.T) * 0.5


@pytest.mark.parametrize("kind, offsets, routines", STORED)
def test_stored_factors_call_lapack_on_cpu(kind, offsets, routines):
    n = 200
    A = _spd(n, offsets) if kind == "cho" else banded(n, offsets)
    text = lowered_text(_factor_and_solve(kind), A, jnp.ones(n), platform="cpu")
    assert lapack_calls(text) == routines
    # Small systems (n <= 16) and large batches of short ones run the scan instead.
    small = _spd(8, offsets) if kind == "cho" else banded(8, offsets)
    text = lowered_text(_factor_and_solve(kind), small, jnp.ones(8), platform="cpu")
    assert not lapack_calls(text)
    assert n > _dispatch.SCAN_ROWS >= 8


@pytest.mark.parametrize("platform", ACCELERATORS)
@pytest.mark.parametrize("kind, offsets, routines", STORED[:2] + STORED[3:4])
def test_stored_factors_are_cyclic_reduction_on_accelerators(
    platform, kind, offsets, routines, traced_as
):
    # A factor's layout is chosen when it is traced, for the default device's platform.
    traced_as(platform)

    def make_args(n):
        A = _spd(n, offsets) if kind == "cho" else banded(n, offsets)
        return A, jnp.ones(n)

    fn = _factor_and_solve(kind)
    text = lowered_text(fn, *make_args(256), platform=platform)
    assert not lapack_calls(text) and "gtsv" not in text
    assert not loops_grow_with_n(fn, make_args, platform, 256)


# -- one-shot solves: solve_banded, one system --------------------------------------------------


def test_one_system_on_cpu():
    """gtsv for a tridiagonal matrix, gbsv (gbtrf + gbtrs in one call) for a wider band,
    also for n <= 16, where stored factors take the scan LU; never cyclic reduction (its
    refinement loop and LAPACK fallback, a ``case``). Batches:
    ``test_banded.py::test_cpu_one_shot_solves_call_lapack``."""
    n = 300
    tri = lowered_text(jaxdia.solve_banded, banded(n, (-1, 0, 1)), jnp.ones(n), platform="cpu")
    assert "gtsv" in tri and not lapack_calls(tri)
    wide = lowered_text(
        jaxdia.solve_banded, banded(n, (-2, -1, 0, 1, 2)), jnp.ones(n), platform="cpu"
    )
    assert lapack_calls(wide) == {"gbsv"} and "gtsv" not in wide
    small = _dispatch.SCAN_ROWS
    args = banded(small, (-2, 0, 1)), jnp.ones(small)
    text = lowered_text(jaxdia.solve_banded, *args, platform="cpu")
    assert lapack_calls(text) == {"gbsv"} and "gtsv" not in text
    assert "stablehlo.while" not in text and "stablehlo.case" not in text


@pytest.mark.parametrize("platform", ACCELERATORS)
def test_one_system_on_accelerators(platform):
    """cuda: the library's pivoting gtsv (cuSPARSE gtsv2) for a tridiagonal matrix; TPU
    (whose gtsv is a loop over the rows) and wider bands: cyclic reduction."""
    n = 300

    def tridiagonal(n):
        return banded(n, (-1, 0, 1), np.float32), jnp.ones(n, jnp.float32)

    def pentadiagonal(n):
        return banded(n, (-2, -1, 0, 1, 2), np.float32), jnp.ones(n, jnp.float32)

    tri = lowered_text(jaxdia.solve_banded, *tridiagonal(n), platform=platform)
    assert ("gtsv" in tri) == (platform == "cuda") and not lapack_calls(tri)
    wide = lowered_text(jaxdia.solve_banded, *pentadiagonal(n), platform=platform)
    assert "gtsv" not in wide and not lapack_calls(wide)
    for make_args in (tridiagonal, pentadiagonal):
        assert not loops_grow_with_n(jaxdia.solve_banded, make_args, platform, n)
    assert while_loops(jaxdia.solve_banded, *pentadiagonal(n), platform=platform) == [
        (0, band_refine.STEPS)
    ]


# -- gmres's Gram-Schmidt ---------------------------------------------------------------------


def test_gmres_gram_schmidt(traced_as):
    """CPU: each Arnoldi step orthogonalizes in one BLAS host call; cuda and TPU: XLA's
    block Gram-Schmidt, no host call. The choice is made when gmres is traced."""
    A, b = banded(64, [-1, 0, 1]), jnp.ones(64)

    def solve(A, b):
        return jaxdia.gmres(A, b, rtol=1e-8)

    for dtype in (np.float64, np.complex64):
        text = lowered_text(solve, A.astype(dtype), b.astype(dtype), platform="cpu")
        assert lapack_calls(text) == {"gram_schmidt"}
    for platform in ACCELERATORS:
        traced_as(platform)
        text = lowered_text(solve, A, b, platform=platform)
        assert not lapack_calls(text)


# -- the selected inverse of a general matrix ------------------------------------------------------


@pytest.mark.parametrize("platform", ["cpu", "tpu", pytest.param("cuda", marks=pytest.mark.full)])
def test_pivoted_selected_inverse_only_on_cpu(platform, traced_as):
    """``selected_inverse`` and ``slogdet``'s gradient of a general matrix: cyclic
    reduction backwards (no loop over the rows) everywhere; on CPU, behind a ``case`` on
    its residual check, the pivoted LU's reverse mode (two scans over the rows) for the
    systems it refuses; on GPU/TPU no such loop (those systems stay NaN)."""
    traced_as(platform)
    offsets = (-2, -1, 0, 1, 2)

    def variances_and_gradient(data):
        def loss(data):
            return jaxdia.slogdet(jaxdia.DiaMatrix(data, offsets, (data.shape[-1],) * 2))[1]

        A = jaxdia.DiaMatrix(data, offsets, (data.shape[-1],) * 2)
        return jaxdia.selected_inverse(A).diagonal(), jax.grad(loss)(data)

    def make_args(n):
        return (banded(n, offsets, np.float32).data,)

    grows = loops_grow_with_n(variances_and_gradient, make_args, platform, 64)
    text = lowered_text(variances_and_gradient, *make_args(64), platform=platform)
    assert grows == (platform == "cpu")
    assert ("stablehlo.case" in text) == (platform == "cpu")


# -- multigrid's level products ------------------------------------------------------------------


def test_multigrid_level_products(traced_as):
    """On CPU a small level with more than 9 diagonals (3-D coarse levels) multiplies as
    one loop over its diagonals; larger or narrower levels, and every level on GPU/TPU,
    use the product primitive (no loop)."""
    box = stencil.displacements
    small = banded(6**3, tuple(stencil.flat_offset(d, (6, 6, 6)) for d in box(3)))
    assert small.shape[0] <= _dispatch.LOOPED_UP_TO and len(small.offsets) == 27
    x = jnp.ones(small.shape[0])

    def product(A, x):
        return multigrid_hierarchy.level_product(A._parts)(x)

    assert while_loops(product, small, x, platform="cpu") == [(27,)]
    two_d = banded(30 * 30, tuple(stencil.flat_offset(d, (30, 30)) for d in box(2)))
    assert not while_loops(product, two_d, jnp.ones(900), platform="cpu")
    large = banded(33**3, small.offsets)
    assert large.shape[0] > _dispatch.LOOPED_UP_TO
    assert not while_loops(product, large, jnp.ones(large.shape[0]), platform="cpu")
    # The choice is made when the cycle is traced, for the default device's platform.
    traced_as("cuda")
    assert not while_loops(product, small, x, platform="cuda")
