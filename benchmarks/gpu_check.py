"""The first run on an accelerator (an NVIDIA GPU or a TPU): check its Pallas kernels, then
time them and the solvers, and print one table for ``benchmarks/README.md``.

Usage (a machine with a CUDA or TPU build of jax 0.10-0.12 and jaxdia importable, e.g.
``pip install --no-deps -e .`` or ``PYTHONPATH=$PWD:$PYTHONPATH``; no internet needed)::

    python benchmarks/gpu_check.py              # everything: sized for 10 minutes on an H200
    python benchmarks/gpu_check.py --max-n 1e7  # smaller products only
    python benchmarks/gpu_check.py --dry-run    # any machine: every section at tiny sizes
                                                # (one dtype each), the kernels in Pallas's
                                                # interpreters

Sections (each guarded: a failure is a ``FAILED`` row in the table, and the next section
runs; the exit status is 1 if any check failed):

1. ``check``: every kernel of ``jaxdia._kernels.pallas_mosaic_gpu`` and
   ``jaxdia._kernels.pallas_triton`` on a GPU, ``jaxdia._kernels.pallas_tpu`` on a TPU
   (the dry run: all three) (``A @ X``, ``A^T @ X``, SDDMM) against SciPy on a
   few shapes (square, rectangular, extreme offsets, a broadcast batch, several columns)
   and every dtype each takes, with NaN in every padding slot of ``data``; then ``A @ X``
   and its gradients with respect to ``X`` and ``data`` through ``jaxdia.matmul`` with
   ``implementation="mosaic"`` and ``"triton"`` (GPU) or ``"pallas"`` (TPU) against ``"xla"``.
2. ``A @ X``: 5- and 27-point stencils, 1 and 8 columns, float32 and float64 (TPU: float32
   and bfloat16), ``n`` = 1e6, 1e7, 1e8 where memory allows: the default implementation,
   the forced Pallas families and XLA,
   against a device-to-device copy of the same bytes (the bandwidth bound) and
   ``jax.experimental.sparse.BCSR``. GB/s counts the useful traffic
   ``(n_diags * n + 2 * n * c) * itemsize``.
3. ``banded``: ``jaxdia.solve_banded``, ``lu_factor(A).solve`` and ``cho_factor(A).solve``
   on symmetric positive definite tri-, penta- and 21-diagonal (bandwidth 10) systems,
   n = 1e5 and 1e6; the residual ``|A x - b| / |b|`` is the check.
4. ``multigrid-CG``: ``jaxdia.cg(A, b, M=jaxdia.multigrid(A, grid))`` on the 2-D Poisson
   matrix of a 1000 x 1000 grid (float32 and float64): time, iterations, residual.

Timings are medians of ``--repeats`` calls after a warm-up (fewer when a call is slow), in
milliseconds; ratios are against measurements of the same run. The run stops starting new
cases after ``--budget`` minutes (those are ``skipped`` rows). A TPU has no float64
arithmetic of its own, so its solves and multigrid run in float32. Without a GPU or TPU
(and without ``--dry-run``) it says so and exits with status 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
import traceback
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia._kernels import pallas_mosaic_gpu, pallas_tpu, pallas_triton  # noqa: E402

# The Triton backend is measured on purpose; its deprecation warning is known.
warnings.filterwarnings("ignore", message="The Pallas Triton backend is deprecated")

TOLERANCE = {
    np.dtype(np.float32): 1e-5,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
    np.dtype(jnp.bfloat16): 5e-2,
    np.dtype(np.float16): 2e-2,
}
#: Each Pallas family by the ``implementation=`` name that forces it ("pallas" on a TPU,
#: whose one family is Mosaic TPU), per platform.
BACKENDS = {"mosaic": pallas_mosaic_gpu, "triton": pallas_triton, "pallas": pallas_tpu}
PLATFORM_BACKENDS = {"gpu": ("mosaic", "triton"), "tpu": ("pallas",)}
KERNEL_DTYPES = {
    "mosaic": [np.float32, np.float64, jnp.bfloat16, np.float16],
    "triton": [np.float32, np.float64, jnp.bfloat16, np.float16, np.complex64, np.complex128],
    "pallas": [np.float32, jnp.bfloat16],
}


class Report:
    """The table's rows, the overall verdict and the time budget."""

    def __init__(self, budget_s: float):
        self.rows: list[tuple[str, ...]] = []
        self.ok = True
        self.start = time.perf_counter()
        self.budget_s = budget_s

    def add(self, *row) -> None:
        row = tuple(str(cell) for cell in row)
        self.rows.append(row)
        print("  " + " | ".join(row), flush=True)

    def over_budget(self) -> bool:
        return time.perf_counter() - self.start > self.budget_s

    def guarded(self, section: str, case: str, fn) -> None:
        """Runs ``fn()``; a failure becomes a FAILED row and the run goes on."""
        if self.over_budget():
            self.add(section, case, "skipped: time budget", "", "", "", "")
            return
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - every failure is a row, not an exit
            self.ok = False
            message = f"{type(error).__name__}: {error}".replace("|", "/").splitlines()[0]
            self.add(section, case, f"FAILED: {message[:200]}", "", "", "", "")
            traceback.print_exc()

    def table(self) -> str:
        header = ("section", "case", "implementation", "ms", "GB/s", "ratio", "check")
        lines = ["| " + " | ".join(header) + " |", "|---" * len(header) + "|"]
        for row in self.rows:
            row = row + ("",) * (len(header) - len(row))
            lines.append("| " + " | ".join(row) + " |")
        return "\n".join(lines)


