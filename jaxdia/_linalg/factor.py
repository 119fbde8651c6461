"""Banded factors of a DiaMatrix: factor once and solve many (the one-call solves,
:func:`solve_banded`, :func:`solveh_banded` and :func:`factorized`, are in
:mod:`jaxdia._linalg.direct`).

:func:`lu_factor` and :func:`cho_factor` factor a square banded :class:`jaxdia.DiaMatrix`
and return a :class:`BandedLU` or :class:`BandedCholesky`, whose ``solve`` reuses the
stored factor: the time loop of an implicit scheme factors once, outside its
``lax.scan``, and solves once per step. The names follow ``jax.scipy.linalg`` and SciPy
(``lu_factor``/``lu_solve``, ``cho_factor``/``cho_solve``).

A factor is a pytree: its arrays (the matrix's ``data`` and LAPACK's factor arrays) are
leaves, its layout, band widths, shape and offsets static aux data. It can be returned
from ``jit``, closed over or carried by ``lax.scan``/``fori_loop``, and ``vmap``\\ ped
over. Solves are differentiable with respect to ``b`` and to ``A.data`` (the factor keeps
``A`` for that): ``lax.custom_linear_solve`` differentiates them implicitly, with the
stored factor solving the transposed system, so a gradient never factors again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import jax
import numpy as np
from jax import Array
from jax.typing import ArrayLike

from .._checks import as_array, integers_as, is_traced
from .._geometry import band_widths
from .._matrix import DiaMatrix, as_square_matrix
from .._parts import DiaParts
from .._pytree import Immutable, built_by
from .._scipy_operator import ScipyOperator
from . import banded, determinant, periodic
from .plan import Plan, cholesky_bandwidth, choose


def _parallel_leaf_names(count: int) -> tuple[str, ...]:
    """Key-path names of a parallel factor's arrays: per level of the reduction its
    block inverses, couplings and kept blocks, then the last block's inverse."""
    levels = (count - 1) // 3
    kinds = ("inverses", "couplings", "kept")
    names = [f"{name}_{level}" for level in range(levels) for name in kinds]
    return (*names, "inverse")


_Factor = TypeVar("_Factor", bound="_BandedFactor")


#: A factor's static aux data: the matrix's offsets and shape, and the factor's plan.
_Aux = tuple[tuple[int, ...], tuple[int, int], Plan]


def _leaf_shape(value: object) -> tuple[int, ...] | None:
    shape = getattr(value, "shape", None)
    return tuple(shape) if isinstance(shape, tuple) else None


