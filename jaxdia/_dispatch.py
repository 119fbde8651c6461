"""Which implementation runs here: the rules that pick a path by platform, method, size
or batch, and their thresholds.

The callers (the products' lowering rules, the banded primitives, the choice of a banded
factor in :mod:`jaxdia._linalg.plan`, multigrid, gmres) ask these functions and decide
nothing themselves. ``docs/design.md`` ("Dispatch") is the table the rules encode, and
``tests/test_dispatch.py`` pins its rows. The rules are pure: those of the banded factors
take the platform as an argument (the plan reads :func:`default_platform` once, at the
door); the others read it themselves, so a test may monkeypatch :func:`default_platform`.

>>> from jaxdia import _dispatch
>>> _dispatch.oneshot_implementation("cpu", "auto", 1000, (1, 1), 1, 3000)
'gtsv'
>>> _dispatch.oneshot_implementation("tpu", "auto", 1000, (2, 2), 1, 7000)
'parallel'
>>> _dispatch.host_is_faster(1000, 1, 7000), _dispatch.host_is_faster(8, 1, 56)
(True, False)
"""

from __future__ import annotations

import jax
import numpy as np

# -- the platform --------------------------------------------------------------------------

#: The platforms of accelerators (GPUs and TPUs): parallel factorizations, dense coarse
#: inverses, smaller coarsest levels.
ACCELERATOR_PLATFORMS = ("gpu", "tpu", "cuda", "rocm")


def default_platform() -> str:
    """The platform computations run on by default: that of ``jax_default_device`` if it
    is set, else JAX's default backend (``"cpu"``, ``"gpu"``, ``"tpu"``)."""
    device = getattr(jax.config, "jax_default_device", None)
    if device is not None and not isinstance(device, str):
        return device.platform
    return str(device) if device is not None else jax.default_backend()


def is_accelerator(platform: str) -> bool:
    """Whether ``platform`` is a GPU's or a TPU's."""
    return platform in ACCELERATOR_PLATFORMS


def on_accelerator() -> bool:
    """Whether computations run on a GPU or TPU by default."""
    return is_accelerator(default_platform())


# -- products: the Pallas kernel families ----------------------------------------------------

#: The Pallas kernel families that may compute a product, per lowering platform, in order
#: of preference (``jaxdia._kernels.primitives.choose_implementation`` takes the first that
#: can, else XLA): ``"mosaic"`` (Mosaic GPU), ``"triton"`` (Pallas Triton), ``"tpu"``
#: (Pallas TPU).
PALLAS_FAMILIES = {
    "cuda": ("mosaic", "triton"),
    "rocm": ("triton",),
    "tpu": ("tpu",),
}
#: From this JAX on (where Triton is deprecated) Mosaic GPU is cuda's default family; before
#: it Triton stays the default (and Mosaic GPU can be forced).
MOSAIC_GPU_DEFAULT_FROM_JAX = (0, 11)

# -- banded factorizations and solves ---------------------------------------------------------

#: A host call has a fixed cost per call and per system, on top of LAPACK's time; a scan
#: step costs XLA's loop overhead once for all the systems side by side in it, plus their
#: arithmetic. Up to ``SCAN_ROWS`` rows, and for batches of at least ``SCAN_BATCH``
#: systems of up to ``SCAN_BATCH_ROWS`` rows, the scan was faster
#: (benchmarks/notes/batched_solves.md).
SCAN_ROWS = 16
SCAN_BATCH = 64
SCAN_BATCH_ROWS = 128
#: LAPACK indexes with 32-bit ints: larger systems go to the scan or cyclic reduction.
LAPACK_INDEX_LIMIT = 2**31 - 1


#: The implementations of the banded factorizations a caller may force (``method=`` of
#: ``jaxdia.lu_factor`` and the other banded functions): ``"auto"`` (by platform and
#: size), ``"lapack"`` (LAPACK's layouts: LAPACK on CPU, the ``lax.scan`` kernels on
#: GPU/TPU), ``"scan"`` (LAPACK's layouts, by the ``lax.scan`` kernels everywhere),
#: ``"parallel"`` (block cyclic reduction everywhere).
METHODS = ("auto", "lapack", "scan", "parallel")


def factors_by_cyclic_reduction(platform: str, method: str) -> bool:
    """Whether a stored factorization for ``platform`` is computed by block cyclic
    reduction: ``method="auto"`` on GPUs and TPUs, or ``method="parallel"``."""
    if method == "auto":
        return is_accelerator(platform)
    return method == "parallel"


