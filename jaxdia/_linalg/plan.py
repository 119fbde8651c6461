"""The choice of a banded factor: :func:`choose`, the one place that decides which factor a
square banded matrix gets.

Every function that factors or solves a banded matrix (``lu_factor``, ``cho_factor``,
``solve_banded``, ``slogdet``, ``selected_inverse``, ``eigsh``'s shift-invert, multigrid's
coarsest level, lineax's ``BandedSolver``) starts by asking :func:`choose`, from static
facts only, all explicit arguments: the offsets, ``n``, the triangle a Cholesky factor
reads, what the factor is for (:class:`Use`), the method a caller forces and the platform.
The answer is a frozen :class:`Plan`: the factor's layout
(:mod:`jaxdia._kernels.band_layouts`) and widths, the corner diagonals split off a
periodic matrix or none (with the plan of the whole band, taken where the split is
refused), whether the factor is stored or each solve factors as it goes, and which route
computes a selected inverse. Nothing below asks these questions again: the factorizations
and solves (:mod:`jaxdia._linalg.banded`) do what the plan says. A plan is a static
argument of every compiled program it shapes (a stored factor carries its own), so a
program compiled under one choice is never reused under another.

==========================  ============================================  ==============
the matrix                  CPU                                           GPU and TPU
==========================  ============================================  ==============
LU, tridiagonal             ``GT``                                        ``CR``
LU, wider                   ``GB``                                        ``CR``
Cholesky, tridiagonal       ``PT``                                        ``CH``
Cholesky, wider             ``PB``                                        ``CH``
periodic LU                 the band's layout, its corners split off      the same
                            (:func:`periodic_split`); refused: the whole
                            band's
one solve (``SOLVE``)       ``ONESHOT``; a periodic band: its stored LU   the same
repeated solves             a tridiagonal matrix ``ONESHOT``, else the    the same
(``SOLVES``)                stored LU
multigrid's coarsest level  the stored LU                                 a dense inverse
==========================  ============================================  ==============

``method`` forces an implementation (:data:`jaxdia._dispatch.METHODS`): ``"parallel"``
cyclic reduction everywhere, ``"lapack"`` and ``"scan"`` LAPACK's layouts (and a stored
factor for one solve); the primitives, which are told the method, then call LAPACK or run
the scan. ``platform`` None is the default device's (:func:`jaxdia._dispatch.default_platform`),
read when the plan is asked for: when the caller is traced.

Example:
  >>> from jaxdia._linalg.plan import Use, choose
  >>> choose((-1, 0, 1), 100, platform="cpu").layout
  GT
  >>> choose((-1, 0, 1), 100, platform="tpu").layout
  CR
  >>> periodic = choose((-99, -1, 0, 1, 99), 100, platform="cpu")
  >>> periodic.layout, periodic.split.rank, periodic.fallback.layout
  (GT, 2, GB)
  >>> choose((-2, 0, 1), 100, use=Use.SOLVE, platform="cpu").stored
  False
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, fields, replace
from functools import cache

from .. import _dispatch
from .._geometry import band_widths
from .._kernels.band_layouts import CH, CR, GB, GT, ONESHOT, PB, PT, Layout
from .periodic import Split


class Use(enum.Enum):
    """What a factor is for."""

    #: A stored factor, solved with many times (``lu_factor``, ``cho_factor``,
    #: ``slogdet``, ``BandedSolver``).
    FACTOR = "factor"
    #: One solve (``solve_banded``): no stored factor where the solve can factor as it goes.
    SOLVE = "solve"
    #: Repeated solves with one matrix, no factor returned (``eigsh``'s shift-invert): a
    #: tridiagonal matrix is solved afresh each time (``gtsv`` on CPU and GPUs has no
    #: per-call cost beyond LAPACK's, where a stored factor's solve is a host call).
    SOLVES = "solves"
    #: Multigrid's coarsest level: on GPU and TPU its dense inverse (one product per
    #: cycle, where a banded solve is a sequence of small kernels).
    COARSE = "coarse"
    #: The selected inverse (``selected_inverse``): for a Hermitian positive definite
    #: matrix, the route through a periodic split of the Hermitian matrix, the Cholesky
    #: factor, or cyclic reduction.
    INVERSE = "inverse"


@dataclass(frozen=True)
class Plan:
    """A banded factor, chosen by :func:`choose`. Hashable and compared by value: a
    static argument of the compiled programs it shapes.

    Attributes:
      layout: the factor's layout (of the band, for a periodic factor); ``ONESHOT``: none
        is stored, each solve factors.
      widths: the layout's widths: ``(kl, ku)`` of an LU (of the band) and of ``ONESHOT``,
        ``(kd, lower)`` of a Cholesky factor, ``()`` for ``GT`` and ``PT``.
      lower: the triangle a Cholesky factor reads; None for an LU factor.
      method: the implementation forced (:data:`jaxdia._dispatch.METHODS`), which the
        primitives are told: their lowering reads it.
      split: the corner diagonals split off a periodic matrix (see
        :mod:`jaxdia._linalg.periodic`), or None.
      fallback: with a split, the plan of the whole band, taken outside ``jit`` where the
        periodic factor fails (its band singular, or its correction inaccurate).
      takahashi: the band of the inverse is read from this LAPACK Cholesky factor by
        Takahashi's recurrences on the host
        (:func:`jaxdia._dispatch.selected_inverse_from_host_factor`).
      pivoted: a general selected inverse that cyclic reduction's residual check refuses
        is computed again from the pivoted LU
        (:func:`jaxdia._dispatch.selected_inverse_pivots_by_scan`).
      dense: the matrix is solved by its dense inverse instead (``Use.COARSE``).
    """

    layout: Layout
    widths: tuple[int, ...]
    lower: bool | None = None
    method: str = "auto"
    split: Split | None = None
    fallback: Plan | None = None
    takahashi: bool = False
    pivoted: bool = False
    dense: bool = False
    # Hashed once: the plan keys every eager solve's compiled program.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_hash", hash(self._values()))

    def _values(self) -> tuple[object, ...]:
        return tuple(getattr(self, f.name) for f in fields(self) if f.init)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[object, ...]:
        # Rebuilt from its fields, so that the hash is this process's.
        return Plan, self._values()

    @property
    def stored(self) -> bool:
        """Whether the factor's arrays are stored (else each solve factors the matrix)."""
        return self.layout is not ONESHOT and not self.dense

    @property
    def compiled_whole(self) -> bool:
        """Whether a computation with this factor compiles as one program: not a periodic
        one, whose ``fallback`` is taken outside ``jit`` on the concrete factor's ``info``
        (a slogdet or selected inverse is then run op by op, the factor compiled apart)."""
        return self.split is None

    @property
    def band(self) -> Plan:
        """The plan of a periodic factor's band alone: this one without its corners."""
        return replace(self, split=None, fallback=None)