class _BandedFactor(Immutable, ScipyOperator):
    """What the LU and Cholesky factors share: the matrix and its factor (a
    :class:`jaxdia._linalg.banded.Factor`: the plan, the arrays, ``info``), and SciPy's
    ``LinearOperator`` protocol for ``A^-1`` (``matvec`` solves), so that a factor is
    SciPy's ``M=`` or ``OPinv=``."""

    __slots__ = ("_data", "_factor", "_offsets", "_shape")
    _leaves = ("_data", "_factor")
    _static = ("_offsets", "_shape")
    _data: Array
    _factor: banded.Factor
    _offsets: tuple[int, ...]
    _shape: tuple[int, int]

    @classmethod
    def _of(cls: type[_Factor], A: DiaParts, factor: banded.Factor) -> _Factor:
        """The factor ``factor`` of ``A``."""
        return cls._make(A.data, factor, A.offsets, A.shape)

    # -- pytree: the factor arrays are leaves of their own, named by layout --------------

    def tree_flatten(self) -> tuple[tuple[Array, ...], _Aux]:
        factor = self._factor
        corrections = () if factor.correction is None else factor.correction.arrays
        leaves = (self._data, *factor.arrays, *corrections, factor.info)
        return leaves, (self._offsets, self._shape, factor.plan)

    def _leaf_keys(self) -> tuple[str, ...]:
        factor = self._factor
        layout = factor.plan.layout
        names = _parallel_leaf_names(len(factor.arrays)) if layout.parallel else layout.leaves
        if factor.correction is not None:  # the band's arrays, then the corners' correction
            names = (*names, *periodic.CORRECTION_ARRAYS)
        return ("data", *names, "info")

    @classmethod
    def tree_unflatten(cls: type[_Factor], aux: _Aux, children: Iterable[Any]) -> _Factor:
        # JAX unflattens with tracers, None or placeholder objects: do not validate here.
        offsets, shape, plan = aux
        data, *arrays, info = children
        correction = None
        if plan.split is not None:
            *arrays, Z, lu, pivots = arrays
            correction = periodic.Correction(Z, lu, pivots)
        return cls._make(data, banded.Factor(plan, tuple(arrays), info, correction), offsets, shape)

    # -- properties ----------------------------------------------------------------------

    @property
    def matrix(self) -> DiaMatrix:
        """The factored matrix (its products give the solves' derivatives)."""
        return DiaMatrix._wrap(self._parts)

    @property
    def _parts(self) -> DiaParts:
        return DiaParts(self._data, self._offsets, self._shape)

    @property
    def shape(self) -> tuple[int, int]:
        """``(n, n)``, the matrix's shape."""
        return self._shape

    @property
    def batch_shape(self) -> tuple[int, ...]:
        """The leading dims of the matrix's ``data``: a batch of factors."""
        return tuple(self._data.shape[:-2])

    @property
    def dtype(self) -> np.dtype:
        """The dtype the factor is stored and solved in (float32 for 16-bit matrices)."""
        factor = self._factor
        return np.dtype(factor.arrays[factor.plan.layout.typed_array].dtype)

    @property
    def kind(self) -> str:
        """``"tridiagonal"`` (LAPACK's ``?gttrf``/``?pttrf`` form), ``"band"`` (LAPACK's
        ``?gbtrf``/``?pbtrf``), ``"parallel"`` (block cyclic reduction, the factor on
        GPU and TPU) or ``"periodic"`` (a band's factor and a low-rank correction for
        corner diagonals; LU only)."""
        return "periodic" if self._factor.correction is not None else self._factor.plan.layout.name

    @property
    def info(self) -> Array:
        """LAPACK's ``info`` per matrix (shape ``batch_shape``): 0 when the factorization
        succeeded, else the 1-based index of the first failing pivot."""
        return self._factor.info

    @property
    def ok(self) -> Array:
        """``info == 0``: whether the factor is usable (check it under ``jit``, where a
        failed factorization raises nothing and gives NaN solutions)."""
        return self._factor.info == 0

    def _solve(self, b: ArrayLike, trans: int, function: str) -> Array:
        """``op(A)^-1 b`` with the stored factor (see :func:`jaxdia._linalg.banded.solve`).
        Only a ``b`` that is not a JAX array is converted here (a NumPy integer ``b`` on
        the host, see :func:`jaxdia._checks.integers_as`): the eager solve's fast path."""
        if not isinstance(b, jax.Array):
            b = integers_as(as_array(b, f"{function}: b"), np.dtype(self._data.dtype))
        return banded.solve(self._parts, self._factor, b, trans=trans, function=function)

    def _describe(self, extra: str) -> str:
        name = type(self).__name__
        shapes = [_leaf_shape(leaf) for leaf in self.tree_flatten()[0]]
        if any(shape is None for shape in shapes):
            # A pytree with other leaves (jax.tree.map, a vmap in_axes spec).
            leaves = self.tree_flatten()[0]
            return f"{name}(shape={self._shape}, kind={self.kind!r}{extra}, leaves={leaves!r})"
        batch = f", batch_shape={self.batch_shape}" if self.batch_shape else ""
        dtype = self.dtype.name
        return f"{name}(shape={self._shape}, dtype={dtype}, kind={self.kind!r}{extra}{batch})"


