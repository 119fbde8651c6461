"""Writes the lowered StableHLO of unsharded operations, one file each, to compare two
versions of jaxdia: a change meant for sharded operands must leave these unchanged.

Usage, from a checkout of each version::

    PYTHONPATH=$PWD .venv/bin/python scripts/lowering_snapshot.py /tmp/before
    # ... switch to the other version ...
    PYTHONPATH=$PWD .venv/bin/python scripts/lowering_snapshot.py /tmp/after
    diff -r /tmp/before /tmp/after && echo unchanged

Each file is ``jax.jit(f).lower(*args).as_text()`` for one operation (products both
ways, batched and rectangular, ``A.T @ x``, ``grad``, ``vmap``, ``todense``, ``A.T``,
traces, sums, ``A @ B``, ``cg``, ``jacobi``, and the solve side: factors, banded solves,
jaxdia's solvers and preconditioners, ``eigsh``, ``expm_multiply``) on one device, float32; the
script prints a digest per file.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import jaxdia


def cases() -> dict:
    rng = np.random.default_rng(0)

    def matrix(n, offsets, batch=()):
        data = rng.standard_normal((*batch, len(offsets), n)).astype(np.float32)
        return jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))

    A = matrix(100, (-3, 0, 2))
    batched = matrix(50, (-1, 0, 1), (4,))
    wide = jaxdia.DiaMatrix(jnp.ones((2, 30), jnp.float32), (-2, 1), (20, 30))
    x, X = jnp.ones(100), jnp.ones((100, 3))
    ones = np.ones(100, np.float32)
    tri = jaxdia.diags([-ones[:99], 4 * ones, -ones[:99]], offsets=[-1, 0, 1])
    spd = jaxdia.diags(
        [-ones[:98], -ones[:99], 5 * ones, -ones[:99], -ones[:98]], [-2, -1, 0, 1, 2]
    )
    laplacian = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(10, 10))
    identity = jaxdia.eye(10)
    poisson = jaxdia.kron(laplacian, identity) + jaxdia.kron(identity, laplacian)

    def loss(A, x):
        return jnp.sum(jnp.sin(A @ x))

    return {
        "A_x": (lambda A, x: A @ x, A, x),
        "A_X": (lambda A, x: A @ x, A, X),
        "x_A": (lambda A, x: x @ A, A, x),
        "Xt_A": (lambda A, x: x.T @ A, A, X),
        "batched": (lambda A, x: A @ x, batched, jnp.ones((4, 50, 2))),
        "wide_x": (lambda A, x: A @ x, wide, jnp.ones(30)),
        "x_wide": (lambda A, x: x @ A, wide, jnp.ones(20)),
        "AT_x": (lambda A, x: A.T @ x, A, x),
        "grad": (lambda A, x: jax.grad(loss, argnums=(0, 1))(A, x), A, x),
        "vmap": (lambda A, x: jax.vmap(lambda v: A @ v)(x), A, jnp.ones((5, 100))),
        "todense": (lambda A, x: A.todense(), A, x),
        "transpose": (lambda A, x: A.T, A, x),
        "traces": (lambda A, x: A.traces(3), A, x),
        "sum0": (lambda A, x: A.sum(0), A, x),
        "A_A": (lambda A, x: A @ A, A, x),
        "cg": (lambda A, x: jax.scipy.sparse.linalg.cg(A, x, maxiter=5)[0], A, x),
        "jacobi": (lambda A, x: jaxdia.jacobi(A)(x), A, x),
        # the solve side
        "lu_solve": (lambda A, x: jaxdia.lu_factor(A).solve(x), A, x),
        "cho_solve": (lambda A, x: jaxdia.cho_factor(A).solve(x), spd, x),
        "solve_tridiagonal": (lambda A, x: jaxdia.solve_banded(A, x), tri, x),
        "solve_banded": (lambda A, x: jaxdia.solve_banded(A, x), A, x),
        "jaxdia_cg": (lambda A, x: jaxdia.cg(A, x, M=jaxdia.jacobi(A), maxiter=5)[0], spd, x),
        "bicgstab": (lambda A, x: jaxdia.bicgstab(A, x, maxiter=5)[0], A, x),
        "chebyshev": (lambda A, x: jaxdia.chebyshev(A, 3)(x), spd, x),
        "multigrid": (lambda A, x: jaxdia.multigrid(A, (10, 10))(x), poisson, x),
        "eigsh": (lambda A, x: jaxdia.eigsh(A, k=2, ncv=8, maxiter=3, v0=x)[0], spd, x),
        "eigsh_sigma": (
            lambda A, x: jaxdia.eigsh(A, k=2, ncv=8, maxiter=3, v0=x, sigma=0.5)[0],
            spd,
            x,
        ),
        "expm_multiply": (lambda A, x: jaxdia.expm_multiply(0.1 * A, x), spd, x),
        "expm_multiply_grid": (
            lambda A, x: jaxdia.expm_multiply(A, x, start=-0.5, stop=1.0, num=7),
            A,
            X,
        ),
        "expm_multiply_complex": (
            lambda A, x: jaxdia.expm_multiply(-1j * A, x.astype(jnp.complex64)),
            spd,
            X,
        ),
        "expm_multiply_scattered": (lambda A, x: jaxdia.expm_multiply(A, x), poisson, x),
        "expm_multiply_batched": (
            lambda A, x: jaxdia.expm_multiply(A, x, traceA=0.0),
            batched,
            jnp.ones((4, 50, 2)),
        ),
        "expm_multiply_grad": (
            lambda A, x: jax.grad(
                lambda A, x: jnp.sum(jaxdia.expm_multiply(A, x, start=0.0, stop=0.5, num=3)),
                argnums=(0, 1),
            )(A, x),
            A,
            x,
        ),
    }


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    for name, (f, *args) in cases().items():
        text = jax.jit(f).lower(*args).as_text()
        (out / f"{name}.mlir").write_text(text)
        print(name, hashlib.sha1(text.encode()).hexdigest()[:12])


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
