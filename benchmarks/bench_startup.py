"""What a process pays to start: ``import jax, jaxdia`` against NumPy + SciPy, as processes.

Each row is a fresh Python process running one line, its wall and CPU (user + system)
time measured from outside: the interpreter alone, the imports a SciPy sparse program
needs, ``import jax``, and ``import jax, jaxdia``. Rounds interleave the rows; medians.
The last lines are what jaxdia adds to ``import jax``: the difference of the medians, and
(steadier on a loaded machine) ``import jaxdia`` timed inside processes that imported JAX
first (CPU time, ``time.process_time``).
Bytecode is written and used (a first, uncounted round writes jaxdia's ``__pycache__``)
as for an installed package, whatever ``PYTHONDONTWRITEBYTECODE`` says.

    OPENBLAS_NUM_THREADS=1 PYTHONPATH=. .venv/bin/python benchmarks/bench_startup.py [--rounds 9]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
ROWS = {  # label: the process's code
    "python -c pass": "pass",
    "import numpy, scipy.sparse, scipy.sparse.linalg": (
        "import numpy, scipy.sparse, scipy.sparse.linalg"
    ),
    "import jax": "import jax",
    "import jax, jaxdia": "import jax, jaxdia",
}


#: Prints the CPU seconds of ``import jaxdia`` once JAX is imported.
INSIDE = "import time, jax; t = time.process_time(); import jaxdia; print(time.process_time() - t)"


def inside(env: dict[str, str]) -> float:
    """CPU seconds of ``import jaxdia`` in a process that imported JAX first."""
    done = subprocess.run(
        [sys.executable, "-c", INSIDE],
        env=env,
        cwd=ROOT,
        check=True,
        timeout=300,
        capture_output=True,
        text=True,
    )
    return float(done.stdout)


def run(code: str, env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU seconds of one process running ``code``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True, timeout=300)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    env = {**os.environ, "PYTHONPATH": ROOT}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for code in ROWS.values():  # writes the bytecode; not counted
        run(code, env)
    times: dict[str, list[tuple[float, float]]] = {label: [] for label in ROWS}
    imports: list[float] = []
    for _ in range(args.rounds):
        for label, code in ROWS.items():
            times[label].append(run(code, env))
        imports.append(inside(env))
    wall = {k: statistics.median(w for w, _ in v) for k, v in times.items()}
    cpu = {k: statistics.median(c for _, c in v) for k, v in times.items()}
    print(f"{args.rounds} rounds, medians\n")
    print("| process | wall s | CPU s |")
    print("|---|---:|---:|")
    for label in ROWS:
        print(f"| `{label}` | {wall[label]:.2f} | {cpu[label]:.2f} |")
    print(
        f"| jaxdia's share (`import jax, jaxdia` - `import jax`) | "
        f"{wall['import jax, jaxdia'] - wall['import jax']:.3f} | "
        f"{cpu['import jax, jaxdia'] - cpu['import jax']:.3f} |"
    )
    inside_cpu = statistics.median(imports)
    print(f"| `import jaxdia` after `import jax`, inside the process | | {inside_cpu:.3f} |")


if __name__ == "__main__":
    main()