@jax.tree_util.register_pytree_with_keys_class
@built_by("lu_factor")
class BandedLU(_BandedFactor):
    """The LU factorization with partial pivoting of a square banded matrix; see
    :func:`jaxdia.lu_factor`.

    LAPACK's factor, stored as leaves: for a tridiagonal matrix (offsets within
    ``{-1, 0, 1}``) ``?gttrf``'s form, ``lu`` of shape ``(*batch_shape, 4, n)`` with rows
    ``dl`` (the multipliers), ``d``, ``du``, ``du2`` (the diagonal and two superdiagonals
    of ``U``); for any other band ``?gbtrf``'s, ``lu`` of shape
    ``(*batch_shape, n, 2 l + u + 1)`` (column ``j`` of LAPACK's band array in row ``j``;
    ``U`` has ``l + u`` superdiagonals after row interchanges). ``pivots``
    ``(*batch_shape, n)``: row ``i`` was interchanged with row ``pivots[i]`` (0-based, as
    SciPy's). ``info``: see :attr:`info`. The matrix's ``data`` is a leaf too.

    On GPU and TPU the factor is block cyclic reduction's instead (``kind ==
    "parallel"``, see :func:`jaxdia.lu_factor`): ``factors`` holds, per level of the
    reduction, the inverses of the eliminated ``m x m`` diagonal blocks (``m`` the wider
    of ``l`` and ``u``), their couplings to the kept blocks and the kept blocks'
    couplings, then the inverse of the last block; it has no ``lu`` or ``pivots``.

    A periodic factor (``kind == "periodic"``, see :func:`jaxdia.lu_factor`) holds the
    factor arrays of the band without its corner diagonals, then ``corrections`` (``Z =
    B^-1 U``, ``(*batch_shape, n, r)``), ``capacitance_lu`` and ``capacitance_pivots``
    (``jax.scipy.linalg.lu_factor`` of ``S``); it has no ``lu`` or ``pivots`` of ``A``.

    The factor is also SciPy's ``LinearOperator`` for ``A^-1``: ``matvec``/``matmat``
    solve ``A x = b``, ``rmatvec``/``rmatmat`` solve ``A^H x = b`` (NumPy in and out;
    ``shape`` and ``dtype`` as the matrix's), so it can be SciPy's ``M=``, or the
    ``OPinv=`` of SciPy's shift-invert ``eigsh`` for ``lu_factor(A - sigma I)``.

    Attributes:
      matrix: the factored DiaMatrix.
      lu: the factor, LAPACK's layout (see above; LAPACK's kinds only).
      pivots: the row interchanges (LAPACK's kinds only).
      factors: the factor's arrays, of any kind.
      info: 0, or the 1-based index of the first exactly zero pivot ``U[i - 1, i - 1]``
        (a parallel factor on GPU/TPU: the first row of a singular diagonal block it
        met; a periodic factor: that of its band, -2 when the correction ``S`` is
        singular, -3 when the band without its corners is too ill-conditioned for the
        correction to be accurate; see :func:`jaxdia.lu_factor`).
      ok: ``info == 0``.
      kind: ``"tridiagonal"``, ``"band"``, ``"parallel"`` or ``"periodic"``.
      lower: the number of subdiagonals ``l``.
      upper: the number of superdiagonals ``u``.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([[1.0] * 4, [4.0] * 5, [2.0] * 3], offsets=[-1, 0, 2])
      >>> lu = jaxdia.lu_factor(A)
      >>> lu
      BandedLU(shape=(5, 5), dtype=float32, kind='band', lower=1, upper=2)
      >>> x = lu.solve(jnp.arange(5.0))
      >>> bool(jnp.allclose(A @ x, jnp.arange(5.0), atol=1e-5))
      True
    """

    __slots__ = ()

    _name = "BandedLU"

    def _lapack_only(self, name: str) -> None:
        if self._factor.correction is not None:
            raise AttributeError(
                f"BandedLU.{name}: a periodic factor (a band plus corner diagonals) has no "
                "LAPACK layout of A; its arrays are BandedLU.factors"
            )
        if self._factor.plan.layout.parallel:
            raise AttributeError(
                f"BandedLU.{name}: a parallel (cyclic reduction) factor has no LAPACK "
                "layout; its arrays are BandedLU.factors"
            )

    def _columns(self, x: ArrayLike, adjoint: bool) -> Array:
        return lu_solve(self, x, trans=2 if adjoint else 0)

    @property
    def lu(self) -> Array:
        """LAPACK's factor (see the class docstring for its layout).

        Raises:
          AttributeError: for a parallel factor (``kind == "parallel"``).
        """
        self._lapack_only("lu")
        return self._factor.arrays[0]

    @property
    def pivots(self) -> Array:
        """``(*batch_shape, n)`` int32: row ``i`` was interchanged with ``pivots[i]``.

        Raises:
          AttributeError: for a parallel factor (``kind == "parallel"``).
        """
        self._lapack_only("pivots")
        return self._factor.arrays[1]

    @property
    def factors(self) -> tuple[Array, ...]:
        """The factor's arrays: ``(lu, pivots)``, or a parallel or periodic factor's (see
        above)."""
        factor = self._factor
        if factor.correction is None:
            return factor.arrays
        return (*factor.arrays, *factor.correction.arrays)

    @property
    def lower(self) -> int:
        """The number of subdiagonals of the factored matrix."""
        return band_widths(self._offsets)[0]

    @property
    def upper(self) -> int:
        """The number of superdiagonals of the factored matrix."""
        return band_widths(self._offsets)[1]

    def solve(self, b: ArrayLike, trans: int | str = 0) -> Array:
        """Solves ``A @ x == b`` with the stored factor (see :func:`jaxdia.lu_solve`).

        Args:
          b: shape ``(n,)`` or ``(..., n, k)``.
          trans: 0 or ``"N"`` solves ``A x = b``, 1 or ``"T"`` ``A^T x = b``, 2 or
            ``"H"`` ``A^H x = b`` (SciPy's ``splu(A).solve`` spells it with letters).

        Returns:
          ``x``, as :func:`jaxdia.lu_solve` returns it.

        Example:
          >>> import jax.numpy as jnp
          >>> import jaxdia
          >>> A = jaxdia.diags([-1.0, 3.0, -1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> x = jaxdia.lu_factor(A).solve(jnp.ones(4))
          >>> [round(float(value), 4) for value in x]
          [0.6, 0.8, 0.8, 0.6]
        """
        return lu_solve(self, b, trans)

    def slogdet(self) -> tuple[Array, Array]:
        """``(sign, logabsdet)`` of the factored matrix, read from the stored factor (see
        :func:`jaxdia.slogdet`, which it matches; differentiable in the matrix's data).

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([1.0, -3.0, 2.0], offsets=[-1, 0, 1], shape=(3, 3))
          >>> sign, logabsdet = jaxdia.lu_factor(A).slogdet()
          >>> float(sign), round(float(logabsdet), 4)  # det A = -15
          (-1.0, 2.7081)
        """
        return determinant.slogdet_of(self._parts, self._factor)

    def __repr__(self) -> str:
        return self._describe(f", lower={self.lower}, upper={self.upper}")