def choose(
    offsets: tuple[int, ...],
    n: int,
    lower: bool | None = None,
    *,
    use: Use = Use.FACTOR,
    method: str = "auto",
    platform: str | None = None,
    function: str = "choose",
) -> Plan:
    """The factor of an ``n x n`` matrix with these ``offsets``: an LU factor, or with
    ``lower`` given a Cholesky factor of the Hermitian matrix that triangle defines, for
    ``use``, with ``method`` forced, on ``platform`` (None: the default device's); see the
    module docstring. ``function`` names the public function asking, in errors.

    Raises:
      ValueError: if ``method`` is not one of :data:`jaxdia._dispatch.METHODS`.
    """
    if not isinstance(method, str) or method not in _dispatch.METHODS:
        raise ValueError(f"{function}: method must be one of {_dispatch.METHODS}, got {method!r}")
    if platform is None:
        platform = _dispatch.default_platform()
    return _choose(tuple(offsets), int(n), lower, use, method, platform)


@cache
def _choose(
    offsets: tuple[int, ...], n: int, lower: bool | None, use: Use, method: str, platform: str
) -> Plan:
    # The selected inverse of a Hermitian matrix: a periodic one's corners split off as a
    # general matrix's (the Hermitian matrix's offsets).
    hermitian = lower is not None and use is Use.INVERSE
    general = hermitian_offsets(offsets, bool(lower)) if hermitian else offsets
    widths = band_widths(general)
    cyclic = _dispatch.factors_by_cyclic_reduction(platform, method)
    if lower is not None:
        if hermitian:
            plan = _lu(general, widths, n, cyclic, method, platform)
            if plan.split is not None:
                return plan
        return _cholesky(offsets, lower, cyclic, method, platform, use)
    if use is Use.COARSE and _dispatch.coarse_solve_by_inverse(platform):
        return Plan(*_lu_layout(widths, cyclic), method=method, dense=True)
    plan = _lu(offsets, widths, n, cyclic, method, platform)
    if plan.split is not None:
        return plan
    lapack_forced = method in ("lapack", "scan")  # tests reach LAPACK's layouts this way
    tridiagonal = max(widths) <= 1
    if (use is Use.SOLVE and not lapack_forced) or (use is Use.SOLVES and tridiagonal):
        return replace(plan, layout=ONESHOT, widths=widths)
    return plan


def pivoted_lu(plan: Plan) -> Plan | None:
    """The plan of LAPACK's LU with partial pivoting that a cyclic reduction's LU ``plan``
    (of a whole band) reads where the reduction met a singular block, on the platforms
    whose solves fall back to LAPACK (``plan.pivoted``); None elsewhere."""
    if plan.layout is not CR or not plan.pivoted or plan.split is not None:
        return None
    kl, ku = plan.widths
    return Plan(*_lu_layout((kl, ku), cyclic=False), method="lapack")


def _lu_layout(widths: tuple[int, int], cyclic: bool) -> tuple[Layout, tuple[int, ...]]:
    """The LU factor's layout and its widths, for a band of ``widths`` ``(kl, ku)``."""
    if cyclic:
        return CR, widths
    if max(widths) <= 1:
        return GT, ()
    return GB, widths


