"""The ``ivp`` family: ``jaxdia.solve_ivp`` (BDF) on random stable stiff linear banded
systems ``y' = A y + f`` with known solutions.

``A`` is banded (bandwidths 0-3 each side, sometimes the periodic corners ``±(n - 1)``),
with a negative diagonal spread over up to 6 decades and off-diagonals small enough for
Gershgorin's discs to stay left of the axis (stable, stiff up to 1e6); the solution is
``exp(A t) (y0 + A^-1 f) - A^-1 f`` (``scipy.linalg.expm``, n <= 12). Tolerances are drawn
(``rtol`` 1e-10 .. 1e-2, float32 above 1e-4), ``t_eval`` random, the call eager, jitted
or ``vmap``-ed over two initial values, the Jacobian by ``jac_offsets`` or a ``jac``, the
linear solver banded LU, ILU(0)-preconditioned BiCGStab or a multigrid V-cycle's (on the
grid ``(n,)``, for a tridiagonal ``A``).

Verdicts: the global error in units of the tolerance (``|y - exact| / (atol + rtol
|exact|)``) is compared with SciPy's ``solve_ivp(method="BDF")`` on the same case:
PASS within ``max(1e3, 10x SciPy's)``; a success beyond it is FAIL, and so is a NaN or
a count of steps over 3x SciPy's; a reported failure (status < 0) is FLAGGED
(unexpected: these problems are well posed).
"""

from __future__ import annotations

import time
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate
import scipy.linalg

import jaxdia

from .core import FAIL, FLAGGED, PASS, Outcome, Result

TIMEOUT = 180.0


def generate(rng: np.random.Generator, seed: int) -> dict:
    del seed
    n = int(rng.choice([1, 2, 3, 5, 8, 12]))
    dtype = "float32" if rng.random() < 0.2 else "float64"
    low = -4 if dtype == "float32" else -10
    rtol = float(10 ** rng.uniform(low, -2))
    return {
        "n": n,
        "lower": int(rng.integers(0, 4)),
        "upper": int(rng.integers(0, 4)),
        "periodic": bool(rng.random() < 0.2),
        "decades": float(rng.uniform(0, 6)),
        "coupling": float(rng.uniform(0, 0.9)),
        "forcing": bool(rng.random() < 0.5),
        "t_end": float(10 ** rng.uniform(-1, 1)),
        "evals": int(rng.integers(1, 6)),
        "rtol": rtol,
        "atol": float(rtol * 10 ** rng.uniform(-3, 0)),
        "dtype": dtype,
        "mode": str(rng.choice(["eager", "jit", "vmap"])),
        "jacobian": str(rng.choice(["offsets", "jac"])),
        "values": int(rng.integers(0, 2**31)),
        # Drawn last, so that the draws above (and the cases tests/test_fuzz.py pins) stay.
        "solver": str(rng.choice(["banded", "banded", "bicgstab", "multigrid"])),
    }


def _problem(params: dict) -> tuple[np.ndarray, tuple[int, ...], np.ndarray, np.ndarray]:
    """``(A, offsets, f, y0s)``: the matrix, its diagonals, the forcing, two initial values."""
    rng = np.random.default_rng(params["values"])
    n = params["n"]
    offsets = set(range(-min(params["lower"], n - 1), min(params["upper"], n - 1) + 1))
    if params["periodic"] and n > 2:
        offsets |= {-(n - 1), n - 1}
    offsets = tuple(sorted(offsets))
    diagonal = -np.geomspace(1.0, 10 ** params["decades"], n)
    rng.shuffle(diagonal)
    A = np.zeros((n, n))
    for offset in offsets:
        if offset:
            rows = np.arange(max(0, -offset), min(n, n - offset))
            A[rows, rows + offset] = rng.uniform(-1, 1, rows.size)
    # Scale each row's off-diagonals below coupling * |a_ii|: Gershgorin keeps it stable.
    sums = np.abs(A).sum(axis=1)
    A *= (params["coupling"] * np.abs(diagonal) / np.where(sums > 0, sums, 1))[:, None]
    A[np.arange(n), np.arange(n)] = diagonal
    f = rng.standard_normal(n) if params["forcing"] else np.zeros(n)
    return A, offsets, f, rng.standard_normal((2, n))


