"""Check the Pallas Triton kernels on an NVIDIA GPU, then time ``A @ X`` there.

Usage (a machine with a CUDA build of jax >= 0.10.2; no internet needed)::

    python benchmarks/gpu_check.py                 # correctness, then the timing table
    python benchmarks/gpu_check.py --max-n 1e7     # smaller problems only
    python benchmarks/gpu_check.py --interpret     # CPU: the same checks in interpret mode
                                                   # at tiny sizes, and a tiny timing table

1. Correctness: every kernel of ``jaxdia._kernels.pallas_triton`` (``A @ X``, ``A^T @ X``, SDDMM),
   compiled for the GPU (or interpreted with ``--interpret``), against SciPy on a few
   shapes (square, rectangular, extreme offsets, a broadcast batch) and every dtype the
   kernels take, with NaN in every padding slot of ``data``; then, on a GPU, ``A @ X``
   and its gradients with respect to ``X`` and ``data`` through ``jaxdia`` with the
   ``"pallas"`` and ``"xla"`` implementations against each other.
2. Timing: ``A @ X`` (5- and 27-point stencils, 1 and 8 columns, float32 and float64,
   ``n`` = 1e6, 1e7, 1e8 where memory allows) with the default implementation (the
   Pallas kernel on a GPU) and with the XLA implementation, against a device-to-device
   copy moving the same bytes (the bandwidth limit) and ``jax.experimental.sparse.BCSR``
   on the same device. Medians over ``--repeats`` timed calls after a warm-up; GB/s
   counts the useful traffic ``(n_diags * n + 2 * n * c) * itemsize``.

Without a GPU (and without ``--interpret``) it says so and exits with status 0.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia._kernels import pallas_triton  # noqa: E402

DTYPES = [np.float32, np.float64, jnp.bfloat16, np.float16, np.complex64, np.complex128]
TOLERANCE = {
    np.dtype(np.float32): 1e-5,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
    np.dtype(jnp.bfloat16): 5e-2,
    np.dtype(np.float16): 2e-2,
}


def gpu_device():
    """The first GPU, or None."""
    try:
        devices = jax.devices("gpu")
    except RuntimeError:
        return None
    return devices[0] if devices else None


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


def _check(name, actual, expected, scale, dtype):
    error = np.abs(_wide(actual) - expected)
    bound = TOLERANCE[np.dtype(dtype)] * (scale + 1.0)
    ok = actual.shape == expected.shape and bool(np.all(error <= bound))
    worst = float(np.max(error / bound)) if error.size else 0.0
    print(f"  {'ok  ' if ok else 'FAIL'} {name:<58} error/tolerance {worst:.2e}")
    return ok


def _cases(interpret):
    """(shape, offsets, batch of data, batch of x, columns)."""
    if interpret:
        return [((9, 21), (-8, -2, 0, 3, 20), (2,), (1,), 3)]
    return [
        ((1000, 1000), (-1, 0, 1), (), (), 1),
        ((4096, 4096), (-64, -1, 0, 1, 64), (), (), 8),
        ((777, 1234), (-776, -300, -1, 0, 5, 1000, 1233), (), (), 3),
        ((1234, 777), (-1233, -2, 0, 2, 776), (3,), (1,), 5),
    ]


def check_kernels(interpret: bool) -> bool:
    """Every Triton kernel against SciPy; True when all pass."""
    print("1. Correctness of the Triton kernels" + (" (interpret mode)" if interpret else ""))
    rng = np.random.default_rng(0)
    all_ok = True
    for shape, offsets, data_batch, x_batch, n_cols in _cases(interpret):
        m, n = shape
        for dtype in DTYPES:
            dtype = np.dtype(dtype)
            data = _with_nan_padding(
                _random(rng, (*data_batch, len(offsets), n), dtype), offsets, shape
            )
            label = f"{shape} diags={len(offsets)} c={n_cols} batch={data_batch} {dtype.name}"
            batch = np.broadcast_shapes(data_batch, x_batch)
            for transpose in (False, True):
                x = _random(rng, (*x_batch, m if transpose else n, n_cols), dtype)
                fn = jax.jit(
                    lambda d, x, t=transpose: pallas_triton.spmm(
                        d, x, offsets=offsets, shape=shape, transpose=t, interpret=interpret
                    )
                )
                y = np.asarray(fn(data, x))
                expected = np.zeros(y.shape, _wide(data).dtype)
                scale = np.zeros(y.shape)
                for b in np.ndindex(*batch):
                    A = sp.dia_array(
                        (_wide(np.broadcast_to(data, (*batch, *data.shape[-2:]))[b]), offsets),
                        shape=shape,
                    ).tocsr()
                    A = A.T if transpose else A
                    xb = _wide(np.broadcast_to(x, (*batch, *x.shape[-2:]))[b])
                    expected[b], scale[b] = A @ xb, abs(A) @ abs(xb)
                all_ok &= _check(
                    ("A^T@X " if transpose else "A@X   ") + label, y, expected, scale, dtype
                )
            g = _random(rng, (*data_batch, m, n_cols), dtype)
            x = _random(rng, (*x_batch, n, n_cols), dtype)
            fn = jax.jit(
                lambda g, x: pallas_triton.sddmm(
                    g, x, offsets=offsets, shape=shape, interpret=interpret
                )
            )
            d = np.asarray(fn(g, x))
            gw = np.broadcast_to(_wide(g), (*batch, m, n_cols))
            xw = np.broadcast_to(_wide(x), (*batch, n, n_cols))
            expected = np.zeros(d.shape, gw.dtype)
            scale = np.zeros(d.shape)
            for k, o in enumerate(offsets):
                j = np.arange(max(0, o), min(n, m + o))
                expected[..., k, j] = (gw[..., j - o, :] * xw[..., j, :]).sum(-1)
                scale[..., k, j] = (abs(gw[..., j - o, :]) * abs(xw[..., j, :])).sum(-1)
            all_ok &= _check("SDDMM  " + label, d, expected, scale, dtype)
    return all_ok


def check_dispatch() -> bool:
    """``A @ X`` and its gradients: implementation "pallas" against "xla" on this device."""
    print("   A @ X through jaxdia: implementation='pallas' against 'xla'")
    rng = np.random.default_rng(1)
    shape, offsets = (3000, 2000), (-2999, -7, 0, 1, 1999)
    all_ok = True
    for dtype in (np.float32, np.float64, np.complex64):
        A = jaxdia.DiaMatrix(_random(rng, (len(offsets), shape[1]), dtype), offsets, shape)
        X = jnp.asarray(_random(rng, (shape[1], 4), dtype))
        Y = jnp.asarray(_random(rng, (shape[0], 4), dtype))

        def run(impl, A=A, X=X, Y=Y):
            def loss(data, X):
                B = jaxdia.DiaMatrix(data, offsets, shape)
                return jnp.vdot(Y, jaxdia.matmul(B, X, implementation=impl)).real

            product = jax.jit(lambda A, X: jaxdia.matmul(A, X, implementation=impl))(A, X)
            # d loss / d X = A^T Y (the transposed kernel), d loss / d data: SDDMM.
            grad_data, grad_x = jax.jit(jax.grad(loss, argnums=(0, 1)))(A.data, X)
            return product, grad_x, grad_data

        names = ("A@X", "grad X (A^T@Y)", "grad data (SDDMM)")
        for name, p, x in zip(names, run("pallas"), run("xla")):
            scale = np.abs(_wide(x)).max() + 1.0
            all_ok &= _check(f"{name} {np.dtype(dtype).name}", p, _wide(x), scale, dtype)
    return all_ok


# -- 2. timing ---------------------------------------------------------------------------


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


def median_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile and warm up
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def bcsr_matrix(offsets, n, dtype, max_nnz):
    """``jax.experimental.sparse.BCSR`` of the stencil matrix (ones), or None if too big."""
    from jax.experimental import sparse as jsparse

    if sum(n - abs(o) for o in offsets) > max_nnz:
        return None
    S = sp.diags_array(
        [np.ones(n - abs(o), dtype) for o in offsets], offsets=offsets, shape=(n, n)
    ).tocsr()
    return jsparse.BCSR(
        (
            jnp.asarray(S.data),
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


def time_products(sizes, repeats, max_bcsr_nnz, device) -> None:
    print(f"\n2. Timing A @ X (median of {repeats} calls; GB/s of (n_diags*n + 2*n*c)*itemsize)")
    # "A@X": the default implementation (the Pallas kernel on a GPU, XLA on a CPU).
    header = (
        "| n | diags | c | dtype | A@X ms | GB/s | xla ms | copy ms | "
        "copy/A@X | BCSR ms | BCSR/A@X |"
    )
    print(header)
    print("|---" * (header.count("|") - 1) + "|")
    key = jax.random.key(0)
    for n in sizes:
        for points in (5, 27):
            offsets = stencil_offsets(n, points)
            for dtype in (np.float32, np.float64):
                itemsize = np.dtype(dtype).itemsize
                bcsr = None  # built once (on the host) for both column counts
                for n_cols in (1, 8):
                    traffic = (len(offsets) * n + 2 * n * n_cols) * itemsize
                    # data, x, y, and a copy of the same bytes: keep well inside memory.
                    if 2.5 * traffic > 0.8 * free_bytes(device):
                        print(
                            f"| {n:.0e} | {len(offsets)} | {n_cols} | "
                            f"{np.dtype(dtype).name} | skipped: needs "
                            f"{2.5 * traffic / 1e9:.1f} GB |" + " |" * 6
                        )
                        continue
                    k1, k2, key = jax.random.split(key, 3)
                    data = jax.random.normal(k1, (len(offsets), n), dtype)
                    x = jax.random.normal(k2, (n, n_cols), dtype)
                    A = jaxdia.DiaMatrix(data, offsets, (n, n))
                    default = median_time(
                        jax.jit(lambda A, x: jaxdia.matmul(A, x)), A, x, repeats=repeats
                    )
                    xla = median_time(
                        jax.jit(lambda A, x: jaxdia.matmul(A, x, implementation="xla")),
                        A,
                        x,
                        repeats=repeats,
                    )
                    del A, data
                    # A copy (read + write) moving the same number of bytes.
                    buffer = jnp.zeros((traffic // (2 * itemsize),), dtype)
                    copy = median_time(jax.jit(lambda b: -b), buffer, repeats=repeats)
                    del buffer
                    if bcsr is None:
                        bcsr = bcsr_matrix(offsets, n, dtype, max_bcsr_nnz)
                    bcsr_cols = ("-", "-")
                    if bcsr is not None:
                        t = median_time(jax.jit(lambda B, x: B @ x), bcsr, x, repeats=repeats)
                        bcsr_cols = (f"{t * 1e3:.3f}", f"{t / default:.2f}")
                    del x
                    print(
                        f"| {n:.0e} | {len(offsets)} | {n_cols} | {np.dtype(dtype).name} | "
                        f"{default * 1e3:.3f} | {traffic / default / 1e9:.1f} | "
                        f"{xla * 1e3:.3f} | {copy * 1e3:.3f} | {copy / default:.2f} | "
                        f"{bcsr_cols[0]} | {bcsr_cols[1]} |",
                        flush=True,
                    )
                del bcsr


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--interpret",
        action="store_true",
        help="run the kernels in interpret mode at tiny sizes (any machine)",
    )
    parser.add_argument("--max-n", type=float, default=1e8, help="largest n to time")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument(
        "--max-bcsr-nnz",
        type=float,
        default=1e8,
        help="skip BCSR above this many nonzeros (its setup is on the host)",
    )
    parser.add_argument("--skip-timing", action="store_true")
    args = parser.parse_args(argv)

    device = gpu_device()
    print(f"jax {jax.__version__}, devices: {jax.devices()}")
    if device is None and not args.interpret:
        print(
            "No GPU found: nothing to check. (Use --interpret to exercise this script's "
            "correctness checks in interpret mode on this machine.)"
        )
        return 0
    ok = check_kernels(interpret=args.interpret)
    if device is not None:
        ok &= check_dispatch()
    if not args.skip_timing:
        if args.interpret:
            # Exercise the table at tiny sizes; on a CPU the product runs on XLA.
            sizes, repeats = [10**4], 3
        else:
            sizes = [n for n in (10**6, 10**7, 10**8) if n <= args.max_n]
            repeats = args.repeats
        time_products(sizes, repeats, int(args.max_bcsr_nnz), device or jax.devices()[0])
    print("\nall checks passed" if ok else "\nSOME CHECKS FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
