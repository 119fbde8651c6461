"""One process of a 2-process JAX run on localhost: jaxdia on a mesh spanning processes.

``tests/test_multiprocess.py`` starts this script twice, as process 0 and 1 of
``jax.distributed``, each with 2 fake CPU devices (CPU collectives over gloo, JAX's
default), and checks both outputs. It is also the recipe of ``docs/sharding.md``: every
process runs the same program, builds only its own columns of ``data`` and rows of the
right-hand side, and gathers results with ``process_allgather``. Each check prints
``PASS <name>``; the first failure raises (non-zero exit code).

Run by hand, in two shells: ``python tests/multiprocess_worker.py PORT 0`` and
``python tests/multiprocess_worker.py PORT 1`` (with ``JAX_PLATFORMS=cpu`` and
``XLA_FLAGS=--xla_force_host_platform_device_count=2``).
"""

from __future__ import annotations

import sys

import jax

port, process_id = int(sys.argv[1]), int(sys.argv[2])
# Before any other JAX call: every process joins the coordinator (process 0's address).
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id
)
jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from jax.experimental.multihost_utils import process_allgather  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

import jaxdia  # noqa: E402

SIDE = 16  # a SIDE x SIDE grid: n = 256 rows, 64 per device
n = SIDE * SIDE
assert jax.process_count() == 2 and jax.device_count() == 4, jax.devices()
assert jax.local_device_count() == 2

# The mesh spans the 4 devices of both processes; its rows are split over all of them.
mesh = jax.make_mesh((jax.device_count(),), ("rows",), axis_types=(AxisType.Explicit,))
offsets = (-SIDE, -1, 0, 1, SIDE)


def my_columns(index):
    """This device's columns of the 2-D Poisson matrix's data (SciPy's DIA layout:
    data[k, j] == A[j - offsets[k], j]), built from the column numbers alone."""
    j = np.arange(n)[index[1]]
    x = j % SIDE  # the grid column of matrix column j
    return np.stack(
        [
            -np.ones(j.size) * (j < n - SIDE),  # A[j + SIDE, j]
            -np.ones(j.size) * (x < SIDE - 1),  # A[j + 1, j]
            4 * np.ones(j.size),
            -np.ones(j.size) * (x > 0),  # A[j - 1, j]
            -np.ones(j.size) * (j >= SIDE),  # A[j - SIDE, j]
        ]
    )


rhs = np.random.default_rng(0).standard_normal(n)  # every process knows it here; in
# practice each would compute its own rows, as below, from the row numbers.
data = jax.make_array_from_callback(
    (len(offsets), n), NamedSharding(mesh, PartitionSpec(None, "rows")), my_columns
)
S = jaxdia.shard(jaxdia.DiaMatrix(data, offsets, (n, n)), mesh, "rows")
assert S.padded_size == n
b = jax.make_array_from_callback((n,), S.vector_sharding, lambda index: rhs[index])
assert not b.is_fully_addressable  # half of b lives on the other process

# The oracle, known on every process.
one = 2 * sp.eye_array(SIDE) - sp.eye_array(SIDE, k=1) - sp.eye_array(SIDE, k=-1)
A = (sp.kron(sp.eye_array(SIDE), one) + sp.kron(one, sp.eye_array(SIDE))).tocsc()
want = spla.spsolve(A, rhs)


def check(name, x, expected, tol):
    """Gathers ``x`` (a global array) to every process and compares it to ``expected``."""
    got = process_allgather(x, tiled=True)
    error = np.max(np.abs(got - expected)) / np.max(np.abs(expected))
    assert error < tol, (name, error)
    print(f"PASS {name} (relative error {error:.1e})", flush=True)


check("product", S @ b, A @ rhs, 1e-14)
check("product jit", jax.jit(lambda S, b: S @ b)(S, b), A @ rhs, 1e-14)

# Preconditioners built outside jit: their value checks run on the devices.
M_jacobi = jaxdia.jacobi(S)
x, info = jaxdia.cg(S, b, M=M_jacobi, rtol=1e-10)
assert bool(info.converged), info
check("cg jacobi", x, want, 1e-8)

M_chebyshev = jaxdia.chebyshev(S, 4)
x, info = jaxdia.cg(S, b, M=M_chebyshev, rtol=1e-10)
assert bool(info.converged), info
check("cg chebyshev", x, want, 1e-8)

M_multigrid = jaxdia.multigrid(S, (SIDE, SIDE), max_coarse=16, gather_below=32)
assert isinstance(M_multigrid, jaxdia.ShardedMultigrid) and M_multigrid.sharded_levels >= 1
x, info = jaxdia.cg(S, b, M=M_multigrid, rtol=1e-10)
assert bool(info.converged) and int(info.iterations) <= 12, info
check("cg multigrid", x, want, 1e-8)

# A function operator closing over S, outside jit.
x, info = jaxdia.cg(lambda v: S @ v, b, M=M_jacobi, rtol=1e-10)
assert bool(info.converged), info
check("cg function operator", x, want, 1e-8)

# One reduction per iteration, inside jit, and bicgstab.
solve = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-10, variant="fused"))
x, info = solve(S, b, M_multigrid)
assert bool(info.converged), info
check("cg fused multigrid jit", x, want, 1e-8)
x, info = jaxdia.bicgstab(S, b, M=M_jacobi, rtol=1e-10, variant="fused")
assert bool(info.converged), info
check("bicgstab fused jacobi", x, want, 1e-8)

# The solution, gathered to every process as a NumPy array (the first n rows).
solution = process_allgather(x, tiled=True)[:n]
assert isinstance(solution, np.ndarray) and solution.shape == (n,)
print("DONE", flush=True)
