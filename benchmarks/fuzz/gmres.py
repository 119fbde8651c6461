"""The ``gmres`` family: :func:`jaxdia.gmres` on random nonsymmetric banded matrices
(diagonally dominant, random, graded (ill-conditioned), indefinite, singular) and on
upwinded convection-diffusion stencils, with no preconditioner, Jacobi or ILU(0), either
side, restarts from 1 to beyond ``n``, few or many cycles, the four float and complex
dtypes, batches of ``b`` or of ``A``, eager, jitted or ``vmap``-ed.

A reported convergence must hold: the true residual ``|b - A x|``, recomputed in double
precision, within ``max(rtol |b|, atol)`` (plus the rounding of one product in the
working precision), the reported residual that one, the solution finite and, for
``n <= 200``, its forward error within the condition number times the tolerance. A
report of no convergence is FLAGGED (``unexpected`` where SciPy's gmres, in double
precision with the same restart, preconditioner and cycles, converged on a well
conditioned case).
"""

from __future__ import annotations

import math

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

TIMEOUT = 90.0

KINDS = {"dominant": 3, "random": 2, "graded": 2, "indefinite": 1, "singular": 1, "peclet": 3}


def generate(rng, seed) -> dict:
    kind = pick(rng, KINDS)
    if kind == "peclet":
        nx = int(rng.choice([2, 3, 5, 8, 12]))
        n, offsets = nx * nx, [-nx, -1, 0, 1, nx]
        grid = [nx, nx]
    else:
        n = int(rng.choice([1, 2, 3, 5, 8, 16, 40, 100, 200]))
        lower, upper = (int(k) for k in rng.integers(0, 5, size=2))
        offsets = sorted({0, *range(-lower, 0), *range(1, upper + 1)})
        if rng.random() < 0.2:  # a diagonal beyond the matrix (wider than n)
            offsets = sorted({*offsets, n + 1})
        grid = None
    return {
        "kind": kind,
        "n": n,
        "offsets": offsets,
        "grid": grid,
        "peclet": float(10 ** rng.uniform(-1, 2.7)),
        "dtype": pick(rng, {"float64": 3, "float32": 2, "complex128": 2, "complex64": 1}),
        "precond": pick(rng, {"none": 2, "jacobi": 2, "ilu0": 2}),
        "side": pick(rng, {"right": 3, "left": 1}),
        "restart": int(rng.choice([1, 2, 5, 20, 60])),
        "maxiter": int(rng.choice([2, 20, 200])),
        "rtol": float(rng.choice([1e-3, 1e-6, 1e-10])),
        "atol": float(rng.choice([0.0, 0.0, 1e-12])),
        "batch": pick(rng, {"none": 3, "b": 1, "A": 1}),
        "mode": pick(rng, {"eager": 2, "jit": 1, "vmap": 1}),
        "x0": bool(rng.random() < 0.2),
        "values": int(rng.integers(2**31)),
    }


def _matrices(params, rng, count: int, dtype: np.dtype) -> np.ndarray:
    """``count`` dense ``(n, n)`` matrices of the case's kind, on its offsets."""
    n, offsets, kind = params["n"], params["offsets"], params["kind"]
    matrices = []
    for _ in range(count):
        if kind == "peclet":
            nx = params["grid"][0]
            h = 1.0 / (nx + 1)
            T = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(nx, nx)) / h**2
            B = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(nx, nx)) / h
            wind = rng.uniform(-1, 1, size=2)
            pe = params["peclet"]
            I = sp.eye_array(nx)
            dense = (
                sp.kronsum(T, T) + pe * (wind[0] * sp.kron(B, I) + wind[1] * sp.kron(I, B))
            ).toarray()
        else:
            mask = np.zeros((n, n), bool)
            for k in offsets:
                mask |= np.eye(n, k=k, dtype=bool)
            dense = np.where(mask, random_values(rng, (n, n), dtype), 0)
            width = len(offsets)
            if kind == "dominant":
                dense = dense + 2 * width * np.eye(n)
            elif kind == "graded":
                dense = (dense + 2 * width * np.eye(n)) * np.logspace(0, 8, n)[:, None]
            elif kind == "indefinite":
                dense = dense + np.diag(width * rng.choice([-1.0, 1.0], size=n))
            elif kind == "singular":
                dense[:, int(rng.integers(n))] = 0.0
        matrices.append(dense)
    return np.stack(matrices)


