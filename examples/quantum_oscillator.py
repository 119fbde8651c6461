"""The quantum harmonic oscillator: eigenstates with ``eigsh``, dynamics with ``expm_multiply``.

``H = -1/2 d^2/dx^2 + x^2 / 2`` on ``[-L, L]`` (zero boundary values), discretized by
second-order finite differences: a tridiagonal ``DiaMatrix``.

1. Eigenstates: ``jaxdia.eigsh(H, k, sigma=0)`` (shift-invert, the ``k`` levels nearest
   0, i.e. the lowest) against the exact levels ``E_n = n + 1/2`` (to the
   discretization's ``O(h^2)``) and against ``scipy.sparse.linalg.eigsh`` (to 1e-10).
2. Dynamics: the coherent state ``psi_0(x) = pi^(-1/4) exp(-(x - x_0)^2 / 2)`` (the
   ground state displaced by ``x_0``) keeps its shape and oscillates:
   ``|psi(x, t)|^2 = pi^(-1/2) exp(-(x - x_0 cos t)^2)``. ``jaxdia.expm_multiply(-1j * H,
   psi_0, start=0, stop=2 pi, num=...)`` gives ``psi`` on a grid of times; checked are the
   norm (unitarity), the energy, the mean position ``x_0 cos t``, the density against the
   analytic one, and the return after one period (``psi(2 pi) = -psi_0``: the phase
   ``exp(-i E_0 t)`` of the levels ``n + 1/2``).

A figure (eigenstates in the potential, the density over time, ``<x>(t)``) is written
when matplotlib is installed (``pip install 'jaxdia[plot]'``).

Run: ``python examples/quantum_oscillator.py [--small] [--out PATH]``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402

import jaxdia  # noqa: E402


def hamiltonian(n: int, L: float):
    """``(H, x, h)``: the finite-difference oscillator on ``n`` interior points of
    ``[-L, L]``."""
    x = np.linspace(-L, L, n + 2)[1:-1]
    h = x[1] - x[0]
    kinetic = jaxdia.diags(
        [-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n), dtype=jnp.float64
    ) * (0.5 / h**2)
    potential = jaxdia.diags([x**2 / 2], offsets=[0], shape=(n, n))
    return kinetic + potential, x, h


def check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else 'FAILED'}] {name}: {detail}")
    return ok


def eigenstates(H: jaxdia.DiaMatrix, x, h, levels: int, checks: list) -> tuple:
    start = time.perf_counter()
    E, psi = jaxdia.eigsh(H, k=levels, sigma=0.0)
    E.block_until_ready()
    elapsed = time.perf_counter() - start
    print(f"{levels} lowest levels with eigsh(H, k={levels}, sigma=0) ({elapsed:.2f} s)")
    exact = np.arange(levels) + 0.5
    error = np.abs(np.asarray(E) - exact)
    # Second-order differences: E_n is off by about h^2 (2 n^2 + 2 n + 1) / 32.
    bound = h**2 * (2 * exact**2 + 1)
    checks.append(
        check(
            "levels are n + 1/2",
            bool(np.all(error < bound)),
            f"largest error {error.max():.2e} (discretization, h = {h:.3g})",
        )
    )
    reference = np.sort(
        spla.eigsh(H.to_scipy().tocsc(), k=levels, sigma=0.0, return_eigenvectors=False)
    )
    difference = np.abs(np.asarray(E) - reference).max()
    checks.append(
        check("vs scipy eigsh", difference < 1e-10, f"largest difference {difference:.1e}")
    )
    return np.asarray(E), np.asarray(psi) / np.sqrt(h)  # normalized as functions of x


def coherent_state(H: jaxdia.DiaMatrix, x, h, x0: float, times: int, checks: list):
    psi0 = np.pi**-0.25 * np.exp(-((x - x0) ** 2) / 2) * np.sqrt(h)  # sum |psi0|^2 ~ 1
    psi0 = psi0 / np.linalg.norm(psi0)
    start = time.perf_counter()
    psi = jaxdia.expm_multiply(-1j * H, psi0, start=0.0, stop=2 * np.pi, num=times)
    psi.block_until_ready()
    elapsed = time.perf_counter() - start
    print(f"coherent state, x0 = {x0}, {times} times over one period ({elapsed:.2f} s)")
    psi = np.asarray(psi)
    t = np.linspace(0, 2 * np.pi, times)
    density = np.abs(psi) ** 2 / h
    norm_error = np.abs(np.sum(np.abs(psi) ** 2, axis=1) - 1).max()
    # Each of the Taylor substeps (about ||t H||_1 / 9 of them) is accurate to rounding;
    # the drift is their sum.
    budget = 1e-14 * 2 * np.pi * float(abs(H).sum(axis=0).max())
    checks.append(
        check("norm is conserved", norm_error < budget, f"largest drift {norm_error:.1e}")
    )
    Hpsi = jax.vmap(lambda v: H @ v)(jnp.asarray(psi))
    energy = np.real(np.sum(np.conj(psi) * np.asarray(Hpsi), axis=1))
    energy_error = np.abs(energy - energy[0]).max()
    checks.append(
        check(
            "energy is conserved",
            energy_error < budget * (1 + x0**2),
            f"<H> = {energy[0]:.6f} (exact (1 + x0^2) / 2 = {(1 + x0**2) / 2}), "
            f"drift {energy_error:.1e}",
        )
    )
    # The discrete levels are off by O(h^2), so the phase drifts by O(h^2 t): tolerances
    # scale with h^2 and with the levels the state occupies (about x0^2 / 2).
    discretization = h**2 * (1 + x0**2)
    mean_x = density @ x * h
    position_error = np.abs(mean_x - x0 * np.cos(t)).max()
    checks.append(
        check(
            "<x>(t) = x0 cos t",
            position_error < 3 * discretization,
            f"largest error {position_error:.1e} (discretization)",
        )
    )
    exact_density = np.exp(-((x[None, :] - x0 * np.cos(t)[:, None]) ** 2)) / np.sqrt(np.pi)
    density_error = np.abs(density - exact_density).max()
    checks.append(
        check(
            "density is the moving Gaussian",
            density_error < 3 * discretization,
            f"largest error {density_error:.1e} (discretization)",
        )
    )
    period_error = np.abs(psi[-1] + psi0).max() / np.abs(psi0).max()
    checks.append(
        check(
            "psi(2 pi) = -psi(0)",
            period_error < 5 * discretization,
            f"relative error {period_error:.1e} (discretization)",
        )
    )
    return t, density, mean_x


def plot(path: Path, x, E, states, t, density, mean_x, x0) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(matplotlib is not installed, so no plot: pip install 'jaxdia[plot]')")
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    ax = axes[0]
    ax.plot(x, x**2 / 2, color="black", lw=1)
    for level, state in zip(E[:6], states.T[:6]):
        ax.plot(x, level + 0.4 * state * np.sign(state[np.argmax(np.abs(state))]))
    ax.set(xlim=(-6, 6), ylim=(0, 6.5), xlabel="x", title="eigenstates (eigsh), offset by E_n")
    image = axes[1].imshow(
        density.T, aspect="auto", origin="lower", extent=(t[0], t[-1], x[0], x[-1]), cmap="magma"
    )
    axes[1].set(
        ylim=(-2 * abs(x0), 2 * abs(x0)),
        xlabel="t",
        ylabel="x",
        title="|psi(x, t)|^2 (expm_multiply)",
    )
    fig.colorbar(image, ax=axes[1])
    axes[2].plot(t, mean_x, label="<x>(t), expm_multiply")
    axes[2].plot(t, x0 * np.cos(t), "--", label="x0 cos t")
    axes[2].set(xlabel="t", title="mean position")
    axes[2].legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=90)
    plt.close(fig)
    print(f"wrote {path}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a coarse grid (a quick check)")
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("build/quantum_oscillator.png"),
        help="where to write the plot (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    n, L, levels, times = (400, 8.0, 8, 60) if args.small else (1200, 10.0, 20, 200)
    x0 = 2.0
    H, x, h = hamiltonian(n, L)
    print(f"jaxdia {jaxdia.__version__}, JAX {jax.__version__}; n = {n} points on [-{L}, {L}]")
    print("(times include compilation)")
    checks: list[bool] = []
    E, states = eigenstates(H, x, h, levels, checks)
    t, density, mean_x = coherent_state(H, x, h, x0, times, checks)
    plot(args.out, x, E, states, t, density, mean_x, x0)
    return 0 if all(checks) else 1


if __name__ == "__main__":
    sys.exit(main())
