"""LAPACK's banded factorizations on CPU, called from XLA programs through XLA's FFI.

The routines (``?gbtrf/?gbtrs``: banded LU with partial pivoting; ``?pbtrf/?pbtrs``:
banded Cholesky; ``?gttrf/?gttrs``, ``?pttrf/?pttrs``: their tridiagonal forms) are
SciPy's, reached through the function pointers that ``scipy.linalg.cython_lapack`` and
``cython_blas`` export (jaxlib's own CPU linear algebra finds LAPACK the same way). Each
operation is an XLA FFI custom call whose handler is compiled C (``csrc/lapack_ffi/``,
the extension :mod:`jaxdia._kernels._lapack_ffi`): XLA hands it pointers to its own
buffers on its own threads, and the handler calls LAPACK on them in place, without Python
or the GIL. An unsupported dtype or attribute comes back as
an XLA error (``XlaRuntimeError``); LAPACK's ``info`` is a result.

Why not ``jax.pure_callback``: a Python callback receives *copies* of its operands
(``pure_callback`` even ``device_put``s them once more), so every solve would copy the
whole factor, many times the work of the solve itself for a wide band
(``benchmarks/notes/solves.md``). Through the FFI the factor is read where it lies, and the
right-hand side is solved in place in the output buffer (aliased to the operand).

The extension is built with the package (``pip install``; a C compiler is needed to build
from the sdist). A source tree used without building it (a checkout on ``PYTHONPATH``)
raises ``ImportError`` at the first LAPACK call, naming the command that builds it;
nothing else in jaxdia needs it.

Layouts (the leading dimensions of every operand are a batch, the same for all operands,
or absent (size 1) for the factor of a solve: one factor for a batch of right-hand sides):

* a band ``(..., n, ldab)``: each system's LAPACK band array in column-major order
  (``ab[j, r]`` is LAPACK's ``AB(r + 1, j + 1)``), so a C-contiguous JAX array is what
  LAPACK reads, with no transpose;
* right-hand sides ``(..., k, n)``: the ``k`` columns of ``B`` one after the other
  (column-major ``B``), so ``k`` systems of a batch that share a factor are one call with
  ``k * batch`` columns;
* pivots ``(..., n)`` int32, 0-based like SciPy's (LAPACK's are 1-based);
* ``info`` ``(...,)`` int32: LAPACK's ``info`` (0, or the 1-based index of the first zero
  pivot / non-positive leading minor).

``pbsinv`` is not LAPACK's: the band of the inverse from ``pbtrf``'s factor (Takahashi's
recurrences, written out in the C source), for the gradient of a log-determinant and the
selected inverse on CPU. ``gram_schmidt`` is BLAS's: ``gmres``'s orthogonalization of
an Arnoldi vector against its basis (two ``?gemv`` a pass) in one call on CPU.

``gbtrf``/``pbtrf`` fill LAPACK's band array from DIA data themselves, writing each
system's ``n * ldab`` elements once (assembled by XLA from ``ldab`` column pieces, one pass
each, it took longer than LAPACK then takes to factor it); ``gbtrs`` solves a factor
computed without row interchanges, of at least 256 rows, by two ``?tbsv`` over the bands
``L`` and ``U`` really have rather than ``?gbtrs``'s ``kl + ku`` (see the C source);
``gbsv`` (the one-shot solve) fills, factors and solves a few systems at a time in a scratch
that stays in cache, so that no factor of the whole batch is written to memory and read
back. A band of at most 4 subdiagonals is factored and solved without LAPACK, by
``?gbtf2``'s (the unblocked ``?gbtrf``, which LAPACK uses for such a band) and ``?gbtrs``'s
algorithms written out in the C source: the same band layout, pivots and ``info``, the
factors and solutions to rounding, without the BLAS calls on vectors of a few elements made
per column that take most of LAPACK's time there; so is a Cholesky factor of at most 4
off-diagonals (``?pbtf2``'s algorithm, which ``?pbtrf`` uses for such a band).
"""