@jax.tree_util.register_pytree_with_keys_class
@built_by("cho_factor")
class BandedCholesky(_BandedFactor):
    """The Cholesky factorization of a Hermitian positive definite banded matrix; see
    :func:`jaxdia.cho_factor`.

    LAPACK's factor of the Hermitian matrix that one triangle of ``A`` defines, stored as
    leaves in ``factors``: for a tridiagonal matrix ``?pttrf``'s ``A = L D L^H``, the real
    diagonal ``d`` and the subdiagonal ``e`` of ``L`` (each ``(*batch_shape, n)``, the
    last entry of ``e`` unused); for any other band ``?pbtrf``'s ``U^H U`` (or ``L L^H``
    with ``lower``), one array ``(*batch_shape, n, kd + 1)`` holding column ``j`` of
    LAPACK's band array in row ``j``. On GPU and TPU block cyclic reduction's arrays
    (``kind == "parallel"``; see :class:`BandedLU`). The matrix's ``data`` is a leaf too.
    Like :class:`BandedLU`, the factor is SciPy's ``LinearOperator`` for ``A^-1``
    (``matvec`` solves, and so does ``rmatvec``: the matrix is Hermitian).

    Attributes:
      matrix: the factored DiaMatrix (only the triangle ``lower`` selects is read).
      factors: the factor's arrays (see above).
      info: 0, or the order of the first leading minor that is not positive (a
        parallel factor: the first row of a diagonal block of the reduction that was
        not positive definite).
      ok: ``info == 0``.
      kind: ``"tridiagonal"``, ``"band"`` or ``"parallel"``.
      lower: which triangle of ``matrix`` was read.
      bandwidth: the number of superdiagonals ``kd`` of that triangle.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([1.0, 4.0, 2.0, 4.0, 1.0], offsets=[-2, -1, 0, 1, 2], shape=(6, 6))
      >>> A = A + 6.0 * jaxdia.eye(6)
      >>> c = jaxdia.cho_factor(A)
      >>> c
      BandedCholesky(shape=(6, 6), dtype=float32, kind='band', lower=False, bandwidth=2)
      >>> bool(jnp.allclose(A @ c.solve(jnp.ones(6)), 1.0, atol=1e-5))
      True
    """

    __slots__ = ()

    _name = "BandedCholesky"

    def _columns(self, x: ArrayLike, adjoint: bool) -> Array:
        return cho_solve(self, x)  # the factored matrix is Hermitian

    @property
    def factors(self) -> tuple[Array, ...]:
        """The factor's arrays: ``(d, e)`` (tridiagonal), ``(c,)`` (band) or a parallel
        factor's."""
        return self._factor.arrays

    @property
    def lower(self) -> bool:
        """Whether the lower triangle of the matrix was read (else the upper)."""
        return bool(self._factor.plan.lower)

    @property
    def bandwidth(self) -> int:
        """``kd``: the number of superdiagonals of the factored Hermitian matrix."""
        return cholesky_bandwidth(self._offsets, self.lower)

    def solve(self, b: ArrayLike) -> Array:
        """Solves ``A @ x == b`` with the stored factor (see :func:`jaxdia.cho_solve`).

        Example:
          >>> import jax.numpy as jnp
          >>> import jaxdia
          >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> x = jaxdia.cho_factor(A).solve(jnp.ones(4))
          >>> [round(float(value), 4) for value in x]
          [2.0, 3.0, 3.0, 2.0]
        """
        return cho_solve(self, b)

    def logdet(self) -> Array:
        """``log det A`` of the factored Hermitian positive definite matrix (real, shape
        ``batch_shape``), read from the stored factor; NaN where the factorization failed
        (``info != 0``). Differentiable in the matrix's data: the gradient is ``A^-1`` on
        the triangle read (off the diagonal twice, the Hermitian matrix counting each
        entry there twice), by :func:`jaxdia.selected_inverse`'s banded recurrences.

        Example:
          >>> import jaxdia
          >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(4, 4))
          >>> round(float(jaxdia.cho_factor(A).logdet()), 4)  # det A = 5
          1.6094
        """
        return determinant.slogdet_of(self._parts, self._factor)[1]

    def __repr__(self) -> str:
        return self._describe(f", lower={self.lower}, bandwidth={self.bandwidth}")


