"""The layouts of a banded factor: what its arrays are, and what computes and solves them.

One frozen :class:`Layout` per layout, named after LAPACK's routines where it is theirs:

================  ====================================================  ===============
layout            the factor                                            ``widths``
================  ====================================================  ===============
:data:`GB`        LU with partial pivoting, ``?gbtrf``'s band array     ``(kl, ku)``
                  ``lu`` ``(..., n, 2kl+ku+1)`` and ``pivots``
:data:`GT`        tridiagonal LU with partial pivoting, ``?gttrf``'s    ``()``
                  rows ``lu`` ``(..., 4, n)`` and ``pivots``
:data:`PB`        Cholesky, ``?pbtrf``'s band array ``c``               ``(kd, lower)``
                  ``(..., n, kd+1)``
:data:`PT`        tridiagonal ``L D L^H``, ``?pttrf``'s real ``d`` and  ``()``
                  ``e`` ``(..., n)``
:data:`CR`        LU by block cyclic reduction (no row interchanges     ``(kl, ku)``
                  across blocks), its arrays per level
:data:`CH`        Cholesky by block cyclic reduction                    ``(kd, lower)``
:data:`ONESHOT`   none: each solve factors the matrix                   ``(kl, ku)``
================  ====================================================  ===============

The factor and solve primitives (:mod:`jaxdia._kernels.band_primitives`) take the layout
as a static parameter; the factor classes read its fields instead of decoding a name.

Example:
  >>> from jaxdia._kernels.band_layouts import GB, by_code
  >>> GB.pivots, GB.hermitian, GB.name, GB.band_columns((2, 1))
  (True, False, 'band', 6)
  >>> by_code("pt").leaves
  ('d', 'e')
"""

from __future__ import annotations

from dataclasses import dataclass


# eq=False: the layouts are this module's objects (unpickled and copied as them, see
# __reduce__), so identity is equality, and hashing by identity keeps the look-up of a
# solve's compiled function (jaxdia._linalg.banded) at C speed on every eager call.
@dataclass(frozen=True, eq=False, repr=False)
class Layout:
    """A banded factor's layout (see the module docstring for the table).

    Attributes:
      code: the short name (LAPACK's routine prefix for its layouts: ``"gb"`` for
        ``?gbtrf``); also the ``repr``.
      name: what ``BandedLU.kind``/``BandedCholesky.kind`` say: ``"band"``,
        ``"tridiagonal"`` or ``"parallel"`` (``""`` for :data:`ONESHOT`, never a stored
        factor's).
      hermitian: a Cholesky factor of the Hermitian matrix one triangle defines: its
        ``widths`` are ``(kd, lower)`` and it is solved untransposed only.
      lapack: LAPACK's layout: computed and solved by LAPACK on CPU or by the
        ``lax.scan`` kernels (:mod:`jaxdia._kernels.band_scan`).
      parallel: block cyclic reduction's arrays (:mod:`jaxdia._kernels.band_parallel`),
        as many as the reduction has levels.
      pivots: one of the arrays is LAPACK's row interchanges.
      band_array: the factorization reads LAPACK's band array ``(..., n, ldab)``, built
        from DIA ``data`` by the primitive's ``placement`` (else rows of diagonals).
      refined: the solve takes the matrix's ``data`` after the factor's arrays, checks its
        backward error and refines (:mod:`jaxdia._kernels.band_refine`).
      operand_core: the dims per system of each factor operand (LAPACK's layouts).
      array_core: the dims per system of each factor array (LAPACK's layouts).
      solve_core: the dims per system of the solve's first operand (a factor array, or
        ``data`` for :data:`ONESHOT`).
      leaves: the factor arrays' names (LAPACK's layouts; a parallel factor's are named
        per level).
      real_arrays: the indices of the arrays that are real for a complex matrix.
    """

    code: str
    name: str
    hermitian: bool
    lapack: bool
    parallel: bool
    pivots: bool
    band_array: bool
    refined: bool
    operand_core: tuple[int, ...]
    array_core: tuple[int, ...]
    solve_core: int
    leaves: tuple[str, ...]
    real_arrays: tuple[int, ...] = ()

    def __repr__(self) -> str:
        return self.code.upper()

    def __reduce__(self) -> tuple[object, ...]:
        # Unpickled (and copied) as the module's own object, so `is` comparisons hold.
        return by_code, (self.code,)

    @property
    def typed_array(self) -> int:
        """The index of the first array of the factor's dtype (``PT``'s ``d`` is real)."""
        return next(i for i in range(len(self.array_core) + 1) if i not in self.real_arrays)

    def band_columns(self, widths: tuple[int, ...]) -> int:
        """``ldab``: the columns of LAPACK's band array (:attr:`band_array` layouts, and
        :data:`GB`'s for the band ``widths`` ``(kl, ku)`` of a one-shot solve)."""
        if self.hermitian:
            return widths[0] + 1
        return 2 * widths[0] + widths[1] + 1