from __future__ import annotations

import functools
import importlib

import jax
import numpy as np

_BUILD_HINT = (
    "jaxdia's compiled LAPACK handlers (jaxdia._kernels._lapack_ffi) are missing: jaxdia "
    "is used from a source tree whose C extension was not built. `pip install -e .` (or "
    "`make venv`) in the checkout builds it in place; it needs a C compiler."
)


@functools.cache
def _register() -> None:
    """Registers the compiled handlers with XLA, once.

    The extension receives SciPy's LAPACK/BLAS capsules and answers one capsule per
    handler; XLA keeps calling the handlers after this returns, and the extension keeps
    the routine pointers for the life of the process."""
    try:
        from . import _lapack_ffi
    except ImportError as error:
        raise ImportError(_BUILD_HINT) from error
    capsules = {
        **importlib.import_module("scipy.linalg.cython_blas").__pyx_capi__,
        **importlib.import_module("scipy.linalg.cython_lapack").__pyx_capi__,
    }
    for name, capsule in _lapack_ffi.targets(capsules).items():
        jax.ffi.register_ffi_target(f"jaxdia_lapack_{name}", capsule, platform="cpu")


def _target(name: str) -> str:
    """The FFI target of routine ``name``, registered with XLA on first use."""
    _register()
    return f"jaxdia_lapack_{name}"


def _call(name: str, results, *operands, aliases: dict[int, int], vmap_method=None, **attributes):
    call = jax.ffi.ffi_call(
        _target(name), results, input_output_aliases=aliases, vmap_method=vmap_method
    )
    return call(*operands, **{key: np.int64(value) for key, value in attributes.items()})


def _int_results(batch: tuple[int, ...], n: int) -> list[jax.ShapeDtypeStruct]:
    return [
        jax.ShapeDtypeStruct((*batch, n), np.int32),
        jax.ShapeDtypeStruct(batch, np.int32),
    ]


def _layout(placement) -> np.ndarray:
    return np.asarray(placement, np.int64).reshape(-1, 2)


def gbtrf(data, *, placement, kl: int, ku: int):
    """``(lu, pivots, info)``: the LU factors of the matrices of DIA ``data``
    ``(..., n_diags, n)``, whose diagonal ``k`` of offset ``placement[k][0]`` is column
    ``placement[k][1]`` of LAPACK's bands (``2 kl + ku + 1`` columns)."""
    *batch, _, n = data.shape
    lu = jax.ShapeDtypeStruct((*batch, n, 2 * kl + ku + 1), data.dtype)
    results = [lu, *_int_results(tuple(batch), n)]
    return _call("gbtrf", results, data, _layout(placement), aliases={}, kl=kl, ku=ku)


def gbtrs(lu, pivots, b, *, kl: int, ku: int, trans: int):
    """``x`` ``(..., k, n)`` solving ``op(A) x = b`` with ``gbtrf``'s factor."""
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("gbtrs", [result], lu, pivots, b, aliases={2: 0}, kl=kl, ku=ku, trans=trans)[0]


def gbsv(data, b, *, placement, kl: int, ku: int, trans: int):
    """``(x, info)``: :func:`gbtrf` and :func:`gbtrs` in one call, each matrix's factor
    kept in a scratch the size of a few bands (never returned); ``data`` is one matrix
    for every batch of ``b`` or one per batch. ``x`` is meaningless where ``info`` is not
    0."""
    batch = b.shape[:-2]
    results = [jax.ShapeDtypeStruct(b.shape, b.dtype), jax.ShapeDtypeStruct(batch, np.int32)]
    return _call(
        "gbsv", results, data, _layout(placement), b, aliases={2: 0}, kl=kl, ku=ku, trans=trans
    )