# -- the functions ---------------------------------------------------------------------------


def _raise_failures(
    function: str,
    factor: _BandedFactor,
    what: Callable[[int], str],
) -> None:
    """Outside ``jit``: a ValueError naming a non-finite entry of the matrix (SciPy's
    ``check_finite``), else a LinAlgError naming the first failing pivot of each system."""
    info, batch_shape = factor.info, factor.batch_shape
    if is_traced(info):
        return
    failures = banded.info_errors(info)
    if not failures:
        return
    if any(value == banded.NON_FINITE_ENTRY for _, value in failures):
        banded.refuse_non_finite(function, factor._parts, factor._factor.plan.lower)
    index, value = failures[0]
    where = f" (matrix {index} of the batch)" if batch_shape else ""
    more = f"; {len(failures) - 1} more matrices of the batch fail too" if len(failures) > 1 else ""
    raise np.linalg.LinAlgError(f"{function}: {what(value)}{where}{more}")


def factor_unchecked(A: DiaMatrix, plan: Plan) -> BandedLU | BandedCholesky:
    """The factor of ``A`` that ``plan`` names (:func:`jaxdia._linalg.plan.choose`): a
    :class:`BandedCholesky` where it reads a triangle, else a :class:`BandedLU`; never
    raising on a failed factorization (for solvers that report failure otherwise, such
    as :class:`jaxdia.BandedSolver`)."""
    kind = BandedLU if plan.lower is None else BandedCholesky
    return kind._of(A._parts, banded.factor(A._parts, plan))


def lu_unchecked(A: DiaMatrix, method: str = "auto") -> BandedLU:
    """:func:`lu_factor` that never raises on a failed factorization."""
    plan = choose(A.offsets, A.shape[0], method=method, function="lu_factor")
    return BandedLU._of(A._parts, banded.factor(A._parts, plan))


def solve_unchecked(lu: BandedLU, b: Array) -> Array:
    """:func:`lu_solve` of ``A x = b`` without its NaN for a failed factorization: the
    caller reads ``lu.ok`` itself (one pass over ``x`` less per solve)."""
    return banded.solve(lu._parts, lu._factor, b, function="lu_solve", nan_on_failure=False)


