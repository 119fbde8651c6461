"""``A @ X`` on a TPU: check the grouped Pallas kernel against XLA, then time it (block sizes
swept) against a copy of the same bytes, XLA's product and the block-shift kernel.

Every time is one product inside a jitted ``lax.fori_loop`` of products (``x <- A @ x``,
so no per-call dispatch is counted), the median of ``--repeats`` runs of the loop, divided
by its length. The copy is ``w <- w + 1`` over as many bytes as the product reads and
writes (``data + X + Y``) in the same kind of loop; "of copy" is the copy's time over the
product's. Results go to ``--out`` (JSON lines, one per measurement, written as they come,
so that a run cut short keeps what it measured).

    python benchmarks/tune_tpu_products.py --n 1e6,1e7 --out tune.jsonl
    python benchmarks/tune_tpu_products.py --check-only
    python benchmarks/tune_tpu_products.py --dry-run   # any machine: the check, interpreted
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import tpu_grouped  # noqa: E402  (beside this script)
from jax import lax  # noqa: E402

import jaxdia  # noqa: E402
from jaxdia._kernels import pallas_tpu, xla  # noqa: E402

#: Offsets of the measured matrices: bands of 3, 5 and 27 diagonals, and a 2-D 5-point
#: stencil on a 1000-wide grid.
PATTERNS = {
    "band3": (-1, 0, 1),
    "band5": (-2, -1, 0, 1, 2),
    "band27": tuple(range(-13, 14)),
    "stencil5": (-1000, -1, 0, 1, 1000),
}


def _median_seconds(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def loop_seconds(step, init, length: int, repeats: int) -> float:
    """Seconds per ``step`` inside one jitted loop of ``length`` steps."""
    loop = jax.jit(lambda v: lax.fori_loop(0, length, lambda i, v: step(v), v))
    return _median_seconds(loop, init, repeats=repeats) / length


def check(emit, interpret: bool = False) -> bool:
    """The grouped kernel on the chip against XLA's product in float64 on the host (every
    pattern, both products, rectangular, batched, several columns, bfloat16)."""
    rng = np.random.default_rng(0)
    host = jax.devices("cpu")[0]
    cases = [
        ((4096, 4096), PATTERNS["band27"], 1, (), jnp.float32),
        ((5000, 3000), PATTERNS["band5"], 3, (2,), jnp.float32),
        ((3000, 5000), (-130, -5, 0, 1, 2, 125, 126), 10, (), jnp.float32),
        ((3000, 3000), (-122, -121, -120, 0, 120, 121, 122, 123), 8, (), jnp.float32),
        ((20000, 20000), PATTERNS["stencil5"], 1, (), jnp.bfloat16),
        ((300, 300), PATTERNS["band3"], 2, (3,), jnp.bfloat16),
    ]
    ok = True
    for shape, offsets, columns, batch, dtype in cases:
        for transpose in (False, True):
            m, n = shape
            data = rng.standard_normal((*batch, len(offsets), n))
            x = rng.standard_normal((*batch, m if transpose else n, columns))
            with jax.default_device(host):
                reference = xla.spmm_xla(data, x, offsets=offsets, shape=shape, transpose=transpose)
            got = tpu_grouped.spmm(
                jnp.asarray(data, dtype),
                jnp.asarray(x, dtype),
                offsets=offsets,
                shape=shape,
                transpose=transpose,
                interpret=interpret,
            )
            reference = np.asarray(reference)
            error = float(np.max(np.abs(np.asarray(got, np.float64) - reference)))
            scale = float(np.max(np.abs(reference)))
            tolerance = 1e-5 if dtype == jnp.float32 else 5e-2
            passed = error <= tolerance * scale * np.sqrt(len(offsets))
            ok &= passed
            emit(
                kind="check",
                shape=shape,
                offsets=len(offsets),
                columns=columns,
                batch=batch,
                dtype=np.dtype(dtype).name,
                transpose=transpose,
                relative_error=error / scale,
                passed=bool(passed),
            )
    return ok


def tune(emit, sizes, blocks, repeats: int, length: int) -> None:
    rng = np.random.default_rng(1)
    for n in sizes:
        for name, offsets in PATTERNS.items():
            for columns in (1, 8):
                for dtype in (jnp.float32, jnp.bfloat16):
                    itemsize = np.dtype(dtype).itemsize
                    nbytes = (len(offsets) * n + 2 * n * columns) * itemsize
                    data = jnp.asarray(rng.uniform(0, 1 / len(offsets), (len(offsets), n)), dtype)
                    x = jnp.asarray(rng.uniform(-1, 1, (n, columns)), dtype)
                    A = jaxdia.DiaMatrix(data, offsets, (n, n))
                    common = dict(n=n, pattern=name, columns=columns, dtype=np.dtype(dtype).name)
                    copy = loop_seconds(
                        lambda w: w + 1, jnp.zeros(nbytes // 4, jnp.float32), length, repeats
                    )
                    emit(kind="time", implementation="copy", seconds=copy, **common)

                    def timed(implementation, product, **extra):
                        try:
                            seconds = loop_seconds(product, x, length, repeats)
                        except Exception as error:  # noqa: BLE001  (a failed case is a row)
                            emit(
                                kind="time",
                                implementation=implementation,
                                failed=f"{type(error).__name__}: {str(error)[:300]}",
                                **common,
                                **extra,
                            )
                            return
                        emit(
                            kind="time",
                            implementation=implementation,
                            seconds=seconds,
                            of_copy=copy / seconds,
                            **common,
                            **extra,
                        )

                    timed("xla", lambda v: jaxdia.matmul(A, v, implementation="xla"))
                    timed(
                        "block-shift",
                        lambda v: pallas_tpu.spmm(data, v, offsets=offsets, shape=(n, n)),
                    )
                    for block in blocks:
                        timed(
                            "grouped",
                            lambda v, block=block: tpu_grouped.spmm(
                                data, v, offsets=offsets, shape=(n, n), block=block
                            ),
                            block=block,
                        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--n", default="1e6,1e7", help="sizes, comma-separated")
    parser.add_argument("--blocks", default="8192,32768", help="grouped kernel block sizes")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--length", type=int, default=20, help="products per timed loop")
    parser.add_argument("--out", default="tune_tpu_products.jsonl")
    parser.add_argument("--check-only", action="store_true")
    parser.add_argument(
        "--dry-run", action="store_true", help="the check only, in Pallas's interpreter"
    )
    options = parser.parse_args(argv)
    out = open(options.out, "a")  # noqa: SIM115  (written line by line)

    def emit(**record):
        line = json.dumps(record)
        print(line, flush=True)
        out.write(line + "\n")
        out.flush()

    emit(kind="device", device=str(jax.devices()[0]), jax=jax.__version__)
    ok = check(emit, interpret=options.dry_run)
    emit(kind="summary", all_checks_passed=bool(ok))
    if not (options.check_only or options.dry_run):
        sizes = [int(float(s)) for s in options.n.split(",")]
        blocks = [int(b) for b in options.blocks.split(",")]
        tune(emit, sizes, blocks, options.repeats, options.length)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
