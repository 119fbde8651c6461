"""A differentiable inverse problem: recover a diffusion coefficient through a sparse solve.

The forward model is ``-div(kappa grad u) = f`` on the unit square (zero Dirichlet
boundary values), discretized with the 5-point finite-volume stencil on an ``N x N``
grid: the matrix is a DiaMatrix with offsets ``(-N, -1, 0, 1, N)`` whose data is
assembled in JAX from ``kappa``, so it is differentiable in ``kappa``. Solutions for
several source terms ``f`` are observed; ``kappa = exp(theta)`` is recovered from them
by gradient descent (Adam) on a least-squares misfit plus a smoothness penalty. Each
loss evaluation solves the systems with CG + Jacobi (vmapped over the sources), and
``jax.grad`` differentiates through the solves implicitly (one adjoint solve each).

Checks: the gradient matches one computed through dense ``jnp.linalg.solve``; the misfit
drops by orders of magnitude; the recovered field is close to the true one. A PNG plot
of the loss curve and the true and recovered fields is written when matplotlib is
installed.

Run: ``python examples/inverse_diffusion.py [--small] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.sparse.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

import jaxdia  # noqa: E402


def operator(kappa: jax.Array) -> jaxdia.DiaMatrix:
    """The matrix of ``-div(kappa grad u)`` for ``kappa`` on the ``N x N`` grid nodes.

    Faces between neighbouring nodes take the mean of the two nodes' ``kappa``; faces to
    the boundary take the node's own. Row ``p = i N + j`` couples node ``(i, j)`` with
    ``(i, j +- 1)`` (offsets +-1) and ``(i +- 1, j)`` (offsets +-N).
    """
    N = kappa.shape[0]
    h = 1.0 / (N + 1)
    faces_i = (kappa[1:, :] + kappa[:-1, :]) / 2  # between (i, j) and (i + 1, j)
    faces_j = (kappa[:, 1:] + kappa[:, :-1]) / 2  # between (i, j) and (i, j + 1)
    zero_row, zero_col = jnp.zeros((1, N)), jnp.zeros((N, 1))
    # Each face's coefficient, seen from both of its nodes (the boundary's own kappa there).
    up = jnp.concatenate([kappa[:1], faces_i])  # face to (i - 1, j)
    down = jnp.concatenate([faces_i, kappa[-1:]])  # face to (i + 1, j)
    left = jnp.concatenate([kappa[:, :1], faces_j], axis=1)
    right = jnp.concatenate([faces_j, kappa[:, -1:]], axis=1)
    # data[k, q] = A[q - offset_k, q]: the column of the matrix is the data column.
    data = (
        jnp.stack(
            [
                -jnp.concatenate([faces_i, zero_row]),  # offset -N: A[q + N, q] = -face(q, q + N)
                -jnp.concatenate([faces_j, zero_col], axis=1),  # offset -1
                up + down + left + right,  # offset 0
                -jnp.concatenate([zero_col, faces_j], axis=1),  # offset +1: A[q - 1, q]
                -jnp.concatenate([zero_row, faces_i]),  # offset +N
            ]
        ).reshape(5, N * N)
        / h**2
    )
    return jaxdia.DiaMatrix(data, (-N, -1, 0, 1, N), (N * N, N * N))


@jax.jit
def solve(kappa: jax.Array, sources: jax.Array) -> jax.Array:
    """Solutions for each source (rows of ``sources``), by CG + Jacobi."""
    A = operator(kappa)
    M = jaxdia.jacobi(A)
    return jax.vmap(lambda f: jsl.cg(A, f, M=M, tol=1e-11, maxiter=4000)[0])(sources)


def setup(N: int):
    x = np.arange(1, N + 1) / (N + 1)
    X, Y = np.meshgrid(x, x, indexing="ij")
    kappa_true = (
        1.0
        + 1.5 * np.exp(-((X - 0.35) ** 2 + (Y - 0.65) ** 2) / 0.02)
        - 0.5 * np.exp(-((X - 0.7) ** 2 + (Y - 0.3) ** 2) / 0.01)
    )
    sources = np.stack(
        [
            np.ones_like(X),
            10 * np.exp(-((X - 0.25) ** 2 + (Y - 0.25) ** 2) / 0.02),
            10 * np.exp(-((X - 0.75) ** 2 + (Y - 0.75) ** 2) / 0.02),
            10 * np.sin(np.pi * X) * np.cos(np.pi * Y),
            10 * np.cos(np.pi * X) * np.sin(np.pi * Y),
        ]
    ).reshape(5, N * N)
    return jnp.asarray(kappa_true), jnp.asarray(sources)


def make_loss(observed: jax.Array, sources: jax.Array, smoothing: float):
    scale = jnp.sum(observed**2)

    def loss(theta):
        misfit = jnp.sum((solve(jnp.exp(theta), sources) - observed) ** 2) / scale
        roughness = jnp.mean(jnp.diff(theta, axis=0) ** 2) + jnp.mean(jnp.diff(theta, axis=1) ** 2)
        return misfit + smoothing * roughness, misfit

    return loss


def adam(loss, theta, steps: int, rate: float):
    """Adam on ``loss(theta) -> (value, misfit)``, all steps in one jitted ``lax.scan``."""
    value_and_grad = jax.value_and_grad(loss, has_aux=True)

    @jax.jit
    def run(theta):
        def step(state, t):
            theta, m, v = state
            (value, misfit), g = value_and_grad(theta)
            m = 0.9 * m + 0.1 * g
            v = 0.999 * v + 0.001 * g**2
            m_hat, v_hat = m / (1 - 0.9 ** (t + 1)), v / (1 - 0.999 ** (t + 1))
            theta = theta - rate * m_hat / (jnp.sqrt(v_hat) + 1e-12)
            return (theta, m, v), (value, misfit)

        zeros = jnp.zeros_like(theta)
        (theta, _, _), history = lax.scan(step, (theta, zeros, zeros), jnp.arange(steps))
        return theta, history

    return run(theta)


def plot(path: Path, history, kappa_true, kappa) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (matplotlib is not installed: no plot; pip install 'jaxdia[plot]')")
        return False
    fig, axes = plt.subplots(1, 4, figsize=(17, 4))
    axes[0].semilogy(history[0], label="loss")
    axes[0].semilogy(history[1], label="data misfit")
    axes[0].set(xlabel="Adam step", title="Loss", ylabel="relative")
    axes[0].legend()
    vmin, vmax = float(np.min(kappa_true)), float(np.max(kappa_true))
    panels = [(kappa_true, "true kappa"), (kappa, "recovered kappa")]
    for ax, (field, title) in zip(axes[1:3], panels):
        image = ax.imshow(field.T, origin="lower", extent=(0, 1, 0, 1), vmin=vmin, vmax=vmax)
        ax.set(title=title, xlabel="x", ylabel="y")
        fig.colorbar(image, ax=ax)
    image = axes[3].imshow(
        (kappa - kappa_true).T, origin="lower", extent=(0, 1, 0, 1), cmap="RdBu_r"
    )
    axes[3].set(title="recovered - true", xlabel="x", ylabel="y")
    fig.colorbar(image, ax=axes[3])
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"  wrote {path}")
    return True


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a 12 x 12 grid (a quick check)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build/inverse_diffusion.png"),
        help="where to write the plot (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    N, steps = (12, 150) if args.small else (32, 400)

    kappa_true, sources = setup(N)
    observed = solve(kappa_true, sources)
    loss = make_loss(observed, sources, smoothing=1e-4)
    theta0 = jnp.zeros((N, N))  # kappa = 1 everywhere
    print(f"Recovering kappa on a {N} x {N} grid from {sources.shape[0]} observed solutions")
    checks = []

    # The gradient through CG equals the gradient through a dense solve.
    def dense_loss(theta):
        A = operator(jnp.exp(theta)).todense()
        u = jnp.linalg.solve(A, sources.T).T
        return jnp.sum((u - observed) ** 2) / jnp.sum(observed**2)

    probe = theta0 + 0.1 * jnp.asarray(np.random.default_rng(0).standard_normal((N, N)))
    if N <= 16:
        g_cg = jax.jit(jax.grad(lambda t: loss(t)[1]))(probe)
        g_dense = jax.jit(jax.grad(dense_loss))(probe)
        difference = float(jnp.linalg.norm(g_cg - g_dense) / jnp.linalg.norm(g_dense))
        checks.append(
            check(
                "gradient vs dense solve",
                difference < 1e-6,
                f"relative difference {difference:.1e}",
            )
        )

    start = time.perf_counter()
    print(f"  {steps} Adam steps (each: 5 CG solves + 5 adjoint solves) ...", flush=True)
    theta, history = adam(loss, theta0, steps, rate=0.05)
    history = np.asarray(history)
    print(f"  done in {time.perf_counter() - start:.1f} s")
    kappa = np.asarray(jnp.exp(theta))
    kappa_true = np.asarray(kappa_true)
    drop = history[1][0] / history[1][-1]
    error = np.linalg.norm(kappa - kappa_true) / np.linalg.norm(kappa_true)
    initial_error = np.linalg.norm(1 - kappa_true) / np.linalg.norm(kappa_true)
    checks.append(
        check("misfit decreases", drop > 100, f"{history[1][0]:.2e} -> {history[1][-1]:.2e}")
    )
    checks.append(
        check(
            "kappa recovered",
            error < 0.05,
            f"relative L2 error {error:.1e} (kappa = 1: {initial_error:.2f})",
        )
    )
    plot(args.out, history, kappa_true, kappa)
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