def _lu(
    offsets: tuple[int, ...],
    widths: tuple[int, int],
    n: int,
    cyclic: bool,
    method: str,
    platform: str,
) -> Plan:
    """The LU plan of a band of ``widths``: its corners split off where
    :func:`periodic_split` says."""
    pivoted = _dispatch.selected_inverse_pivots_by_scan(platform)
    whole = Plan(*_lu_layout(widths, cyclic), method=method, pivoted=pivoted)
    where = periodic_split(offsets, n)
    if where is None:
        return whole
    band = _lu_layout(where.widths, cyclic)
    return Plan(*band, method=method, split=where, fallback=whole, pivoted=pivoted)


def _cholesky(
    offsets: tuple[int, ...], lower: bool, cyclic: bool, method: str, platform: str, use: Use
) -> Plan:
    """The Cholesky plan (a periodic matrix's corners are factored as part of the band)."""
    kd = cholesky_bandwidth(offsets, lower)
    if cyclic:
        layout, widths = CH, (kd, int(lower))
    elif kd <= 1:
        layout, widths = PT, ()
    else:
        layout, widths = PB, (kd, int(lower))
    takahashi = layout in (PB, PT) and _dispatch.selected_inverse_from_host_factor(platform)
    if use is Use.INVERSE:
        # The selected inverse holds every offset: the factor's band must reach them all.
        takahashi = takahashi and all(abs(k) <= kd for k in offsets)
    return Plan(layout, widths, lower, method, takahashi=takahashi)


def cholesky_bandwidth(offsets: tuple[int, ...], lower: bool) -> int:
    """``kd``: how far the triangle ``lower`` selects reaches from the main diagonal."""
    return max((abs(k) for k in offsets if (k <= 0 if lower else k >= 0)), default=0)


def hermitian_offsets(offsets: tuple[int, ...], lower: bool) -> tuple[int, ...]:
    """The offsets of the Hermitian matrix that the triangle ``lower`` of a matrix with
    ``offsets`` defines: ``offsets`` and the mirror images of those in that triangle."""
    triangle = [k for k in offsets if (k <= 0 if lower else k >= 0)]
    return tuple(sorted({*offsets, *(-k for k in triangle)}))


# -- when a periodic matrix's corners split off ----------------------------------------------


def _work(n: int, lower: int, upper: int, rank: int) -> int:
    """Multiply-adds of factoring a band of ``lower``/``upper`` diagonals plus ``rank``
    corrections (their solves and the dense ``rank x rank`` factor), and of one solve."""
    band = n * (lower + 1) * (lower + upper + 1) + n * (2 * lower + upper + 1)
    return band + rank * n * (2 * lower + upper + 1) + rank**3 + 2 * n * rank


def separated(n: int, lower: int, upper: int, p: int, q: int) -> bool:
    """Whether a band of ``lower``/``upper`` diagonals and corners touching the last ``p``
    and the first ``q`` columns are a periodic stencil covering at most half the circle
    of ``n`` points: ``2 (L + U + 1) <= n`` (see :func:`periodic_split`)."""
    return 2 * (max(lower, p) + max(upper, q) + 1) <= n


def periodic_split(offsets: tuple[int, ...], n: int) -> Split | None:
    """The cheapest split of an ``n x n`` matrix's ``offsets`` into a band and corner
    diagonals that are :func:`separated`, or None when the plain band is cheapest or no
    split is separated (no corners, corners that reach too far to be a small correction,
    or ``n`` too small for the corners to be told from the band).

    The matrix must be a periodic band: a stencil reaching ``L = max(l, p)`` below and
    ``U = max(u, q)`` above the diagonal (``l``, ``u`` the band's widths) on a circle of
    ``n`` points, with ``2 (L + U + 1) <= n``. The stencil then covers at most half the
    circle: in every row the corner entries are at least as many zero columns away from
    the band's as the stencil is wide, and no corner diagonal is a band diagonal seen from
    the other side (the ``±1`` of a ``2 x 2`` tridiagonal matrix are ``±(n - 1)`` only in
    that sense: it is a band). Small ``n`` never splits. Among the splits that qualify,
    the work of the plain band is compared with that of each (the band's factor plus the
    ``r`` corrections), and the cheapest is taken.

    Example:
      >>> from jaxdia._linalg.plan import periodic_split
      >>> periodic_split((-99, -1, 0, 1, 99), 100)
      Split(band=(1, 2, 3), p=1, q=1, widths=(1, 1))
      >>> periodic_split((-1, 0, 1), 100) is None
      True
    """
    uppers = sorted({0, *(k for k in offsets if k > 0)})
    lowers = sorted({0, *(-k for k in offsets if k < 0)})
    best, best_work = None, _work(n, lowers[-1], uppers[-1], 0)  # the plain band
    for u in uppers:
        above = [k for k in offsets if k > u]
        p = n - min(above) if above else 0
        for l in lowers:
            below = [k for k in offsets if k < -l]
            q = n + max(below) if below else 0
            if p + q == 0 or not separated(n, l, u, p, q):
                continue
            work = _work(n, l, u, p + q)
            if work < best_work:
                band = tuple(i for i, k in enumerate(offsets) if -(n - q) < k < n - p)
                best, best_work = Split(band, p, q, (l, u)), work
    return best