def accelerator():
    """The first GPU, else the first TPU, else None."""
    for platform in PLATFORM_BACKENDS:
        try:
            devices = jax.devices(platform)
        except RuntimeError:
            continue
        if devices:
            return devices[0]
    return None


def median_time(fn, *args, repeats: int) -> float:
    """Median seconds of ``fn(*args)`` after a warm-up; fewer repeats for slow calls."""
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))  # compile and warm up
    first = time.perf_counter() - start
    repeats = max(1, min(repeats, int(2.0 / max(first, 1e-9))))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# -- 1. correctness ----------------------------------------------------------------------


def _random(rng, shape, dtype):
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values.astype(dtype)


def _wide(array):
    array = np.asarray(array)
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


def _with_nan_padding(data, offsets, shape):
    m, n = shape
    j = np.arange(n)
    for k, o in enumerate(offsets):
        data[..., k, (j - o < 0) | (j - o >= m)] = np.nan
    return data


def _error_ratio(actual, expected, scale, dtype) -> float:
    """Largest error over its tolerance (inf for a wrong shape or a NaN)."""
    actual = _wide(actual)
    if actual.shape != expected.shape:
        return math.inf
    error = np.abs(actual - expected)
    bound = TOLERANCE[np.dtype(dtype)] * (scale + 1.0)
    ratio = error / bound
    return float(np.max(np.nan_to_num(ratio, nan=math.inf))) if ratio.size else 0.0


def _cases(dry_run):
    """(shape, offsets, batch of data, batch of x, columns)."""
    if dry_run:
        return [((150, 301), (-149, -2, 0, 3, 300), (2,), (1,), 3)]
    return [
        ((1000, 1000), (-1, 0, 1), (), (), 1),
        ((4096, 4096), (-64, -1, 0, 1, 64), (), (), 8),
        ((777, 1234), (-776, -300, -1, 0, 5, 1000, 1233), (), (), 3),
        ((1234, 777), (-1233, -2, 0, 2, 776), (3,), (1,), 5),
    ]


def _spmm_oracle(data, x, offsets, shape, transpose):
    batch = np.broadcast_shapes(data.shape[:-2], x.shape[:-2])
    out_rows = shape[1] if transpose else shape[0]
    expected = np.zeros((*batch, out_rows, x.shape[-1]), _wide(data).dtype)
    scale = np.zeros(expected.shape)
    for b in np.ndindex(*batch):
        entries = np.nan_to_num(_wide(np.broadcast_to(data, (*batch, *data.shape[-2:]))[b]))
        A = sp.dia_array((entries, offsets), shape=shape).tocsr()
        A = A.T if transpose else A
        xb = _wide(np.broadcast_to(x, (*batch, *x.shape[-2:]))[b])
        expected[b], scale[b] = A @ xb, abs(A) @ abs(xb)
    return expected, scale