#: LAPACK's banded LU (``?gbtrf``/``?gbtrs``).
GB = Layout(
    "gb",
    "band",
    hermitian=False,
    lapack=True,
    parallel=False,
    pivots=True,
    band_array=True,
    refined=False,
    operand_core=(2,),
    array_core=(2, 1),
    solve_core=2,
    leaves=("lu", "pivots"),
)
#: LAPACK's tridiagonal LU (``?gttrf``/``?gttrs``).
GT = Layout(
    "gt",
    "tridiagonal",
    hermitian=False,
    lapack=True,
    parallel=False,
    pivots=True,
    band_array=False,
    refined=False,
    operand_core=(2,),
    array_core=(2, 1),
    solve_core=2,
    leaves=("lu", "pivots"),
)
#: LAPACK's banded Cholesky (``?pbtrf``/``?pbtrs``).
PB = Layout(
    "pb",
    "band",
    hermitian=True,
    lapack=True,
    parallel=False,
    pivots=False,
    band_array=True,
    refined=False,
    operand_core=(2,),
    array_core=(2,),
    solve_core=2,
    leaves=("c",),
)
#: LAPACK's tridiagonal ``L D L^H`` (``?pttrf``/``?pttrs``).
PT = Layout(
    "pt",
    "tridiagonal",
    hermitian=True,
    lapack=True,
    parallel=False,
    pivots=False,
    band_array=False,
    refined=False,
    operand_core=(1, 1),
    array_core=(1, 1),
    solve_core=1,
    leaves=("d", "e"),
    real_arrays=(0,),
)
#: Block cyclic reduction's LU.
CR = Layout(
    "cr",
    "parallel",
    hermitian=False,
    lapack=False,
    parallel=True,
    pivots=False,
    band_array=False,
    refined=True,
    operand_core=(2,),
    array_core=(),
    solve_core=3,
    leaves=(),
)
#: Block cyclic reduction's Cholesky.
CH = Layout(
    "ch",
    "parallel",
    hermitian=True,
    lapack=False,
    parallel=True,
    pivots=False,
    band_array=False,
    refined=False,
    operand_core=(2,),
    array_core=(),
    solve_core=3,
    leaves=(),
)
#: No stored factor: the solve factors the matrix as it goes (LAPACK or cyclic reduction,
#: chosen per platform and size when the program is lowered).
ONESHOT = Layout(
    "os",
    "",
    hermitian=False,
    lapack=False,
    parallel=False,
    pivots=False,
    band_array=False,
    refined=True,
    operand_core=(),
    array_core=(),
    solve_core=2,
    leaves=(),
)

LAYOUTS = (GB, GT, PB, PT, CR, CH, ONESHOT)


def by_code(code: str) -> Layout:
    """The layout of this :attr:`Layout.code`."""
    return next(layout for layout in LAYOUTS if layout.code == code)