def _exact(A: np.ndarray, f: np.ndarray, y0: np.ndarray, times: np.ndarray) -> np.ndarray:
    shift = np.linalg.solve(A, f)
    return np.stack([scipy.linalg.expm(A * t) @ (y0 + shift) - shift for t in times], 1)


def check(params: dict) -> Result:
    A, offsets, f, y0s = _problem(params)
    n, dtype = params["n"], np.dtype(params["dtype"])
    rng = np.random.default_rng(params["values"] + 1)
    t_end = params["t_end"]
    times = np.sort(rng.uniform(0, t_end, params["evals"]))
    times[-1] = t_end
    rtol, atol = params["rtol"], params["atol"]
    A_j, f_j = jnp.asarray(A, dtype), jnp.asarray(f, dtype)

    def fun(t, y):
        return A_j @ y + f_j

    data = np.zeros((len(offsets), n))
    for k, offset in enumerate(offsets):
        columns = np.arange(max(0, offset), min(n, n + offset))
        data[k, columns] = A[columns - offset, columns]
    J = jaxdia.DiaMatrix(jnp.asarray(data, dtype), offsets, (n, n))
    options: dict[str, Any] = (
        {"jac_offsets": offsets} if params["jacobian"] == "offsets" else {"jac": lambda t, y: J}
    )
    solver = params.get("solver", "banded")
    if solver == "multigrid" and max(abs(k) for k in offsets) > 1:
        solver = "bicgstab"  # a multigrid needs a stencil: offsets -1 .. 1 on the grid (n,)
    options["linear_solver"] = solver
    if solver == "multigrid":
        options["grid"] = (n,)

    def solve(y0):
        return jaxdia.solve_ivp(
            fun, (0.0, t_end), y0, t_eval=times, rtol=rtol, atol=atol, max_steps=20_000, **options
        )

    start = time.perf_counter()
    inputs = jnp.asarray(y0s, dtype)
    if params["mode"] == "vmap":
        results = jax.vmap(jax.jit(solve))(inputs)
        members = [jax.tree.map(lambda leaf, i=i: leaf[i], results) for i in range(2)]
    elif params["mode"] == "jit":
        members = [jax.jit(solve)(inputs[0])]
    else:
        members = [solve(inputs[0])]
    seconds = time.perf_counter() - start

    outcome = Outcome()
    floor = 100 * float(np.finfo(dtype).eps)
    for i, result in enumerate(members):
        exact = _exact(A, f, y0s[i].astype(dtype).astype(np.float64), times)
        tolerance = atol + max(rtol, floor) * np.abs(exact)
        if int(result.status) < 0:
            outcome.add(FLAGGED, f"status {int(result.status)}: {result.message}", unexpected=True)
            continue
        y = np.asarray(result.y, np.float64)
        if not np.all(np.isfinite(y)):
            outcome.add(FAIL, "success with a non-finite solution")
            continue
        ratio = float(np.max(np.abs(y - exact) / tolerance))
        theirs = scipy.integrate.solve_ivp(
            lambda t, y: A @ y + f,
            (0.0, t_end),
            y0s[i],
            method="BDF",
            t_eval=times,
            rtol=max(rtol, floor),
            atol=atol,
            jac=A,
        )
        scipy_ratio = float(np.max(np.abs(theirs.y - exact) / tolerance))
        bound = max(1e3, 10 * scipy_ratio)
        steps = int(result.nsteps)
        scipy_steps = max(1, int(theirs.nfev))  # a bound: each step evaluates at least once
        if ratio > bound:
            outcome.add(
                FAIL,
                f"success with error {ratio:.3g} x tolerance (SciPy's BDF {scipy_ratio:.3g})",
                ratio,
            )
        elif steps > 3 * scipy_steps + 10:
            outcome.add(FAIL, f"{steps} steps where SciPy evaluated f {scipy_steps} times", ratio)
        else:
            outcome.add(PASS, ratio=ratio)
    result = outcome.result()
    result.seconds = seconds
    return result