def _sddmm_oracle(g, x, offsets, shape):
    m, n = shape
    batch = np.broadcast_shapes(g.shape[:-2], x.shape[:-2])
    gw = np.broadcast_to(_wide(g), (*batch, *g.shape[-2:]))
    xw = np.broadcast_to(_wide(x), (*batch, *x.shape[-2:]))
    expected = np.zeros((*batch, len(offsets), n), gw.dtype)
    scale = np.zeros(expected.shape)
    for k, o in enumerate(offsets):
        j = np.arange(max(0, o), min(n, m + o))
        expected[..., k, j] = (gw[..., j - o, :] * xw[..., j, :]).sum(-1)
        scale[..., k, j] = (abs(gw[..., j - o, :]) * abs(xw[..., j, :])).sum(-1)
    return expected, scale


def check_kernels(report: Report, backend: str, dry_run: bool) -> None:
    """Every kernel of one backend against SciPy, one row per case and dtype."""
    module = BACKENDS[backend]
    rng = np.random.default_rng(0)
    dtypes = KERNEL_DTYPES[backend][:1] if dry_run else KERNEL_DTYPES[backend]
    for shape, offsets, data_batch, x_batch, n_cols in _cases(dry_run):
        m, n = shape
        for dtype in map(np.dtype, dtypes):
            label = f"{shape} diags={len(offsets)} c={n_cols} batch={data_batch} {dtype.name}"

            def run(dtype=dtype):
                data = _with_nan_padding(
                    _random(rng, (*data_batch, len(offsets), n), dtype), offsets, shape
                )
                worst = {}
                for transpose in (False, True):
                    x = _random(rng, (*x_batch, m if transpose else n, n_cols), dtype)
                    fn = jax.jit(
                        lambda d, x, t=transpose: module.spmm(
                            d, x, offsets=offsets, shape=shape, transpose=t, interpret=dry_run
                        )
                    )
                    expected, scale = _spmm_oracle(data, x, offsets, shape, transpose)
                    key = "A^T@X" if transpose else "A@X"
                    worst[key] = _error_ratio(fn(data, x), expected, scale, dtype)
                g = _random(rng, (*data_batch, m, n_cols), dtype)
                x = _random(rng, (*x_batch, n, n_cols), dtype)
                fn = jax.jit(
                    lambda g, x: module.sddmm(g, x, offsets=offsets, shape=shape, interpret=dry_run)
                )
                expected, scale = _sddmm_oracle(g, x, offsets, shape)
                worst["SDDMM"] = _error_ratio(fn(g, x), expected, scale, dtype)
                verdict = all(w <= 1 for w in worst.values())
                report.ok &= verdict
                details = ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
                report.add(
                    "check",
                    label,
                    backend,
                    "",
                    "",
                    "",
                    f"{'ok' if verdict else 'FAIL'} (error/tolerance {details})",
                )

            report.guarded("check", f"{backend} {label}", run)


def check_dispatch(report: Report, backend: str) -> None:
    """``A @ X`` and its gradients through jaxdia: ``backend`` against XLA."""
    rng = np.random.default_rng(1)
    shape, offsets = (3000, 2000), (-2999, -7, 0, 1, 1999)
    dtypes = [d for d in (np.float32, np.float64, np.complex64) if d in KERNEL_DTYPES[backend]]
    for dtype in dtypes:

        def run(dtype=dtype):
            A = jaxdia.DiaMatrix(_random(rng, (len(offsets), shape[1]), dtype), offsets, shape)
            X = jnp.asarray(_random(rng, (shape[1], 4), dtype))
            Y = jnp.asarray(_random(rng, (shape[0], 4), dtype))

            def results(impl):
                def loss(data, X):
                    B = jaxdia.DiaMatrix(data, offsets, shape)
                    return jnp.vdot(Y, jaxdia.matmul(B, X, implementation=impl)).real

                product = jax.jit(lambda A, X: jaxdia.matmul(A, X, implementation=impl))(A, X)
                grad_data, grad_x = jax.jit(jax.grad(loss, argnums=(0, 1)))(A.data, X)
                return product, grad_x, grad_data

            worst = max(
                _error_ratio(p, _wide(x), np.abs(_wide(x)).max(), dtype)
                for p, x in zip(results(backend), results("xla"))
            )
            verdict = worst <= 1
            report.ok &= verdict
            report.add(
                "check",
                f"jaxdia A@X, grad X, grad data {np.dtype(dtype).name}",
                backend,
                "",
                "",
                "",
                f"{'ok' if verdict else 'FAIL'} (vs xla, error/tolerance {worst:.1e})",
            )

        report.guarded("check", f"dispatch {backend} {np.dtype(dtype).name}", run)