def cholesky_unchecked(A: DiaMatrix, lower: bool, method: str = "auto") -> BandedCholesky:
    """:func:`cho_factor` that never raises on a failed factorization."""
    plan = choose(A.offsets, A.shape[0], lower, method=method, function="cho_factor")
    return BandedCholesky._of(A._parts, banded.factor(A._parts, plan))


def lu_factor(A: DiaMatrix, *, method: str = "auto") -> BandedLU:
    """The LU factorization with partial pivoting of a square banded DiaMatrix ``A``.

    Factor once, solve many times: ``lu_factor(A).solve(b)`` (or :func:`lu_solve`)
    solves ``A @ x == b`` with the stored factor, in O(n (l + u)) per right-hand side
    (for ``l`` subdiagonals and ``u`` superdiagonals) against O(n l (l + u)) to factor.
    Like ``scipy.linalg.lu_factor`` for dense matrices, or ``scipy.sparse.linalg.splu``.

    The band is what the offsets span: ``?gbtrf``'s banded LU (row swaps widen ``U`` to
    ``l + u`` superdiagonals), or ``?gttrf``'s tridiagonal one when the offsets lie within
    ``{-1, 0, 1}``. On CPU, LAPACK runs it (SciPy's routines, called from the XLA program
    without copying the arrays), except for small systems and batches of small systems,
    which a ``lax.scan`` implementation handles faster. A program that calls LAPACK
    cannot be serialized with ``jax.export``.

    On GPU and TPU (the platform of JAX's default device when the factorization is
    traced) block cyclic reduction computes the factor instead (``kind ==
    "parallel"``): ``log2(n / m)`` levels of batched ``m x m`` block operations, ``m =
    max(l, u)``, and no loop over the rows, so a factor and each solve with it take
    O(log n) sequential steps (a scan would take ``n``). It interchanges rows only
    within its diagonal blocks (it inverts every nonsingular block), not across them:
    it is exact (backward stable) for matrices diagonally dominant by rows or columns
    and for Hermitian positive definite ones. For any other matrix each solve checks its
    backward error and refines (at most 3 corrections); a system it cannot solve to
    ``sqrt(eps)`` of backward error is NaN (on CPU, where cyclic reduction runs only
    when forced, LAPACK solves it instead).

    **Periodic bands.** Corner diagonals (offsets near ``±n``: ``±(n - 1)`` for a periodic
    tridiagonal matrix, ``±(n - h) .. ±(n - 1)`` for a stencil of half-width ``h``) would
    make the band the whole matrix. When it is cheaper, the factor (``kind ==
    "periodic"``) is instead that of the band without the corners, ``B``, plus the
    Sherman-Morrison-Woodbury correction for them: ``A = B + U V^T`` with ``V`` selecting
    the ``r`` columns the corners touch, ``Z = B^-1 U`` and the LU of the ``r x r`` matrix
    ``S = I + V^T Z`` are stored, and a solve costs a banded solve plus O(n r). Chosen
    from the offsets, by the work each way, where the corners are well apart from the
    band: the stencil the offsets make on a circle of ``n`` points, ``L`` below and ``U``
    above the diagonal, covers at most half of it (``2 (L + U + 1) <= n``; smaller
    matrices are factored as a band). Like any Woodbury update it loses accuracy when
    ``B`` is much worse conditioned than ``A``, by the growth ``g = 1 + ||Z||_inf`` (a
    bound of ``||B^-1 A||_inf``; below 10 for diagonally dominant matrices, shifted
    periodic Laplacians and implicit advection-diffusion steps), which every periodic
    factor computes: where ``B`` is singular or ``g > 1e3`` (solves would lose more than
    about three digits next to the banded LU's), ``lu_factor`` outside ``jit`` factors the
    whole band instead (the whole matrix); under ``jit`` :attr:`BandedLU.info` is nonzero
    (-3 for ``g``) and solves are NaN.

    ``A`` may be batched (``A.batch_shape``): one factor per matrix. The result is a
    pytree (see :class:`BandedLU`), usable under ``jit`` and ``vmap``, closed over or
    carried by ``lax.scan``.

    Args:
      A: a square DiaMatrix (possibly batched). 16-bit matrices are factored in float32.
      method: which implementation factors ``A``: ``"auto"`` (the default: by
        platform and size, as above), ``"lapack"`` (LAPACK's factor: computed by LAPACK
        on CPU, by a ``lax.scan`` on GPU and TPU), ``"scan"`` (LAPACK's factor by a
        ``lax.scan`` everywhere: no host call, so ``jax.export`` can serialize the
        program) or ``"parallel"`` (block cyclic reduction, as on GPU and TPU). A static
        choice: a compiled program keeps the one it was traced with.

    Returns:
      A :class:`BandedLU`.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix.
      ValueError: if ``A`` is not square, or ``method`` is not one of those above.
      numpy.linalg.LinAlgError: outside ``jit``, if ``A`` is exactly singular (a pivot
        ``U[i, i]`` is 0, as LAPACK's ``info = i + 1`` reports). Under ``jit`` nothing is
        raised: :attr:`BandedLU.info` holds LAPACK's ``info`` and solves return NaN.

    Example:
      >>> import jax
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.5, -1.0], offsets=[-1, 0, 1], shape=(50, 50))
      >>> lu = jaxdia.lu_factor(A)
      >>> def step(u, _):
      ...     return lu.solve(u), None
      >>> u, _ = jax.lax.scan(step, jnp.ones(50), length=10)  # factored once
      >>> v = jnp.ones(50)
      >>> for _ in range(10):
      ...     v = jnp.linalg.solve(A.todense(), v)
      >>> bool(jnp.allclose(u, v, rtol=1e-5))
      True
    """
    lu = lu_unchecked(as_square_matrix(A, "lu_factor"), method)

    def what(i: int) -> str:
        if lu._factor.plan.layout.parallel:
            return (
                f"A is singular, or needs row interchanges across blocks, which the parallel "
                f"LU does not make: the diagonal block from row {i - 1} was singular when "
                f"cyclic reduction reached it (info = {i})"
            )
        return f"A is exactly singular: pivot U[{i - 1}, {i - 1}] is zero (LAPACK info = {i})"

    _raise_failures("lu_factor", lu, what)
    return lu