def block_form(platform: str) -> str:
    """How block cyclic reduction on ``platform`` writes its blocks' products and inverses
    (``jaxdia._kernels.band_parallel.FORMS``, its ``form``): on TPU ``"lanes"`` (blocks
    of up to 16 rows kept in the lanes, whose tiles a block in front would waste), on CPU
    and GPUs ``"dot"`` (``dot_general`` and ``jnp.linalg`` with the blocks in front, for
    all but the smallest blocks: smaller programs, faster on XLA:CPU, and no tiles). See
    ``benchmarks/notes/compile.md``."""
    return "lanes" if platform == "tpu" else "dot"


def interleave_by_scatter(platform: str) -> bool:
    """Whether two sequences are interleaved along an axis (multigrid's interpolation;
    cyclic reduction's back-substitution, whose ``"lanes"`` form does) by two stride-2
    scatters into zeros rather than two interior pads: where :func:`block_form` keeps the
    blocks in the lanes, on TPU, whose generated code for an interior pad along the lanes
    grows with the axis (three of length 2^20: 148 MB of code, 41 s of compilation;
    scatters about 1 MB, under a second). See ``jaxdia._kernels.shared.interleave``."""
    return block_form(platform) == "lanes"


def selected_inverse_from_host_factor(platform: str) -> bool:
    """Whether the band of the inverse of a Hermitian positive definite matrix with a
    LAPACK Cholesky factor (``PB``, ``PT``) is read from that factor by Takahashi's
    recurrences on the host (one compiled pass over the rows), rather than by block cyclic
    reduction run backwards (O(log n) steps): on CPU (where such factors are made with
    ``method="auto"``); a forced LAPACK layout on a GPU or TPU keeps cyclic reduction."""
    return not is_accelerator(platform)


def selected_inverse_pivots_by_scan(platform: str) -> bool:
    """Whether the selected inverse of a general matrix that block cyclic reduction cannot
    give accurately (the residual check refuses it: a matrix that needs row interchanges
    across blocks) is computed again, exactly, by reverse mode through the ``lax.scan`` LU
    with partial pivoting (``n`` sequential steps each way, only when some system is
    refused): on CPU. On GPU and TPU, where a loop of ``n`` steps is what cyclic reduction
    avoids, such a result stays NaN."""
    return not is_accelerator(platform)


def host_is_faster(n: int, systems: int, size: int) -> bool:
    """Whether CPU factorizations and solves of ``systems`` systems of ``n`` rows (``size``
    elements in the largest array of one system) call LAPACK rather than run the scan."""
    if size > LAPACK_INDEX_LIMIT:
        return False
    if n <= SCAN_ROWS:
        return False
    return not (systems >= SCAN_BATCH and n <= SCAN_BATCH_ROWS)


def calls_lapack(method: str, n: int, systems: int, size: int) -> bool:
    """Whether the CPU lowering of a factor or solve in LAPACK's layouts calls LAPACK (else
    it runs the ``lax.scan`` kernels): by :func:`host_is_faster` for ``method="auto"``,
    always for ``"lapack"``, never for ``"scan"``."""
    if method == "auto":
        return host_is_faster(n, systems, size)
    return method == "lapack"