def check(params) -> Result:
    rng = np.random.default_rng(params["values"])
    dtype = np.dtype(DTYPES[params["dtype"]])
    n, offsets = params["n"], params["offsets"]
    count = 2 if params["batch"] != "none" or params["mode"] == "vmap" else 1
    dense = _matrices(params, rng, 2 if params["batch"] == "A" else 1, dtype)
    data = dia_data(dense, offsets, "nan").astype(dtype)
    b = random_values(rng, (count, n), dtype).astype(dtype)
    x0 = random_values(rng, (n,), dtype).astype(dtype) if params["x0"] else None
    rtol, atol, restart, maxiter = (params[k] for k in ("rtol", "atol", "restart", "maxiter"))
    options = {"rtol": rtol, "atol": atol, "restart": restart, "maxiter": maxiter}
    options["side"] = params["side"]
    try:
        A = jaxdia.DiaMatrix(data if params["batch"] == "A" else data[0], offsets, (n, n))
        M = None
        if params["precond"] == "jacobi":
            M = jaxdia.jacobi(A)
        elif params["precond"] == "ilu0":
            M = jaxdia.ilu0(A, params["grid"])
        rhs = b if count > 1 else b[0]
        if params["mode"] == "jit":
            x, info = jax.jit(lambda A, b, M: jaxdia.gmres(A, b, x0, M=M, **options))(A, rhs, M)
        elif params["mode"] == "vmap" and params["batch"] == "A":  # matrices and M too
            x, info = jax.vmap(lambda A, b, M: jaxdia.gmres(A, b, x0, M=M, **options))(A, rhs, M)
        elif params["mode"] == "vmap":
            x, info = jax.vmap(lambda b: jaxdia.gmres(A, b, x0, M=M, **options))(rhs)
        else:
            x, info = jaxdia.gmres(A, rhs, x0, M=M, **options)
        x = np.asarray(x).reshape(count, n)
    except CLEAR_ERRORS as error:
        return raised(error)
    outcome = Outcome()
    converged = np.asarray(info.converged).reshape(count)
    reported = np.asarray(info.residual_norm).reshape(count)
    iterations = np.asarray(info.iterations).reshape(count)
    matrices = dense_of(data, offsets, n)
    matrices = np.broadcast_to(matrices, (count, n, n))
    eps = machine_epsilon(dtype)
    for member in range(count):
        S = matrices[member]
        xm = x[member].astype(wide_dtype(dtype))
        bm = b[member].astype(wide_dtype(dtype))
        true = float(np.linalg.norm(S @ xm - bm))
        slack = 32 * eps * float(np.linalg.norm(abs(S) @ np.abs(xm))) * math.sqrt(len(offsets))
        limit = max(rtol * float(np.linalg.norm(bm)), atol)
        if not bool(converged[member]):
            outcome.add(
                FLAGGED,
                f"not converged ({int(iterations[member])} iterations, residual "
                f"{true / max(float(np.linalg.norm(bm)), 1e-300):.1e} relative)",
                unexpected=_scipy_converges(params, S, bm, x0, M, dtype, member),
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
        cond = condition_number(S)
        if n <= 200 and math.isfinite(cond):
            reference = np.linalg.solve(S, bm)
            error = np.linalg.norm(xm - reference) / max(np.linalg.norm(reference), 1e-300)
            relative = limit / max(float(np.linalg.norm(bm)), 1e-300)
            if error > 10 * cond * (relative + 32 * eps) + 1e-12:
                outcome.add(FAIL, f"forward error {error:.1e} exceeds cond {cond:.1e} x rtol")
    return outcome.result()


def _scipy_converges(params, S, b, x0, M, dtype, member) -> bool:
    """Whether SciPy's gmres (double precision, the same restart, cycles, ``M``) meets the
    tolerance on a well-conditioned case: then jaxdia's not converging is unexpected."""
    if condition_number(S) > 1e6 or params["side"] == "left":
        return False
    if machine_epsilon(dtype) > 1e-10 and params["rtol"] < 1e-5:
        return False
    operator = None
    if M is not None:
        wide = wide_dtype(dtype)

        def apply(v):
            out = np.array(M(np.asarray(v, dtype)), wide)
            return out[member] if out.ndim == 2 else out

        operator = spla.LinearOperator(S.shape, matvec=apply, dtype=wide)
    _, flag = spla.gmres(
        S,
        b,
        x0=None if x0 is None else np.asarray(x0, b.dtype),
        M=operator,
        rtol=params["rtol"],
        atol=params["atol"],
        restart=params["restart"],
        maxiter=params["maxiter"],
    )
    return flag == 0