def lu_solve(lu: BandedLU, b: ArrayLike, trans: int | str = 0) -> Array:
    """Solves ``A @ x == b`` (or a transposed system) with a stored LU factor of ``A``.

    As ``jax.scipy.linalg.lu_solve``, for a :class:`BandedLU` from :func:`lu_factor`.
    Differentiable with respect to ``b`` and to the factored matrix's ``data`` (the
    factor's ``matrix`` leaf; the factor arrays themselves get no gradient): reverse mode
    solves the transposed system with the same stored factor.

    ``b`` follows :func:`jaxdia.solve_banded`'s conventions: ``(n,)`` is a vector, an
    N-D ``b`` a stack of ``(n, k)`` right-hand sides whose batch dims broadcast with the
    factor's.

    Args:
      lu: a :class:`BandedLU`.
      b: the right-hand side(s): shape ``(n,)``, or ``(..., n, k)``.
      trans: 0 or ``"N"`` solves ``A x = b``, 1 or ``"T"`` ``A^T x = b``, 2 or ``"H"``
        ``A^H x = b``.

    Returns:
      ``x``, of the broadcast batch shape and ``b``'s trailing shape, in the promoted
      dtype of ``A`` and ``b`` (16-bit floats are solved in float32 and cast back). NaN
      if the factorization failed (``lu.info != 0``).

    Raises:
      TypeError: if ``lu`` is not a BandedLU, or ``b`` is not numeric.
      ValueError: if ``trans`` is not 0, 1, 2, ``"N"``, ``"T"`` or ``"H"``, or ``b``'s
        shape does not fit.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([[1.0] * 4, [4.0] * 5, [2.0] * 3], offsets=[-1, 0, 2])
      >>> lu = jaxdia.lu_factor(A)
      >>> x = jaxdia.lu_solve(lu, jnp.arange(5.0), trans=1)
      >>> bool(jnp.allclose(A.T @ x, jnp.arange(5.0), atol=1e-5))
      True
    """
    if not isinstance(lu, BandedLU):
        raise TypeError(
            "lu_solve: lu must be a jaxdia.BandedLU (from jaxdia.lu_factor), got "
            f"{type(lu).__name__}"
        )
    codes = {0: 0, 1: 1, 2: 2, "N": 0, "T": 1, "H": 2}
    if isinstance(trans, bool) or not isinstance(trans, (int, str)) or trans not in codes:
        raise ValueError(f"lu_solve: trans must be 0, 1, 2, 'N', 'T' or 'H', got {trans!r}")
    return lu._solve(b, codes[trans], "lu_solve")