def oneshot_implementation(
    platform: str, method: str, n: int, widths: tuple[int, ...], systems: int, band_size: int
) -> str:
    """Which implementation runs a one-shot solve (``solve_banded``) of ``systems``
    matrices of ``n`` rows with band ``widths`` ``(kl, ku)`` whose LAPACK band array holds
    ``band_size`` elements per system, lowered for ``platform`` (``"cpu"``, ``"gpu"`` or
    ``"tpu"``):

    * ``"gtsv"``: ``lax.linalg.tridiagonal_solve``, every system of a batch in one library
      call (LAPACK's ``?gtsv`` on CPU, cuSPARSE's ``gtsv2`` on GPUs; both pivot): a
      tridiagonal matrix on CPU, whatever the size and batch, and on GPUs;
    * ``"lapack"``: ``?gbtrf`` + ``?gbtrs`` through :mod:`jaxdia._kernels.lapack`, one call
      (``gbsv``, each system factored and solved in a scratch in cache) that loops over the
      systems: the other bands on CPU, whatever the size and batch;
    * ``"scan"``: the ``lax.scan`` LU, the systems side by side: not chosen (the sweep of
      ``benchmarks/bench_parallel_banded.py`` forces it; ``gbsv`` measured faster at every
      batch of 1-1000 systems of 4-128 rows, where stored factors still take the scan,
      :func:`host_is_faster`);
    * ``"parallel"``: block cyclic reduction: the other bands on GPUs, everything on TPU
      (whose ``tridiagonal_solve`` is a loop over the rows), systems too large for
      LAPACK's 32-bit indices, and ``method == "parallel"`` (tests force it).

    Cyclic reduction is not chosen on CPU: where it was the fastest (systems of a few
    dozen rows, alone or in small batches) it saved little per solve next to its much
    longer compilation, and each of its programs keeps hundreds of memory mappings
    alive, which a process that compiles many shapes runs out of."""
    if method == "parallel" or platform not in ("cpu", "gpu"):
        return "parallel"
    tridiagonal = max(widths, default=0) <= 1
    if platform == "gpu":
        return "gtsv" if tridiagonal else "parallel"
    if band_size > LAPACK_INDEX_LIMIT:
        return "parallel"
    return "gtsv" if tridiagonal else "lapack"


# -- Krylov solvers ----------------------------------------------------------------------------

#: The dtypes BLAS's ``?gemv`` takes.
BLAS_DTYPES = ("float32", "float64", "complex64", "complex128")


def gram_schmidt_by_blas(dtype) -> bool:
    """Whether ``gmres`` (each Arnoldi vector) and ``eigsh`` (each Lanczos vector)
    orthogonalize in one host call of two BLAS ``?gemv`` a pass
    (:func:`jaxdia._kernels.lapack.gram_schmidt`): on CPU, for BLAS's dtypes, where XLA's
    block Gram-Schmidt (a copy of each block of the basis, small loop fusions split over
    threads) took twice its time (benchmarks/notes/krylov.md), and where ``eigsh``'s loop
    of passes compiled a dozen fused loops (benchmarks/notes/compile.md). GPUs and TPUs
    keep XLA's, which runs on the device."""
    return default_platform() == "cpu" and np.dtype(dtype).name in BLAS_DTYPES


# -- multigrid ---------------------------------------------------------------------------------

#: A level of at most this many unknowns with more than :data:`LOOPED_DIAGONALS`
#: diagonals (the 27-point stencils of 3-D coarse levels) multiplies as one loop over
#: its diagonals on CPU: a cycle's compile time then grows by one small loop per such
#: product instead of an unrolled product of 27 terms, at the same run time
#: (benchmarks/notes/compile.md).
LOOPED_UP_TO = 2**15
LOOPED_DIAGONALS = 9
#: ``max_coarse=None`` on GPU and TPU: the coarsest level's dense inverse stays small.
ACCELERATOR_COARSE = 500
#: A concrete matrix of at most this many stored values (batch included) has its
#: hierarchy built on the host on GPU and TPU; on CPU any concrete matrix does.
HOST_SETUP_UP_TO = 2**24


def loops_level_product(rows: int, diagonals: int) -> bool:
    """Whether a multigrid level's product runs as one loop over its diagonals (on CPU,
    small levels with many diagonals) rather than as the ``dia_spmm`` primitive."""
    small = rows <= LOOPED_UP_TO and diagonals > LOOPED_DIAGONALS
    return small and default_platform() == "cpu"


def coarse_solve_by_inverse(platform: str) -> bool:
    """Whether multigrid's coarsest level is solved by its dense inverse (GPU and TPU:
    one product per cycle, where a banded solve is a sequence of small kernels) rather
    than by its banded LU (CPU: LAPACK's)."""
    return is_accelerator(platform)


def default_max_coarse() -> int | None:
    """``max_coarse=None``: unlimited on CPU (coarsening stops where the coarsest level
    is cheap to factorize), :data:`ACCELERATOR_COARSE` on GPU and TPU."""
    return ACCELERATOR_COARSE if on_accelerator() else None


def host_setup_pays(values: int) -> bool:
    """Whether ``multigrid`` builds a concrete matrix's hierarchy with NumPy on the host:
    on CPU, or up to :data:`HOST_SETUP_UP_TO` stored values (larger grids set up faster
    on an accelerator)."""
    return default_platform() == "cpu" or values <= HOST_SETUP_UP_TO