# -- 2. timing A @ X ---------------------------------------------------------------------


def stencil_offsets(n: int, points: int) -> tuple[int, ...]:
    """Offsets of a 5-point (2-D) or 27-point (3-D) stencil on a grid of ``n`` points."""
    if points == 5:
        side = max(2, math.isqrt(n))
        return (-side, -1, 0, 1, side)
    side = max(2, round(n ** (1 / 3)))
    return tuple(
        sorted(
            {
                dz * side * side + dy * side + dx
                for dz in (-1, 0, 1)
                for dy in (-1, 0, 1)
                for dx in (-1, 0, 1)
            }
        )
    )


def bcsr_matrix(offsets, n, dtype, max_nnz):
    """``jax.experimental.sparse.BCSR`` of the stencil matrix (ones), or None if too big."""
    from jax.experimental import sparse as jsparse

    if sum(n - abs(o) for o in offsets) > max_nnz:
        return None
    S = sp.diags_array(  # float32: SciPy has no bfloat16
        [np.ones(n - abs(o), np.float32) for o in offsets], offsets=offsets, shape=(n, n)
    ).tocsr()
    return jsparse.BCSR(
        (
            jnp.asarray(S.data, dtype),
            jnp.asarray(S.indices.astype(np.int32)),
            jnp.asarray(S.indptr.astype(np.int32)),
        ),
        shape=(n, n),
    )


def free_bytes(device) -> float:
    stats = device.memory_stats() or {}
    limit = stats.get("bytes_limit")
    if limit is None:
        return 8e9  # CPU or unknown: stay small
    return limit - stats.get("bytes_in_use", 0)


