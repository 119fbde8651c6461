"""The fuzzer's ``multigrid`` family: ``multigrid(A, grid, ...)`` with its options as ``M`` of
``cg`` or ``bicgstab`` on Poisson, anisotropic, variable-coefficient, complex-shifted and
convection-diffusion problems; a reported convergence must hold (the true residual,
recomputed by SciPy) and the answer must match ``spsolve``.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

from .core import (
    CLEAR_ERRORS,
    DTYPES,
    FAIL,
    FLAGGED,
    Outcome,
    Result,
    condition_number,
    dense_of,
    dia_data,
    judge_converged,
    machine_epsilon,
    pick,
    raised,
    random_values,
    wide_dtype,
)
from .grids import STENCILS, stencil_matrix

#: Seconds a case may take (compilation included) before its worker is killed.
TIMEOUT = 60.0


MG_AXES = {
    1: [1, 2, 3, 5, 8, 17, 33, 64, 100, 257],
    2: [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64],
    3: [1, 2, 3, 4, 5, 8, 9, 16],
}


def generate(rng, seed: int) -> dict:
    dim = int(pick(rng, {1: 1, 2: 4, 3: 3}))
    grid = [int(rng.choice(MG_AXES[dim])) for _ in range(dim)]
    points = int(rng.choice(STENCILS[dim]))
    problem = pick(
        rng,
        {
            "poisson": 4,
            "anisotropic": 2,
            "varcoef": 3,
            "complex_shift": 1.5,
            "complex_herm": 1,
            "convdiff": 1.5,
        },
    )
    if problem == "anisotropic":
        points = {1: 3, 2: 5, 3: 7}[dim]
    complex_ = problem.startswith("complex")
    dtype = pick(
        rng, {"complex128": 3, "complex64": 1} if complex_ else {"float64": 3, "float32": 2}
    )
    smoother = pick(rng, {"default": 5, "chebyshev": 1, "jacobi": 1.5, "ilu": 1.5})
    if complex_ and smoother == "chebyshev" and rng.random() < 0.8:
        smoother = "jacobi"
    coarsening: Any = pick(rng, {"full": 4, "auto": 3, "plan": 1})
    if coarsening == "plan":
        coarsening = [
            sorted(int(a) for a in rng.choice(dim, int(rng.integers(1, dim + 1)), replace=False))
            for _ in range(int(rng.integers(1, 4)))
        ]
    symmetric = problem in ("poisson", "anisotropic", "varcoef", "complex_herm")
    solver = "cg" if symmetric and smoother != "ilu" and rng.random() < 0.85 else "bicgstab"
    return {
        "grid": grid,
        "points": points,
        "problem": problem,
        "dtype": dtype,
        "smoother": smoother,
        "sweeps": int(pick(rng, {1: 1, 2: 3, 3: 1})),
        "coarsening": coarsening,
        "max_coarse": pick(rng, {"none": 5, 1: 1, 2: 0.5, 10: 1, 50: 0.5, 4096: 0.3}),
        "max_levels": pick(rng, {"none": 5, 1: 1, 2: 1, 3: 0.5}),
        "hierarchy_dtype": pick(rng, {"none": 5, "lower": 1}),
        "solver": solver,
        "mode": pick(rng, {"eager": 5, "jit": 2, "setup_jit": 1, "batched": 1}),
    }


def check(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    grid = tuple(params["grid"])
    dtype = np.dtype(DTYPES[params["dtype"]])
    count = 2 if params["mode"] == "batched" else 1
    dense, offsets = stencil_matrix(rng, grid, params["points"], params["problem"], dtype, count)
    n = dense.shape[-1]
    data = dia_data(dense, offsets, "nan").astype(dtype)
    hierarchy = None
    if params["hierarchy_dtype"] == "lower":
        hierarchy = np.complex64 if dtype.kind == "c" else np.float32
    options: dict[str, Any] = {"sweeps": params["sweeps"], "dtype": hierarchy}
    if params["smoother"] != "default":
        options["smoother"] = params["smoother"]
    coarsening = params["coarsening"]
    options["coarsening"] = (
        [tuple(c) for c in coarsening] if isinstance(coarsening, list) else coarsening
    )
    if params["max_coarse"] != "none":
        options["max_coarse"] = int(params["max_coarse"])
    if params["max_levels"] != "none":
        options["max_levels"] = int(params["max_levels"])
    precision = np.dtype(hierarchy) if hierarchy is not None else dtype
    rtol = 1e-8 if machine_epsilon(dtype) < 1e-10 else 1e-4
    maxiter = 300
    solve = jaxdia.cg if params["solver"] == "cg" else jaxdia.bicgstab
    b = random_values(rng, (count, n) if count > 1 else (n,), dtype).astype(dtype)
    A_data = data if count > 1 else data[0]
    try:
        A = jaxdia.DiaMatrix(A_data, offsets, (n, n))
        if params["mode"] == "setup_jit":

            def run(d, b):
                A = jaxdia.DiaMatrix(d, offsets, (n, n))
                return solve(
                    A, b, M=jaxdia.multigrid(A, grid, **options), rtol=rtol, maxiter=maxiter
                )

            x, info = jax.jit(run)(A_data, b)
        else:
            M = jaxdia.multigrid(A, grid, **options)
            if params["mode"] == "jit":
                x, info = jax.jit(lambda A, b, M: solve(A, b, M=M, rtol=rtol, maxiter=maxiter))(
                    A, b, M
                )
            else:
                x, info = solve(A, b, M=M, rtol=rtol, maxiter=maxiter)
        x = np.asarray(x)
    except CLEAR_ERRORS as error:
        return raised(error)
    outcome = Outcome()
    converged = np.asarray(info.converged).reshape(count)
    reported = np.asarray(info.residual_norm).reshape(count)
    iterations = np.asarray(info.iterations).reshape(count)
    xs = x.reshape(count, n)
    bs = np.asarray(b).reshape(count, n)
    dense = dense_of(data, offsets, n)
    eps = max(machine_epsilon(dtype), machine_epsilon(precision))
    for member in range(count):
        S = sp.csr_array(dense[member])
        xm = xs[member].astype(wide_dtype(dtype))
        bm = bs[member].astype(wide_dtype(dtype))
        true = float(np.linalg.norm(S @ xm - bm))
        slack = (
            32
            * machine_epsilon(dtype)
            * float(np.linalg.norm(abs(S) @ np.abs(xm)))
            * math.sqrt(len(offsets))
        )
        limit = rtol * float(np.linalg.norm(bm))
        if not bool(converged[member]):
            spd = params["problem"] in ("poisson", "anisotropic", "varcoef", "complex_herm")
            expected_ok = spd and params["solver"] == "cg" and params["smoother"] != "ilu"
            outcome.add(
                FLAGGED,
                f"not converged ({int(iterations[member])} iterations, residual "
                f"{true / max(np.linalg.norm(bm), 1e-300):.1e} relative)",
                unexpected=expected_ok,
            )
            continue
        if not judge_converged(
            outcome,
            solution=xm,
            true=true,
            limit=limit,
            slack=slack,
            reported=float(reported[member]),
        ):
            continue
        if n <= 600:  # the forward error against spsolve, within the condition number
            reference = spla.spsolve(sp.csc_array(dense[member]), bm)
            cond = condition_number(dense[member])
            error = np.linalg.norm(xm - reference) / max(np.linalg.norm(reference), 1e-300)
            if error > 10 * cond * (rtol + 32 * eps) + 1e-12:
                outcome.add(
                    FAIL,
                    f"forward error {error:.1e} against spsolve exceeds cond {cond:.1e} x rtol",
                )
    return outcome.result()
