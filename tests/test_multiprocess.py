"""jaxdia on a mesh spanning 2 JAX processes on localhost (``jax.distributed``).

Starts ``multiprocess_worker.py`` as process 0 and 1, each with 2 fake CPU devices (CPU
collectives over gloo), and checks that both ran every check: products and
``jaxdia.cg``/``bicgstab`` with Jacobi, Chebyshev and multigrid preconditioners built
outside ``jit``, a function operator, ``variant="fused"``, all against SciPy. Both
processes together are bounded by a timeout and killed (only those started here) if it outlives it;
a failure shows both outputs.
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

WORKER = Path(__file__).with_name("multiprocess_worker.py")
CHECKS = (
    "product",
    "product jit",
    "cg jacobi",
    "cg chebyshev",
    "cg multigrid",
    "cg function operator",
    "cg fused multigrid jit",
    "bicgstab fused jacobi",
)
TIMEOUT_S = 120


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.full
def test_two_processes():
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    port = _free_port()
    processes = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(port), str(i)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(2)
    ]
    outputs = [""] * len(processes)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        for i, process in enumerate(processes):
            try:
                outputs[i], _ = process.communicate(timeout=max(deadline - time.monotonic(), 1))
            except subprocess.TimeoutExpired:
                process.kill()
                outputs[i] = process.communicate()[0] + f"\n(killed after {TIMEOUT_S} s)"
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    report = "\n".join(f"--- process {i} ---\n{out}" for i, out in enumerate(outputs))
    for i, (process, out) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"process {i} exited {process.returncode}\n{report}"
        passed = {line.split(" (")[0][5:] for line in out.splitlines() if line.startswith("PASS ")}
        assert passed == set(CHECKS) and "DONE" in out.splitlines(), report