def time_products(report: Report, sizes, repeats, max_bcsr_nnz, device, backends, dtypes) -> None:
    key = jax.random.key(0)
    implementations = [None, *backends, "xla"]
    for n in sizes:
        for points in (5, 27) if len(dtypes) > 1 else (5,):
            offsets = stencil_offsets(n, points)
            for dtype in dtypes:
                itemsize = np.dtype(dtype).itemsize
                bcsr = None  # built once (on the host) for both column counts
                for n_cols in (1, 8):
                    case = f"n={n:.0e} diags={len(offsets)} c={n_cols} {np.dtype(dtype).name}"
                    traffic = (len(offsets) * n + 2 * n * n_cols) * itemsize
                    # data, x, y, and a copy of the same bytes: keep well inside memory.
                    if 2.5 * traffic > 0.8 * free_bytes(device):
                        report.add("A@X", case, f"skipped: needs {2.5 * traffic / 1e9:.1f} GB")
                        continue

                    def run(offsets=offsets, dtype=dtype, n_cols=n_cols, traffic=traffic):
                        nonlocal key, bcsr
                        k1, k2, key = jax.random.split(key, 3)
                        data = jax.random.normal(k1, (len(offsets), n), dtype)
                        x = jax.random.normal(k2, (n, n_cols), dtype)
                        A = jaxdia.DiaMatrix(data, offsets, (n, n))
                        # A copy (read + write) moving the same number of bytes.
                        buffer = jnp.zeros((traffic // (2 * itemsize),), dtype)
                        copy = median_time(jax.jit(lambda b: -b), buffer, repeats=repeats)
                        del buffer
                        if bcsr is None:
                            bcsr = bcsr_matrix(offsets, n, dtype, max_bcsr_nnz)
                        t_bcsr = None
                        if bcsr is not None:
                            t_bcsr = median_time(
                                jax.jit(lambda B, x: B @ x), bcsr, x, repeats=repeats
                            )
                        report.add(
                            "A@X",
                            case,
                            "device copy",
                            f"{copy * 1e3:.3f}",
                            f"{traffic / copy / 1e9:.0f}",
                            "",
                            "bound",
                        )
                        for impl in implementations:
                            name = impl or "default"

                            def product(A, x, impl=impl):
                                return jaxdia.matmul(A, x, implementation=impl)

                            try:
                                t = median_time(jax.jit(product), A, x, repeats=repeats)
                            except ValueError as error:  # a forced family that cannot run
                                report.add(
                                    "A@X", case, name, "", "", "", f"not run: {str(error)[:120]}"
                                )
                                continue
                            ratio = f"{copy / t:.2f} of copy"
                            if t_bcsr is not None:
                                ratio += f", {t_bcsr / t:.1f}x BCSR"
                            report.add(
                                "A@X",
                                case,
                                name,
                                f"{t * 1e3:.3f}",
                                f"{traffic / t / 1e9:.0f}",
                                ratio,
                                "",
                            )

                    report.guarded("A@X", case, run)
                bcsr = None


# -- 3. banded solves --------------------------------------------------------------------


def spd_band(n: int, bandwidth: int, dtype) -> jaxdia.DiaMatrix:
    """A symmetric, strictly diagonally dominant band matrix (so positive definite)."""
    rng = np.random.default_rng(bandwidth)
    offsets = list(range(-bandwidth, bandwidth + 1))
    off = {k: -rng.uniform(0.1, 1.0, n - k) for k in range(1, bandwidth + 1)}
    diagonals = [off[abs(k)] if k else np.full(n, 2.0 * bandwidth + 1.0) for k in offsets]
    return jaxdia.diags(diagonals, offsets=offsets, shape=(n, n), dtype=dtype)


def time_solves(report: Report, sizes, repeats, dtypes) -> None:
    for n in sizes:
        for bandwidth, label in ((1, "tridiagonal"), (2, "pentadiagonal"), (10, "band-10")):
            for dtype in dtypes:
                case = f"{label} n={n:.0e} {np.dtype(dtype).name}"

                def run(n=n, bandwidth=bandwidth, dtype=dtype):
                    A = spd_band(n, bandwidth, dtype)
                    b = jnp.asarray(np.random.default_rng(0).standard_normal(n), dtype)
                    lu = jax.jit(jaxdia.lu_factor)(A)
                    solvers = {
                        "solve_banded": (jax.jit(jaxdia.solve_banded), A),
                        "lu_factor + solve": (
                            jax.jit(lambda A, b: jaxdia.lu_factor(A).solve(b)),
                            A,
                        ),
                        "cho_factor + solve": (
                            jax.jit(lambda A, b: jaxdia.cho_factor(A).solve(b)),
                            A,
                        ),
                        "solve with a stored LU": (jax.jit(lambda lu, b: lu.solve(b)), lu),
                    }
                    for name, (solver, first) in solvers.items():
                        args = (first, b)
                        t = median_time(solver, *args, repeats=repeats)
                        x = solver(*args)
                        residual = float(jnp.linalg.norm(A @ x - b) / jnp.linalg.norm(b))
                        tolerance = 1e-4 if dtype == np.float32 else 1e-10
                        verdict = residual <= tolerance
                        report.ok &= verdict
                        report.add(
                            "banded",
                            case,
                            name,
                            f"{t * 1e3:.3f}",
                            "",
                            "",
                            f"{'ok' if verdict else 'FAIL'} (residual {residual:.1e})",
                        )

                report.guarded("banded", case, run)


# -- 4. multigrid-CG ---------------------------------------------------------------------


def poisson_2d(side: int, dtype) -> jaxdia.DiaMatrix:
    T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    eye = sp.eye_array(side)
    S = (sp.kron(T, eye) + sp.kron(eye, T)).todia()
    return jaxdia.DiaMatrix.from_scipy(S.astype(dtype))


def time_multigrid(report: Report, side: int, repeats: int, dtypes) -> None:
    for dtype in dtypes:
        case = f"2-D Poisson {side}x{side} {np.dtype(dtype).name}"

        def run(dtype=dtype):
            A = poisson_2d(side, dtype)
            b = jnp.asarray(np.random.default_rng(0).standard_normal(side * side), dtype)
            start = time.perf_counter()
            M = jaxdia.multigrid(A, (side, side))
            setup = time.perf_counter() - start
            rtol = 1e-5 if dtype == np.float32 else 1e-8
            solve = jax.jit(lambda A, b, M: jaxdia.cg(A, b, M=M, rtol=rtol))
            t = median_time(solve, A, b, M, repeats=repeats)
            x, info = solve(A, b, M)
            residual = float(jnp.linalg.norm(A @ x - b) / jnp.linalg.norm(b))
            verdict = bool(info.converged)
            report.ok &= verdict
            report.add(
                "multigrid-CG",
                case,
                "jaxdia.cg + multigrid",
                f"{t * 1e3:.1f}",
                "",
                "",
                f"{'ok' if verdict else 'FAIL'} ({int(info.iterations)} iterations, residual "
                f"{residual:.1e}, setup {setup:.1f} s)",
            )

        report.guarded("multigrid-CG", case, run)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="every section at tiny sizes, the kernels interpreted (any machine)",
    )
    parser.add_argument("--max-n", type=float, default=1e8, help="largest n of A @ X to time")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--max-bcsr-nnz",
        type=float,
        default=1e8,
        help="skip BCSR above this many nonzeros (its setup is on the host)",
    )
    parser.add_argument("--budget", type=float, default=9.0, help="minutes for new cases")
    parser.add_argument(
        "--sections",
        default="check,matmul,banded,multigrid",
        help="comma-separated subset of check,matmul,banded,multigrid",
    )
    args = parser.parse_args(argv)
    sections = set(args.sections.split(","))

    device = accelerator()
    print(f"jax {jax.__version__}, devices: {jax.devices()}")
    if device is None and not args.dry_run:
        print(
            "No GPU or TPU found: nothing to check. (Use --dry-run to exercise every section "
            "of this script at tiny sizes on this machine.)"
        )
        return 0
    report = Report(args.budget * 60)
    tpu = device is not None and device.platform == "tpu"
    if args.dry_run:
        products, solves, side, repeats, dtypes = [10**4], [10**3], 30, 2, [np.float64]
        product_dtypes, backends, product_backends = [np.float32], tuple(BACKENDS), ()
    else:
        products = [n for n in (10**6, 10**7, 10**8) if n <= args.max_n]
        solves, side, repeats = [10**5, 10**6], 1000, args.repeats
        dtypes = [np.float32] if tpu else [np.float64, np.float32]
        product_dtypes = [np.float32, jnp.bfloat16] if tpu else [np.float32, np.float64]
        backends = product_backends = PLATFORM_BACKENDS[device.platform]
    if "check" in sections:
        kind = "interpreted" if args.dry_run else device.platform
        print(f"\n1. Correctness of the Pallas kernels ({kind})")
        for backend in backends:
            check_kernels(report, backend, args.dry_run)
            if device is not None:
                check_dispatch(report, backend)
    if "matmul" in sections:
        print("\n2. A @ X")
        time_products(
            report,
            products,
            repeats,
            int(args.max_bcsr_nnz),
            device or jax.devices()[0],
            product_backends,
            product_dtypes,
        )
    if "banded" in sections:
        print("\n3. Banded solves")
        time_solves(report, solves, repeats, dtypes)
    if "multigrid" in sections:
        print("\n4. Multigrid-CG")
        time_multigrid(report, side, repeats, dtypes)
    print(
        f"\n{jax.__version__=}, {device.device_kind if device else 'no accelerator'}, "
        f"{time.perf_counter() - report.start:.0f} s\n"
    )
    print(report.table())
    print("\nall checks passed" if report.ok else "\nSOME CHECKS FAILED")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