def cho_factor(A: DiaMatrix, lower: bool = False, *, method: str = "auto") -> BandedCholesky:
    """The Cholesky factorization of a Hermitian positive definite banded DiaMatrix.

    Reads one triangle of ``A``, the upper one (offsets ``>= 0``) unless ``lower``, as
    ``scipy.linalg.cho_factor`` does: the matrix factored (and solved) is the Hermitian
    matrix that triangle defines, with the real part of the diagonal. Half the work and
    storage of :func:`lu_factor` and no pivoting: ``?pbtrf`` for a band of ``kd``
    superdiagonals (O(n kd^2) to factor, O(n kd) per solve), ``?pttrf``'s ``L D L^H`` for
    a tridiagonal one. Where it runs is as for :func:`lu_factor`. Corner diagonals of
    periodic boundaries are factored as part of the band (the whole matrix): factor a
    periodic matrix with :func:`lu_factor`, which splits them off.

    Args:
      A: a square DiaMatrix (possibly batched).
      lower: read the lower triangle instead of the upper one (a Python bool).
      method: which implementation factors ``A``, as for :func:`lu_factor`.

    Returns:
      A :class:`BandedCholesky`.

    Raises:
      TypeError: if ``A`` is not a DiaMatrix or ``lower`` not a bool.
      ValueError: if ``A`` is not square, or ``method`` is not one of
        :func:`lu_factor`'s.
      numpy.linalg.LinAlgError: outside ``jit``, if the matrix is not positive definite
        (its leading minor of order ``info`` is not positive, as LAPACK reports). Under
        ``jit`` nothing is raised: :attr:`BandedCholesky.info` holds ``info`` and solves
        return NaN.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(5, 5))
      >>> c = jaxdia.cho_factor(A)
      >>> x = jaxdia.cho_solve(c, jnp.ones(5))
      >>> [round(float(value), 4) for value in x]
      [2.5, 4.0, 4.5, 4.0, 2.5]
    """
    A = as_square_matrix(A, "cho_factor")
    if not isinstance(lower, (bool, np.bool_)):
        raise TypeError(f"cho_factor: lower must be a bool, got {type(lower).__name__}")
    c = cholesky_unchecked(A, bool(lower), method)

    def what(i: int) -> str:
        if c._factor.plan.layout.parallel:
            return (
                "A is not Hermitian positive definite: cyclic reduction met a diagonal "
                f"block from row {i - 1} that is not positive definite (info = {i})"
            )
        return (
            f"A is not Hermitian positive definite: its leading minor of order {i} is "
            f"not positive (LAPACK info = {i})"
        )

    _raise_failures("cho_factor", c, what)
    return c


def cho_solve(c: BandedCholesky, b: ArrayLike) -> Array:
    """Solves ``A @ x == b`` with a stored Cholesky factor of ``A``.

    As ``scipy.linalg.cho_solve``, for a :class:`BandedCholesky` from :func:`cho_factor`.
    ``b``, the result, batches and differentiation are as for :func:`lu_solve` (the
    derivative with respect to ``A.data`` is that of the Hermitian matrix the factored
    triangle defines).

    Args:
      c: a :class:`BandedCholesky`.
      b: the right-hand side(s): shape ``(n,)``, or ``(..., n, k)``.

    Returns:
      ``x``; NaN if the factorization failed (``c.info != 0``).

    Raises:
      TypeError: if ``c`` is not a BandedCholesky, or ``b`` is not numeric.
      ValueError: if ``b``'s shape does not fit.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> A = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(3, 3))
      >>> x = jaxdia.cho_solve(jaxdia.cho_factor(A, lower=True), jnp.ones(3))
      >>> [round(float(value), 4) for value in x]
      [1.5, 2.0, 1.5]
    """
    if not isinstance(c, BandedCholesky):
        raise TypeError(
            "cho_solve: c must be a jaxdia.BandedCholesky (from jaxdia.cho_factor), got "
            f"{type(c).__name__}"
        )
    return c._solve(b, 0, "cho_solve")
