"""The fuzzer's ``sharded`` family: ``shard(A, mesh, axis)`` products, ``cg`` with
Jacobi/Chebyshev and ``multigrid`` on 2, 4 or 8 fake CPU devices against the single-device
results (its worker process starts with ``--xla_force_host_platform_device_count=8``).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

import jaxdia

from .banded import band_matrix
from .core import (
    CLEAR_ERRORS,
    DTYPES,
    FAIL,
    FLAGGED,
    PASS,
    Outcome,
    Result,
    dense_of,
    dia_data,
    machine_epsilon,
    pick,
    raised,
    random_values,
    wide_dtype,
)
from .grids import STENCILS, stencil_matrix

#: Seconds a case may take (compilation included) before its worker is killed.
TIMEOUT = 120.0


def generate(rng, seed: int) -> dict:
    devices = int(rng.choice([2, 4, 8]))
    op = pick(rng, {"matvec": 3, "matmat": 1, "cg_jacobi": 2, "cg_chebyshev": 1, "multigrid": 2})
    if op == "multigrid":
        dim = int(rng.choice([2, 3]))
        grid = [devices * int(rng.choice([1, 2, 4]))] + [
            int(rng.choice([1, 2, 3, 5, 8, 16])) for _ in range(dim - 1)
        ]
        n, offsets = int(np.prod(grid)), []
    else:
        grid = []
        n = int(rng.choice([1, 2, 3, 7, 8, 9, 16, 17, 33, 64, 100, 257]))
        width = int(rng.choice([1, 2, 3, 5, 9, 20]))
        offsets = sorted(
            {0, *(int(k) for k in rng.integers(-width, width + 1, int(rng.integers(1, 5))))}
        )
    dtype = pick(
        rng,
        {"float64": 3, "float32": 2, "complex128": 1}
        if op.startswith("mat")
        else {"float64": 3, "float32": 1},
    )
    return {
        "max_coarse": pick(rng, {"none": 1, 1: 1, 8: 2, 64: 1}),
        "gather_below": pick(rng, {"none": 2, 1: 1, 16: 1}),
        "smoother": pick(rng, {"default": 2, "jacobi": 1}),
        "deep_halo": bool(rng.random() < 0.3),
        "devices": devices,
        "op": op,
        "n": n,
        "offsets": offsets,
        "grid": grid,
        "points": int(rng.choice(STENCILS[len(grid)])) if grid else 0,
        "dtype": dtype,
        "axis_type": pick(rng, {"explicit": 1, "auto": 1}),
        "columns": int(rng.integers(1, 4)),
    }


def check(params: dict) -> Result:
    from jax.sharding import AxisType

    if jax.device_count() < params["devices"]:
        return Result(
            FLAGGED,
            f"needs {params['devices']} devices, has {jax.device_count()} "
            "(run the sharded family through the worker)",
            unexpected=True,
        )
    rng = np.random.default_rng(params["values"])
    dtype = np.dtype(DTYPES[params["dtype"]])
    axis_type = AxisType.Explicit if params["axis_type"] == "explicit" else AxisType.Auto
    mesh = jax.make_mesh(
        (params["devices"],),
        ("x",),
        axis_types=(axis_type,),
        devices=jax.devices()[: params["devices"]],
    )
    op = params["op"]
    if op == "multigrid":
        grid = tuple(params["grid"])
        dense, offsets = stencil_matrix(rng, grid, params["points"], "varcoef", dtype)
        dense = dense[0]
    else:
        n, offsets = params["n"], tuple(params["offsets"])
        dense, _ = band_matrix(rng, n, offsets, "dominant", dtype, 0)
        dense = dense[0]
        if op.startswith("cg"):  # symmetric positive definite
            dense = dense + np.conj(dense.T)
            dense[np.diag_indices(n)] = np.abs(dense).sum(1) + 1.0
            offsets = tuple(sorted({*offsets, *(-k for k in offsets)}))
    n = dense.shape[0]
    offsets = tuple(k for k in offsets if -n < k < n) or (0,)
    data = dia_data(dense, offsets, "nan").astype(dtype)
    A = jaxdia.DiaMatrix(data, offsets, (n, n))
    eps = machine_epsilon(dtype)
    try:
        S = jaxdia.shard(A, mesh, "x")
        if op in ("matvec", "matmat"):
            shape = (n,) if op == "matvec" else (n, params["columns"])
            x = random_values(rng, shape, dtype).astype(dtype)
            y = np.asarray(S.unshard_vector(S @ S.shard_vector(x)))
            want = dense_of(data, offsets, n) @ x.astype(wide_dtype(dtype))
            scale = np.abs(dense_of(data, offsets, n)) @ np.abs(x.astype(wide_dtype(dtype)))
            error = float(np.max(np.abs(y - want) / (scale + 1e-300), initial=0))
            tol = 16 * eps * len(offsets)
            if error > tol:
                return Result(
                    FAIL,
                    f"sharded product differs from SciPy's by {error:.1e} relative",
                    error / tol,
                )
            return Result(PASS, "", error / tol)
        b = random_values(rng, (n,), dtype).astype(dtype)
        rtol = 1e-8 if eps < 1e-10 else 1e-4

        def preconditioner(M_of, matrix):
            return M_of(matrix)

        if op == "multigrid":
            options: dict[str, Any] = {}
            if params["max_coarse"] != "none":
                options["max_coarse"] = int(params["max_coarse"])
            if params["smoother"] != "default":
                options["smoother"] = params["smoother"]
            sharded_options = dict(options, deep_halo=params["deep_halo"])
            if params["gather_below"] != "none":
                sharded_options["gather_below"] = int(params["gather_below"])
            M_sharded = jaxdia.multigrid(S, tuple(params["grid"]), **sharded_options)
            M_single = jaxdia.multigrid(A, tuple(params["grid"]), **options)
        elif op == "cg_chebyshev":
            M_sharded, M_single = jaxdia.chebyshev(S, 8), jaxdia.chebyshev(A, 8)
        else:
            M_sharded, M_single = jaxdia.jacobi(S), jaxdia.jacobi(A)
        x_single, info_single = jaxdia.cg(A, b, M=M_single, rtol=rtol, maxiter=500)
        x_sharded, info_sharded = jaxdia.cg(
            S, S.shard_vector(b), M=M_sharded, rtol=rtol, maxiter=500
        )
        x_sharded = np.asarray(S.unshard_vector(x_sharded))
    except CLEAR_ERRORS as error:
        return raised(error)
    outcome = Outcome()
    true = float(
        np.linalg.norm(dense_of(data, offsets, n) @ x_sharded.astype(wide_dtype(dtype)) - b)
    )
    limit = rtol * float(np.linalg.norm(b)) * (1 + 1e-3) + 64 * eps * float(
        np.linalg.norm(np.abs(dense_of(data, offsets, n)) @ np.abs(x_sharded))
    )
    if bool(info_sharded.converged) and true > limit:
        outcome.add(FAIL, f"sharded cg reports convergence, true residual {true:.1e} > {limit:.1e}")
    elif not bool(info_sharded.converged):
        outcome.add(FLAGGED, "sharded cg did not converge", unexpected=bool(info_single.converged))
    it_s, it_1 = int(info_sharded.iterations), int(info_single.iterations)
    if abs(it_s - it_1) > max(2, 0.1 * it_1):
        outcome.add(FAIL, f"sharded cg took {it_s} iterations, single-device {it_1}")
    difference = float(np.linalg.norm(x_sharded - np.asarray(x_single))) / max(
        float(np.linalg.norm(np.asarray(x_single))), 1e-300
    )
    if bool(info_sharded.converged) and bool(info_single.converged) and difference > 1e3 * rtol:
        outcome.add(FAIL, f"sharded and single-device solutions differ by {difference:.1e}")
    outcome.add(PASS)
    return outcome.result()