def pbtrf(data, *, placement, kd: int, lower: bool):
    """``(c, info)``: the Cholesky factors of the matrices of DIA ``data`` placed in
    LAPACK's bands (``kd + 1`` columns) as for :func:`gbtrf`."""
    *batch, _, n = data.shape
    c = jax.ShapeDtypeStruct((*batch, n, kd + 1), data.dtype)
    results = [c, jax.ShapeDtypeStruct(tuple(batch), np.int32)]
    return _call("pbtrf", results, data, _layout(placement), aliases={}, kd=kd, lower=int(lower))


def pbtrs(c, b, *, kd: int, lower: bool):
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("pbtrs", [result], c, b, aliases={1: 0}, kd=kd, lower=int(lower))[0]


def pbsinv(c, *, kd: int, lower: bool):
    """``z``: ``A^-1`` on the band of ``A = U^H U`` (or ``L L^H``), from ``pbtrf``'s factor
    ``c`` ``(..., n, kd + 1)``, in ``c``'s band storage (its triangle), by Takahashi's
    recurrences written out in the C source (one pass over the rows, O(n kd^2)); slots
    outside the matrix are zero. Under ``vmap`` the batch becomes leading systems."""
    result = jax.ShapeDtypeStruct(c.shape, c.dtype)
    return _call(
        "pbsinv", [result], c, aliases={}, vmap_method="broadcast_all", kd=kd, lower=int(lower)
    )[0]


def gttrf(bands):
    """``(lu, pivots, info)`` of a tridiagonal matrix given as rows ``dl, d, du, 0`` of
    ``bands`` ``(..., 4, n)`` (``dl[i] = A[i + 1, i]``, ``du[i] = A[i, i + 1]``)."""
    batch, n = bands.shape[:-2], bands.shape[-1]
    results = [jax.ShapeDtypeStruct(bands.shape, bands.dtype), *_int_results(batch, n)]
    return _call("gttrf", results, bands, aliases={0: 0})


def gttrs(lu, pivots, b, *, trans: int):
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("gttrs", [result], lu, pivots, b, aliases={2: 0}, trans=trans)[0]


def pttrf(d, e):
    """``(d, e, info)``: ``A = L D L^H`` of a Hermitian positive definite tridiagonal
    matrix with real diagonal ``d`` and subdiagonal ``e`` (``e[i] = A[i + 1, i]``)."""
    batch = d.shape[:-1]
    results = [
        jax.ShapeDtypeStruct(d.shape, d.dtype),
        jax.ShapeDtypeStruct(e.shape, e.dtype),
        jax.ShapeDtypeStruct(batch, np.int32),
    ]
    return _call("pttrf", results, d, e, aliases={0: 0, 1: 1})


def pttrs(d, e, b):
    result = jax.ShapeDtypeStruct(b.shape, b.dtype)
    return _call("pttrs", [result], d, e, b, aliases={2: 0})[0]


def gram_schmidt(V, w, j, floor):
    """``(w, h, norm)``: ``w`` ``(..., n)`` orthogonalized against rows ``0..j`` of the
    basis ``V`` ``(..., rows, n)`` by classical Gram-Schmidt, two ``?gemv`` a pass
    (``h = V^H w``, ``w -= V h``), with a second pass for a system whose first left ``w``'s
    norm below its ``floor``; ``h`` ``(..., rows)`` sums the passes' coefficients (zero
    beyond ``j``), ``norm`` is the new norm of ``w``. ``j`` (int32) and ``floor`` (real)
    have ``w``'s batch shape. Under ``vmap`` the batch becomes leading systems."""
    batch = w.shape[:-1]
    results = [
        jax.ShapeDtypeStruct(w.shape, w.dtype),
        jax.ShapeDtypeStruct(V.shape[:-1], w.dtype),
        jax.ShapeDtypeStruct(batch, floor.dtype),
    ]
    return _call(
        "gram_schmidt", results, V, w, j, floor, aliases={1: 0}, vmap_method="broadcast_all"
    )
