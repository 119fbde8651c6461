"""What JAX's persistent compilation cache saves a short script: each example runs three
times in fresh processes: without the cache, then twice with an empty cache directory
(the first run fills it, the second reads it).

Short scripts spend most of their time compiling (one program per operation, shape and
set of offsets). With ``jax_compilation_cache_dir`` set, compiled programs are written to
disk and a later process loads them instead of compiling again. JAX only caches programs
that took at least ``jax_persistent_cache_min_compile_time_secs`` (1 s by default) to
compile; jaxdia's programs typically compile in 0.02-0.3 s, so the threshold is set to 0.

Usage::

    python benchmarks/bench_cache.py [--markdown FILE]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = ["heat_equation.py", "poisson_2d.py", "inverse_diffusion.py"]


def run(example: str, env: dict) -> float:
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", example), "--small"],
        env=env,
        check=True,
        capture_output=True,
        cwd=tempfile.gettempdir(),
    )
    return time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--markdown", default=None)
    args = p.parse_args()
    lines = [
        "| example (`--small`) | no cache (s) | 1st run, filling the cache (s) | "
        "2nd run, from the cache (s) | 2nd / no cache |",
        "|---|---|---|---|---|",
    ]
    print("\n".join(lines), flush=True)
    for example in EXAMPLES:
        base = {**os.environ, "PYTHONPATH": ROOT, "MPLBACKEND": "Agg"}
        cold = run(example, base)
        with tempfile.TemporaryDirectory() as cache:
            cached = {
                **base,
                "JAX_COMPILATION_CACHE_DIR": cache,
                "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
                "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0",
            }
            first = run(example, cached)
            second = run(example, cached)
        lines.append(
            f"| {example} | {cold:.1f} | {first:.1f} | {second:.1f} | {second / cold:.2f} |"
        )
        print(lines[-1], flush=True)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
