"""A differential fuzzer for jaxdia's solve side, against NumPy, SciPy and JAX's dense
Jacobians.

Families (``--family``):

* ``banded``: ``solve_banded``, ``lu_factor(...).solve`` (``trans`` 0, 1, 2),
  ``factorized``, ``cho_factor``/``cho_solve`` (either triangle, garbage in the other),
  ``solveh_banded`` and lineax's ``BandedSolver``; each implementation of the factors
  (``"auto"``, LAPACK on the host, ``lax.scan``, cyclic reduction), eager, jitted,
  ``vmap``-ed and batched; n from 0 to 600, bands wider than n and offsets out of range,
  the four float and complex dtypes (and 16-bit ones), right-hand sides of other dtypes;
  diagonally dominant, random, pivoting, graded (ill-conditioned), singular and
  non-finite matrices.
* ``periodic``: bands plus corner diagonals (periodic stencils of half-width 1-3, one or
  both corners), small n where the corners overlap the band, bands that are singular or
  badly conditioned while the whole matrix is not, singular periodic Laplacians.
* ``ilu``: ``ilu0``/``ic0`` on 3-, 5-, 9-, 7- and 27-point stencils on grids whose axes
  are 1..5 (any position) and a few larger, with every ``order``, ``method``, ``solves``
  and ``shift``, against a NumPy textbook (IKJ) ILU(0)/IC(0) on the documented pattern
  (the stored diagonals, restricted to grid neighbours when a grid is given).
* ``multigrid``: ``multigrid(A, grid, ...)`` with its options as ``M`` of ``cg`` or
  ``bicgstab`` on Poisson, anisotropic, variable-coefficient, complex-shifted and
  convection-diffusion problems; a reported convergence must hold (the true residual,
  recomputed by SciPy) and the answer must match ``spsolve``.
* ``jacobian``: ``jacobian``/``value_and_jacobian`` in both modes, with masks, chunks,
  ``argnums``, ``has_aux``, ``jit``, ``vmap``, real and complex functions and arguments,
  against ``jax.jacfwd``; ``check=True`` on a function whose Jacobian leaves the
  pattern must raise.
* ``sharded``: ``shard(A, mesh, axis)`` products, ``cg`` with Jacobi/Chebyshev and
  ``multigrid`` on 2, 4 or 8 fake CPU devices against the single-device results (its
  worker process starts with ``--xla_force_host_platform_device_count=8``).

Each case is drawn from ``numpy.random.default_rng([seed, family, index])`` and is
described by a JSON dict of parameters; its verdict is

* ``PASS``: accurate to a condition-aware tolerance (the normwise backward error of a
  solve, the residual a solver reports, the entries of a factor or a Jacobian);
* ``FLAGGED``: the API reported failure (``info != 0``, ``ok`` false, a NaN solution,
  ``converged`` false, or a ``ValueError``/``TypeError``/``LinAlgError``); tagged
  ``unexpected`` where the case is well posed and well conditioned;
* ``FAIL``: a wrong answer reported as a success, a crash, a hang (each case runs in a
  worker process under a timeout) or an exception of an unclear type.

Every FAIL prints a one-line reproducer. Not run by the tests: ``tests/test_fuzz.py``
runs a fixed slice of it.

    PYTHONPATH=. .venv/bin/python benchmarks/fuzz_solve.py --cases 200 --seed 0 \\
        --family all|banded|periodic|ilu|multigrid|jacobian|sharded [--quick]
    PYTHONPATH=. .venv/bin/python benchmarks/fuzz_solve.py --family banded --seed 0 \\
        --index 17             # one case again, in this process, with its details
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import importlib
import json
import math
import os
import select
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# this checkout's jaxdia (not an installed one), and benchmarks/fuzz/ as the package `fuzz`
for _path in (ROOT, ROOT / "benchmarks"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from fuzz.core import (  # noqa: E402
    CLEAR_ERRORS,
    DTYPES,
    FAIL,
    FLAGGED,
    PASS,
    Case,
    Outcome,
    Result,
    backward_error,
    condition_number,
    dense_of,
    dia_data,
    machine_epsilon,
    pick,
    raised,
    random_values,
    wide_dtype,
)

import jaxdia  # noqa: E402
from jaxdia._linalg import banded as _banded  # noqa: E402

#: The families defined in this file, then those in modules of their own
#: (``benchmarks/fuzz/<family>.py``, see ``fuzz/core.py``). Append only: a family's position
#: seeds its cases.
BUILTIN_FAMILIES = ("banded", "periodic", "ilu", "multigrid", "jacobian", "sharded")
MODULE_FAMILIES: tuple[str, ...] = ("logdet",)
FAMILIES = BUILTIN_FAMILIES + MODULE_FAMILIES
#: Seconds a case may take (compilation included) before its worker is killed.
TIMEOUTS = {"multigrid": 60.0, "sharded": 120.0}
DEFAULT_TIMEOUT = 60.0


# -- cases ------------------------------------------------------------------------------------


def generate(family: str, seed: int, index: int) -> Case:
    """Case ``index`` of ``family`` for ``seed`` (reproducible)."""
    rng = np.random.default_rng([seed, FAMILIES.index(family), index])
    params = GENERATORS[family](rng, seed)
    params["values"] = int(rng.integers(2**31))
    return Case(family, seed, index, params)


def run_case(case: Case) -> Result:
    """Runs one case in this process and classifies it (never raises)."""
    start = time.perf_counter()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = CHECKS[case.family](case.params)
    except Exception as error:  # an unclear library error, or the harness's own bug
        result = raised(error, unexpected=True)
    result.seconds = time.perf_counter() - start
    return result


# -- banded and periodic solves ---------------------------------------------------------------

SMALL_N = [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 17, 20, 31, 32, 33, 48, 64]
LARGE_N = [100, 129, 257, 600]
#: ``(lower, upper)`` band widths; "n" stands for the matrix size.
BANDS = {
    (0, 0): 1,
    (1, 1): 6,
    (1, 0): 2,
    (0, 1): 2,
    (2, 1): 3,
    (1, 2): 3,
    (2, 2): 4,
    (3, 3): 2,
    (0, 3): 1,
    (4, 0): 1,
    (5, 7): 1,
    ("n-1", "n-1"): 1,
    ("n", 2): 1,
    ("n+2", "n+2"): 1,
}
LU_APIS = {
    "solve_banded": 5,
    "lu_solve0": 4,
    "lu_solve1": 2,
    "lu_solve2": 2,
    "factorized": 1,
    "lineax": 1,
}
CHO_APIS = {"cho_solve_upper": 2, "cho_solve_lower": 2, "solveh_banded": 1, "lineax_pd": 0.5}
METHODS = {"auto": 4, "host": 2, "scan": 2, "parallel": 2}
MODES = {"eager": 4, "jit": 3, "batched": 2, "vmap_both": 1, "vmap_A": 0.5, "vmap_b": 0.5}
BATCHES = {1: 1, 2: 2, 3: 2, 8: 2, 9: 1, 64: 1}


def _width(value, n: int) -> int:
    if isinstance(value, int):
        return value
    return {"n-1": n - 1, "n": n, "n+2": n + 2}[value]


def _structure_pool(seed: int, family: str, size: int = 48) -> list[tuple[int, tuple[int, ...]]]:
    """The ``(n, offsets)`` structures a run of ``family`` draws from: a pool per seed, so
    that compiled programs are reused by many cases (compilation dominates a case)."""
    rng = np.random.default_rng([seed, FAMILIES.index(family), 2**20])
    pool = []
    for _ in range(size):
        n = int(rng.choice(LARGE_N)) if rng.random() < 0.1 else int(rng.choice(SMALL_N))
        if rng.random() < 0.01:
            n = 0
        lower, upper = pick(rng, {k: v for k, v in BANDS.items()})
        lower, upper = _width(lower, n), _width(upper, n)
        offsets = list(range(-lower, upper + 1))
        if len(offsets) > 2 and rng.random() < 0.3:  # a gap in the band
            gap = int(rng.choice([k for k in offsets if k != 0] or [0]))
            offsets.remove(gap)
        if rng.random() < 0.03 and len(offsets) > 1:  # no main diagonal
            offsets.remove(0)
        if rng.random() < 0.1:  # a diagonal outside the matrix (dropped by DiaMatrix)
            offsets.append(int(rng.choice([n, n + 3, -n, -n - 5])))
        offsets = list(dict.fromkeys(offsets))
        rng.shuffle(offsets)  # any order: DiaMatrix sorts them
        pool.append((n, tuple(int(k) for k in offsets)))
    return pool


def gen_banded(rng, seed: int) -> dict:
    n, offsets = _structure_pool(seed, "banded")[int(rng.integers(48))]
    cholesky = rng.random() < 0.25
    api = pick(rng, CHO_APIS if cholesky else LU_APIS)
    if cholesky:
        matrix = pick(rng, {"spd": 6, "spd_graded": 2, "indefinite": 1, "nonfinite": 0.3})
    else:
        matrix = pick(
            rng,
            {
                "dominant": 8,
                "random": 4,
                "pivoting": 2,
                "graded": 2,
                "singular": 1.5,
                "nonfinite": 0.3,
            },
        )
    dtype = pick(
        rng,
        {
            "float64": 7,
            "float32": 5,
            "complex128": 4,
            "complex64": 3,
            "float16": 0.5,
            "bfloat16": 0.3,
        },
    )
    if api.startswith("lineax") and dtype in ("float16", "bfloat16"):
        dtype = "float32"
    return _solve_params(rng, n, offsets, api, matrix, dtype)


def _solve_params(rng, n, offsets, api, matrix, dtype) -> dict:
    mode = pick(rng, MODES)
    if api.startswith("lineax"):
        mode = pick(rng, {"eager": 2, "jit": 1})
    batch = int(pick(rng, BATCHES)) if mode != "eager" and mode != "jit" else 0
    if batch == 64 and n > 64:
        batch = 8
    rhs = pick(rng, {"vector": 5, "matrix": 3, "stack": 1})
    if api.startswith("lineax") or mode.startswith("vmap"):
        rhs = pick(rng, {"vector": 3, "matrix": 1}) if not api.startswith("lineax") else "vector"
    rhs_dtype = pick(rng, {"same": 17, "complex": 2, "wider": 1})
    if api.startswith("lineax"):
        # lineax refuses a vector whose dtype differs from the operator's (its own
        # "structures do not match" ValueError, before the solver runs).
        rhs_dtype = "same"
    return {
        "n": n,
        "offsets": list(offsets),
        "api": api,
        "matrix": matrix,
        "dtype": dtype,
        "method": pick(rng, METHODS),
        "mode": mode,
        "batch": batch,
        "rhs": rhs,
        "columns": int(rng.integers(1, 4)),
        "rhs_dtype": rhs_dtype,
        "padding": pick(rng, {"nan": 3, "garbage": 1, "zero": 1}),
        "zero_rhs": bool(rng.random() < 0.03),
    }


def _band_matrix(rng, n: int, offsets, kind: str, dtype, batch: int):
    """``(dense, expected)`` of ``batch or 1`` random matrices of ``kind`` on the in-bounds
    ``offsets``: ``expected`` is "ok" (well conditioned), "flag" (singular or non-finite:
    the API must report it) or "any"."""
    count = max(batch, 1)
    inside = sorted(k for k in offsets if -n < k < n)
    dense = np.zeros((count, n, n), wide_dtype(dtype))
    rows = np.arange(n)
    for k in inside:
        r = rows[max(0, -k) : n - max(0, k)]
        dense[:, r, r + k] = random_values(rng, (count, len(r)), dtype)
    expected = "any"
    if kind in ("dominant", "graded", "singular", "nonfinite", "pivoting"):
        if 0 in inside:
            diag = dense[:, rows, rows]
            dense[:, rows, rows] = diag + (2 * len(inside) + 1) * np.where(diag.real < 0, -1, 1)
            expected = "ok"
        if kind == "pivoting" and 0 in inside and len(inside) > 1:
            # Zero (or tiny) pivots where the unpivoted LU would divide by them.
            which = rng.random(n) < 0.5
            dense[:, rows[which], rows[which]] *= 1e-9 if rng.random() < 0.5 else 0.0
            expected = "any"
    if kind == "graded" and n:
        exponents = rng.uniform(0, 6 if jnp.finfo(dtype).bits > 32 else 3, (2, count, n))
        dense = dense * 10.0 ** exponents[0][..., :, None] * 10.0 ** -exponents[1][..., None, :]
        expected = "any"
    if kind == "singular" and n:
        j = int(rng.integers(n))
        # all members of a batch, or only the first (the others must stay accurate)
        members = slice(None) if count == 1 or rng.random() < 0.5 else slice(0, 1)
        if rng.random() < 0.5:
            dense[members, :, j] = 0  # a zero column
        else:
            dense[members, j, :] = 0  # a zero row
        expected = "flag"
    if kind == "nonfinite" and n and inside:
        k = inside[int(rng.integers(len(inside)))]
        i = int(rng.integers(max(0, -k), n - max(0, k)))
        dense[0, i, i + k] = np.nan if rng.random() < 0.5 else np.inf
        expected = "flag"
    return dense, expected


def _hermitian_band(rng, n: int, offsets, kind: str, dtype, batch: int, lower: bool):
    """``(stored, hermitian, expected)``: matrices whose triangle ``lower`` selects defines a
    Hermitian matrix of ``kind`` (positive definite, graded, indefinite, non-finite), with
    random garbage in the other triangle and, for complex dtypes, in the imaginary part of
    the diagonal (neither may be read)."""
    count = max(batch, 1)
    inside = sorted(k for k in offsets if -n < k < n)
    read = [k for k in inside if (k <= 0 if lower else k >= 0)]
    rows = np.arange(n)
    hermitian = np.zeros((count, n, n), wide_dtype(dtype))
    for k in read:
        if k == 0:
            continue
        r = rows[max(0, -k) : n - max(0, k)]
        values = random_values(rng, (count, len(r)), dtype)
        hermitian[:, r, r + k] = values
        hermitian[:, r + k, r] = np.conj(values)
    diag = np.abs(hermitian).sum(-1) + 1.0 + rng.random((count, n))
    expected = "ok"
    if kind == "indefinite" and n:
        diag = diag * np.where(rng.random((count, n)) < 0.3, -1, 1)
        diag[:, int(rng.integers(n))] *= -1 if np.all(diag > 0) else 1
        expected = "flag"
    hermitian[:, rows, rows] = diag
    if kind == "spd_graded" and n:
        scale = 10.0 ** rng.uniform(0, 5 if jnp.finfo(dtype).bits > 32 else 2, (count, n))
        hermitian = hermitian * scale[:, :, None] * scale[:, None, :]
        expected = "any"
    stored = hermitian.copy()
    for k in inside:
        if k in read or k == 0:
            continue
        r = rows[max(0, -k) : n - max(0, k)]
        stored[:, r, r + k] = 7.0 * random_values(rng, (count, len(r)), dtype)  # unread garbage
    if 0 in inside and np.dtype(dtype).kind == "c":
        stored[:, rows, rows] += 1j * rng.standard_normal((count, n))  # unread imaginary part
    if 0 not in inside:
        stored[:, rows, rows] = 0
        hermitian[:, rows, rows] = 0
        expected = "flag"
    if kind == "nonfinite" and n and read:
        k = read[int(rng.integers(len(read)))]
        i = int(rng.integers(max(0, -k), n - max(0, k)))
        stored[0, i, i + k] = np.nan
        expected = "flag"
    return stored, hermitian, expected


@functools.lru_cache(maxsize=4096)
def _compiled(api, mode, offsets, n, method, in_axes):
    """The jitted (``jit``) or ``vmap``-ed and jitted function of an api, cached so that
    cases sharing a structure reuse the compiled program."""

    def call(data, b):
        return _call_api(api, jaxdia.DiaMatrix(data, offsets, (n, n)), b)

    if mode == "jit":
        return jax.jit(call)
    return jax.jit(jax.vmap(call, in_axes=in_axes))


def _call_api(api: str, A, b):
    """``(x, info)`` of one api: ``info`` the factor's (or lineax's result as 0/1), None
    where the api reports nothing but NaN."""
    import lineax as lx

    if api == "solve_banded":
        return jaxdia.solve_banded(A, b), None
    if api.startswith("lu_solve"):
        lu = jaxdia.lu_factor(A)
        return lu.solve(b, trans=int(api[-1])), lu.info
    if api == "factorized":
        solve = jaxdia.factorized(A)
        return solve(b), solve.args[0].info
    if api in ("cho_solve_upper", "cho_solve_lower"):
        c = jaxdia.cho_factor(A, lower=api.endswith("lower"))
        return jaxdia.cho_solve(c, b), c.info
    if api == "solveh_banded":
        return jaxdia.solveh_banded(A, b), None
    if api.startswith("lineax"):
        solver = jaxdia.BandedSolver(positive_definite=api == "lineax_pd")
        sol = lx.linear_solve(jaxdia.DiaLinearOperator(A), b, solver, throw=False)
        return sol.value, jnp.where(sol.result == lx.RESULTS.successful, 0, 1)
    raise AssertionError(api)


def _set_method(method: str) -> None:
    """Forces an implementation of the banded factors (read when traced: caches go)."""
    if method != _banded.METHOD:
        jax.clear_caches()
        _compiled.cache_clear()
        _banded.METHOD = method


def check_solve(params: dict, dense=None, expected=None, stored=None) -> Result:
    """Runs one banded solve case (``params`` from :func:`gen_banded`, or the periodic
    family's with its matrices) and judges every system by its backward error."""
    rng = np.random.default_rng(params["values"])
    n, offsets, api = params["n"], tuple(params["offsets"]), params["api"]
    dtype = np.dtype(DTYPES[params["dtype"]])
    mode, batch = params["mode"], params["batch"]
    cholesky = api.startswith("cho") or api in ("solveh_banded", "lineax_pd")
    if dense is None:
        if cholesky:
            lower = api == "cho_solve_lower"
            stored, dense, expected = _hermitian_band(
                rng, n, offsets, params["matrix"], dtype, batch, lower
            )
        else:
            dense, expected = _band_matrix(rng, n, offsets, params["matrix"], dtype, batch)
            stored = dense
    data = dia_data(stored, offsets, params["padding"], rng)
    if params["dtype"] == "bfloat16":
        data = data.real.astype(np.float32)
    data = data.astype(dtype)
    # the oracle's matrix is the one jaxdia sees: after rounding to dtype
    rounded = dense_of(data, offsets, n)
    if cholesky:
        rounded = _hermitian_of(rounded, api == "cho_solve_lower")
    # right-hand sides
    rhs_dtype = dtype
    if params["rhs_dtype"] == "complex" and dtype.kind == "f":
        rhs_dtype = np.dtype(np.complex64 if dtype.itemsize <= 4 else np.complex128)
    elif params["rhs_dtype"] == "wider":
        rhs_dtype = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
    k = params["columns"]
    rhs = params["rhs"]
    batched = mode != "eager" and mode != "jit"
    count = max(batch, 1)
    if rhs == "vector":
        b_shape = (n,)
    elif rhs == "matrix":
        b_shape = (n, k)
    else:
        b_shape = (2, n, k) if not batched else (count, n, k)
    if mode in ("vmap_both", "vmap_b"):
        b_shape = (count, *b_shape)
    b = random_values(rng, b_shape, rhs_dtype) * (0 if params["zero_rhs"] else 1)
    b = b.astype(rhs_dtype) if rhs_dtype != jnp.bfloat16 else b.real.astype(np.float32)
    if rhs_dtype in (np.float16, jnp.bfloat16):
        b = b.astype(rhs_dtype)
    _set_method(params["method"])
    A_data = data if batched and mode != "vmap_b" else data[0]
    try:
        if mode in ("eager", "batched"):
            x, info = _call_api(api, jaxdia.DiaMatrix(A_data, offsets, (n, n)), b)
        else:
            in_axes = {"jit": None, "vmap_both": (0, 0), "vmap_A": (0, None), "vmap_b": (None, 0)}
            x, info = _compiled(api, mode, offsets, n, params["method"], in_axes[mode])(A_data, b)
    except CLEAR_ERRORS as error:
        return raised(error, unexpected=expected == "ok")
    x = np.asarray(jax.device_get(x))
    info = None if info is None else np.asarray(jax.device_get(info))
    return _judge_solve(params, rounded, expected, b, x, info, api, dtype, rhs_dtype)


def _hermitian_of(dense: np.ndarray, lower: bool) -> np.ndarray:
    """The Hermitian matrix that one triangle of ``dense`` defines (the diagonal's real
    part), as ``cho_factor`` reads it."""
    n = dense.shape[-1]
    triangle = np.tril(dense, -1) if lower else np.triu(dense, 1)
    h = triangle + np.conj(np.swapaxes(triangle, -1, -2))
    h[..., np.arange(n), np.arange(n)] = dense[..., np.arange(n), np.arange(n)].real
    return h


def _judge_solve(params, dense, expected, b, x, info, api, dtype, rhs_dtype) -> Result:
    """Per system: PASS (backward error within tolerance), FLAGGED (all NaN, or ``info``),
    FAIL (a wrong finite answer reported as a success, partial NaN, wrong shape or
    dtype)."""
    outcome = Outcome()
    mode, n = params["mode"], params["n"]
    out_dtype = np.dtype(jnp.result_type(dtype, rhs_dtype))
    if out_dtype != x.dtype and not (dtype.itemsize == 2 and x.dtype == out_dtype):
        outcome.add(FAIL, f"result dtype {x.dtype}, expected {out_dtype}")
    trans = int(api[-1]) if api.startswith("lu_solve") else 0
    ops = dense if trans == 0 else np.swapaxes(dense, -1, -2)
    if trans == 2:
        ops = np.conj(ops)
    # broadcast the matrices and right-hand sides the way the api does
    count = ops.shape[0]
    batched = mode not in ("eager", "jit")
    if mode == "vmap_b":
        ops = ops[:1]
    systems = []
    if not batched:
        bb = b if b.ndim > 1 else b[:, None]
        xx = x if x.ndim > 1 else x[:, None]
        if x.shape != b.shape:
            return Result(FAIL, f"result shape {x.shape} for b of shape {b.shape}")
        if n == 0:
            return Result(PASS)
        stacks = bb.reshape(-1, n, bb.shape[-1])
        xs = xx.reshape(-1, n, xx.shape[-1])
        systems = [
            (ops[0], stacks[i], xs[i], None if info is None else info) for i in range(len(xs))
        ]
    else:
        expected_shape = _batched_shape(mode, params["rhs"], count, b.shape)
        if x.shape != expected_shape:
            return Result(FAIL, f"result shape {x.shape}, expected {expected_shape}")
        for s in range(count):
            op = ops[0] if mode == "vmap_b" else ops[s]
            unbatched_b = mode == "vmap_A" or (mode == "batched" and params["rhs"] != "stack")
            bs = b if unbatched_b else b[s]
            xs = x[s]
            bs = bs if bs.ndim > 1 else bs[:, None]
            xs = xs if xs.ndim > 1 else xs[:, None]
            member_info = None
            if info is not None:
                member_info = (
                    info if np.ndim(info) == 0 else info.reshape(-1)[s if info.size > 1 else 0]
                )
            systems.append((op, bs, xs, member_info))
    if n == 0:
        outcome.add(PASS)
        return outcome.result()
    # solve_banded factors in the solution's precision; a stored factor keeps A's
    eps = machine_epsilon(out_dtype if out_dtype.itemsize > 2 else x.dtype)
    if api != "solve_banded":
        eps = max(eps, machine_epsilon(dtype if dtype.itemsize > 2 else np.float32))
    lower, upper = _band_widths(params["offsets"], n)
    tol = 64 * eps * max(4, lower + upper + 1)
    for op, bs, xs, member_info in systems:
        flagged_info = member_info is not None and np.any(np.asarray(member_info) != 0)
        for c in range(xs.shape[-1]):
            xc, bc = (
                xs[:, c].astype(wide_dtype(xs.dtype) if xs.dtype.itemsize > 2 else float),
                bs[:, c],
            )
            bc = np.asarray(bc).astype(complex if np.iscomplexobj(bc) else float)
            nan = ~np.isfinite(xc)
            if nan.all():
                outcome.add(
                    FLAGGED,
                    "NaN solution" + (" (info set)" if flagged_info else ""),
                    unexpected=expected == "ok",
                )
                continue
            if nan.any():
                cond = condition_number(op)
                note = f"partly non-finite solution ({int(nan.sum())} of {n} entries"
                if cond * eps > 0.01:  # numerically singular: overflow is no wrong answer
                    outcome.add(FLAGGED, f"{note}, cond {cond:.1e})")
                else:
                    outcome.add(FAIL, f"{note}, cond {cond:.1e}, success reported)")
                continue
            error = backward_error(op, xc, bc)
            ratio = error / tol
            if flagged_info:
                if error > tol:
                    outcome.add(FLAGGED, "info set, solution finite", ratio)
                else:
                    outcome.add(
                        FLAGGED, "info set but the solution is accurate", ratio, unexpected=True
                    )
            elif error <= tol:
                outcome.add(PASS, "", ratio)
            else:
                cond = condition_number(op)
                outcome.add(
                    FAIL,
                    f"backward error {error:.2e} > tol {tol:.1e} with success reported "
                    f"(cond {cond:.1e}, expected {expected})",
                    ratio,
                )
    return outcome.result()


def _batched_shape(mode, rhs, count, b_shape):
    if mode == "batched":
        if rhs == "vector":
            return (count, b_shape[0])
        if rhs == "matrix":
            return (count, *b_shape)
        return b_shape
    if mode == "vmap_A":
        return (count, *b_shape)
    return b_shape


def _band_widths(offsets, n):
    inside = [k for k in offsets if -n < k < n]
    return max([-k for k in inside] + [0]), max([k for k in inside] + [0])


def check_banded(params: dict) -> Result:
    return check_solve(params)


# periodic bands


def gen_periodic(rng, seed: int) -> dict:
    n = int(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 33, 64, 100, 257]))
    half = int(pick(rng, {1: 5, 2: 3, 3: 2}))
    corners = pick(rng, {"both": 5, "lower_left": 1, "upper_right": 1})
    matrix = pick(
        rng,
        {
            "dominant": 6,
            "random": 2,
            "band_ill": 3,
            "band_singular": 2,
            "laplacian": 1.5,
            "shifted_laplacian": 1.5,
        },
    )
    api = pick(
        rng,
        {
            "solve_banded": 4,
            "lu_solve0": 4,
            "lu_solve1": 1,
            "lu_solve2": 1,
            "factorized": 1,
            "cho_solve_upper": 0.5,
            "cho_solve_lower": 0.5,
        },
    )
    if api.startswith("cho"):
        matrix = "shifted_laplacian"
    dtype = pick(rng, {"float64": 6, "float32": 4, "complex128": 3, "complex64": 2})
    params = _solve_params(rng, n, (), api, matrix, dtype)
    params.update(half=half, corners=corners)
    return params


def periodic_matrix(rng, n, half, corners, kind, dtype, count):
    """``(dense, offsets, expected)``: ``count`` periodic matrices of stencil half-width
    ``half`` with the corner entries ``corners`` says, summed where they land on the band
    (small n); the offsets are every DIA offset an entry lands on."""
    dense = np.zeros((count, n, n), wide_dtype(dtype))
    rows = np.arange(n)
    offsets = set()
    for d in range(-half, half + 1):
        cols = rows + d
        keep = (cols >= 0) & (cols < n)
        if corners in ("both", "lower_left"):
            keep |= cols >= n
        if corners in ("both", "upper_right"):
            keep |= cols < 0
        r, c = rows[keep], cols[keep] % n if n else cols[keep]
        if kind in ("laplacian", "shifted_laplacian"):
            value = np.full((count, len(r)), 2.0 * half if d == 0 else -1.0)
            if kind == "shifted_laplacian" and d == 0:
                value = value + 0.5 + rng.random((count, len(r)))
        elif kind in ("band_ill", "band_singular"):
            # alpha I + a cyclic shift: well conditioned, its band (alpha I + a
            # superdiagonal) is badly conditioned (alpha ~ 0.5: growth 2^n) or singular.
            alpha = 0.0 if kind == "band_singular" else rng.uniform(0.3, 0.6)
            value = np.zeros((count, len(r)))
            if d == 0:
                value = value + alpha * (1 + 0.1 * rng.random((count, len(r))))
            elif d == half:
                value = value + 1.0
        else:
            value = random_values(rng, (count, len(r)), dtype)
            if d == 0 and kind == "dominant":
                value = value + (2 * half + 2) * np.where(value.real < 0, -1, 1)
        for i, j, v in zip(r, c, np.moveaxis(np.asarray(value), -1, 0)):
            dense[:, i, j] += v
            offsets.add(int(j - i))
    if kind in ("band_ill", "band_singular") and np.dtype(dtype).kind == "c":
        dense = dense * np.exp(1j * rng.uniform(0, 2 * np.pi))  # a complex rotation
    expected = {
        "dominant": "ok",
        "band_ill": "ok",
        "band_singular": "any",
        "random": "any",
        "laplacian": "flag",
        "shifted_laplacian": "ok",
    }[kind]
    if kind == "laplacian" and n <= 1:
        expected = "any"
    return dense, tuple(sorted(offsets)), expected


def check_periodic(params: dict) -> Result:
    rng = np.random.default_rng(params["values"] + 1)
    dtype = np.dtype(DTYPES[params["dtype"]])
    count = max(params["batch"], 1)
    dense, offsets, expected = periodic_matrix(
        rng, params["n"], params["half"], params["corners"], params["matrix"], dtype, count
    )
    params = {**params, "offsets": list(offsets)}
    if params["api"].startswith("cho"):
        lower = params["api"].endswith("lower")
        stored = dense
        dense = _hermitian_of(dense, lower)
    else:
        stored = dense
    # tiny n can make the "well conditioned" constructions singular: judge by the matrix
    cond = max(condition_number(member) for member in dense)
    if expected == "ok" and cond > 1e6:
        expected = "flag" if cond > 0.1 / machine_epsilon(dtype) else "any"
    result = check_solve(params, dense=dense, expected=expected, stored=stored)
    if result.verdict == FAIL and params["matrix"] in ("band_ill",):
        result.detail += " [band ill-conditioned, whole matrix well conditioned]"
    return result


# -- stencils on grids (ilu, multigrid) -------------------------------------------------------

STENCILS = {1: (3,), 2: (5, 9), 3: (7, 27)}


def _cells(dim: int, points: int) -> list[tuple[int, ...]]:
    """The displacements of a stencil of ``points`` points (the centre excluded)."""
    cells = [d for d in np.ndindex(*(3,) * dim)]
    cells = [tuple(int(s) - 1 for s in d) for d in cells]
    cells = [d for d in cells if any(d)]
    if points in (3, 5, 7):  # the axis neighbours only
        cells = [d for d in cells if sum(map(abs, d)) == 1]
    return cells


def _strides(grid) -> tuple[int, ...]:
    return tuple(int(np.prod(grid[a + 1 :])) for a in range(len(grid)))


def _flat(d, grid) -> int:
    return int(sum(s * t for s, t in zip(d, _strides(grid))))


def _live(d, grid) -> bool:
    return all(size > abs(step) for step, size in zip(d, grid))


def stencil_matrix(rng, grid, points, problem, dtype, count=1, shift=1.0):
    """``(dense, offsets)``: ``count`` matrices of a ``points``-point stencil on ``grid``
    (C order, Dirichlet boundaries eliminated) for ``problem``; the offsets are those of
    the live stencil cells (what SciPy's DIA form of such a matrix stores).

    Problems: ``poisson`` (constant coefficients), ``anisotropic`` (one axis weighted
    1e-3..1e-1), ``varcoef`` (log-normal link weights, symmetric), ``convdiff``
    (upwinded convection, nonsymmetric M-matrix), ``random_dd`` (random signs,
    diagonally dominant), ``complex_herm`` (Hermitian with phases, positive definite),
    ``complex_shift`` (a Laplacian plus ``i s I``: complex symmetric), ``zero_pivot``
    (a zero first diagonal entry: ILU(0) breaks down)."""
    dim = len(grid)
    n = int(np.prod(grid))
    cells = _cells(dim, points)
    wide = wide_dtype(dtype)
    dense = np.zeros((count, n, n), wide)
    coords = np.array(list(np.ndindex(*grid))).reshape(n, dim) if n else np.zeros((0, dim), int)
    weights_axis = np.ones(dim)
    if problem == "anisotropic" and dim > 1:
        weights_axis[int(rng.integers(dim))] = 10.0 ** -rng.uniform(1, 3)
    velocity = rng.standard_normal(dim) * 10.0 ** rng.uniform(0, 2)
    offsets = sorted({_flat(d, grid) for d in cells if _live(d, grid)} | {0})
    for d in cells:
        target = coords + np.array(d)
        inside = np.all((target >= 0) & (target < np.array(grid)), axis=1)
        i = np.nonzero(inside)[0]
        if not len(i):
            continue
        j = i + _flat(d, grid)
        axis_weight = float(np.prod([weights_axis[a] for a in range(dim) if d[a]]))
        if problem in ("poisson", "anisotropic", "complex_shift", "zero_pivot"):
            value = -axis_weight * np.ones((count, len(i)))
        elif problem in ("varcoef", "complex_herm"):
            if _flat(d, grid) < 0:
                continue  # set with the mirrored cell
            value = -np.exp(1.5 * rng.standard_normal((count, len(i))))
            if problem == "complex_herm":
                value = value * np.exp(1j * rng.uniform(0, 2 * np.pi, (count, len(i))))
            dense[:, j, i] = np.conj(value)
        elif problem == "convdiff":
            flow = max(0.0, -float(np.dot(velocity, d))) if sum(map(abs, d)) == 1 else 0.0
            value = (
                -(1.0 + flow) * np.ones((count, len(i))) * (1 + 0.1 * rng.random((count, len(i))))
            )
        else:  # random_dd
            value = random_values(rng, (count, len(i)), dtype)
        dense[:, i, j] = value
    rows = np.arange(n)
    off = np.abs(dense).sum(-1)
    # Dirichlet boundaries: the missing neighbours' couplings stay on the diagonal.
    full = sum(
        float(np.prod([weights_axis[a] for a in range(dim) if d[a]])) for d in cells
    ) * np.ones((count, n))
    diag = (
        np.maximum(
            off,
            full if problem in ("poisson", "anisotropic", "complex_shift", "zero_pivot") else off,
        )
        + 0.05 * shift
    )
    if problem == "random_dd":
        diag = (
            diag * rng.uniform(1.1, 2.0, (count, n)) * np.where(rng.random((count, n)) < 0.2, -1, 1)
        )
    dense[:, rows, rows] = diag
    if problem == "complex_shift":
        dense[:, rows, rows] += 1j * rng.uniform(0.1, 2.0)
    if problem == "zero_pivot" and n:
        dense[:, 0, 0] = 0
    return dense.astype(wide), tuple(int(k) for k in offsets if -n < k < n)


# -- ILU(0) and IC(0) -------------------------------------------------------------------------

ILU_PROBLEMS = {
    "varcoef": 3,
    "poisson": 1,
    "convdiff": 3,
    "random_dd": 2,
    "complex_herm": 2,
    "complex_shift": 1,
    "anisotropic": 1,
    "zero_pivot": 0.4,
}


def gen_ilu(rng, seed: int) -> dict:
    dim = int(pick(rng, {1: 1, 2: 3, 3: 3}))
    small = [1, 2, 3, 4, 5]
    larger = {1: [8, 17, 64], 2: [8, 12], 3: [6, 7]}[dim]
    grid = [
        int(rng.choice(larger)) if rng.random() < 0.15 else int(rng.choice(small))
        for _ in range(dim)
    ]
    points = int(rng.choice(STENCILS[dim]))
    problem = pick(rng, ILU_PROBLEMS)
    hermitian = problem in ("varcoef", "poisson", "complex_herm", "anisotropic")
    kind = "ic" if hermitian and rng.random() < 0.4 else "ilu"
    complex_ = problem in ("complex_herm", "complex_shift") or (
        problem == "random_dd" and rng.random() < 0.3
    )
    dtype = pick(
        rng, {"complex128": 3, "complex64": 2} if complex_ else {"float64": 3, "float32": 2}
    )
    order = pick(rng, {"natural": 4, "auto": 3, "axes": 2})
    axes = sorted(int(a) for a in rng.choice(dim, int(rng.integers(1, dim + 1)), replace=False))
    method = pick(rng, {"auto": 3, "exact": 2, "chow-patel": 2, "chow-patel-few": 1})
    solves = pick(rng, {"auto": 3, "scan": 1, "wavefront": 1})
    with_grid = rng.random() < 0.85 or solves == "wavefront"
    if not with_grid:
        order = "natural"
    return {
        "grid": grid,
        "points": points,
        "problem": problem,
        "kind": kind,
        "dtype": dtype,
        "order": order,
        "axes": axes,
        "method": method,
        "solves": solves,
        "with_grid": with_grid,
        "shift": float(pick(rng, {0.0: 5, 0.1: 1})),
        "mode": pick(rng, {"eager": 5, "jit": 2, "batched": 1}),
        "factor_dtype": pick(rng, {"none": 6, "lower": 1}),
    }


def _neighbour_pattern(n, offsets, grid):
    """The pattern ILU(0) keeps: the stored diagonals, with a grid only the entries that
    couple grid neighbours."""
    pattern = np.zeros((n, n), bool)
    rows = np.arange(n)
    for k in offsets:
        r = rows[max(0, -k) : n - max(0, k)]
        pattern[r, r + k] = True
    if grid is not None and n:
        coords = np.array(list(np.ndindex(*grid))).reshape(n, len(grid))
        near = np.all(np.abs(coords[:, None, :] - coords[None, :, :]) <= 1, axis=-1)
        pattern &= near
    return pattern


def ilu0_reference(A: np.ndarray, pattern: np.ndarray):
    """Textbook ILU(0) (the IKJ variant) of a dense ``A`` on ``pattern``: ``(L, U,
    pivot_ok)``, ``L`` unit lower triangular. Double precision."""
    n = A.shape[0]
    a = np.where(pattern, A, 0).astype(complex if np.iscomplexobj(A) else float)
    ok = True
    for i in range(n):
        for k in np.nonzero(pattern[i, :i])[0]:
            if a[k, k] == 0 or not np.isfinite(a[k, k]):
                ok = False
                break
            a[i, k] /= a[k, k]
            js = np.nonzero(pattern[i, k + 1 :])[0] + k + 1
            a[i, js] -= a[i, k] * a[k, js]
        if not ok:
            break
    if n and (a[n - 1, n - 1] == 0 or not np.all(np.isfinite(np.diag(a)))):
        ok = False
    return np.tril(a, -1) + np.eye(n), np.triu(a), ok


def _reversed_problem(dense, offsets, grid, axes):
    """``P A P^T``, its stored offsets (as ``ilu0(order=...)`` factors it: each stored
    live cell with its displacement negated along ``axes``) and the permutation."""
    n = dense.shape[-1]
    if not axes:
        return dense, offsets, np.arange(n)
    index = np.arange(n).reshape(grid)
    perm = np.flip(index, axis=tuple(axes)).reshape(-1)  # new i holds old perm[i]
    permuted = dense[..., perm, :][..., :, perm]
    cells = [tuple(int(s) - 1 for s in d) for d in np.ndindex(*(3,) * len(grid))]
    stored = [d for d in cells if _live(d, grid) and _flat(d, grid) in offsets]
    flipped = [tuple(-s if a in axes else s for a, s in enumerate(d)) for d in stored]
    return permuted, tuple(sorted({_flat(d, grid) for d in flipped})), perm


def _auto_axes(dense, grid):
    """The axes ``order="auto"`` reverses (its documented rule, on the host)."""
    n = dense.shape[-1]
    coords = np.array(list(np.ndindex(*grid))).reshape(n, len(grid))
    before, after = np.zeros(len(grid)), np.zeros(len(grid))
    i, j = np.nonzero(np.abs(dense).sum(0) > 0)
    step = coords[j] - coords[i]
    near = np.all(np.abs(step) <= 1, axis=1)
    values = np.abs(dense).sum(0)[i, j]
    for a in range(len(grid)):
        before[a] = values[near & (step[:, a] == -1)].sum()
        after[a] = values[near & (step[:, a] == 1)].sum()
    return [a for a in range(len(grid)) if after[a] > before[a] * (1 + 1e-9)]


def check_ilu(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    grid = tuple(params["grid"])
    dtype = np.dtype(DTYPES[params["dtype"]])
    count = 2 if params["mode"] == "batched" else 1
    dense, offsets = stencil_matrix(rng, grid, params["points"], params["problem"], dtype, count)
    n = dense.shape[-1]
    data = dia_data(dense, offsets, "nan").astype(dtype)
    dense = dense_of(data, offsets, n)  # rounded to dtype
    kind = params["kind"]
    if kind == "ic":
        dense = _hermitian_of(dense, lower=True)  # IC(0) reads the lower triangle
    grid_arg = grid if params["with_grid"] else None
    order: Any = "natural"
    axes: list[int] = []
    if params["order"] == "auto":
        order, axes = "auto", _auto_axes(dense, grid)
    elif params["order"] == "axes":
        order, axes = tuple(params["axes"]), list(params["axes"])
    method = params["method"]
    sweeps = 2
    if method == "chow-patel":
        sweeps = 2 * n + 2  # enough for the fixed point: the exact factorization
    elif method == "chow-patel-few":
        method, sweeps = "chow-patel", int(rng.integers(1, 4))
    factor_dtype = None
    if params["factor_dtype"] == "lower":
        factor_dtype = {
            np.dtype(np.float64): np.float32,
            np.dtype(np.complex128): np.complex64,
        }.get(dtype, dtype)
    options = dict(
        order=order,
        method=method,
        sweeps=sweeps,
        shift=params["shift"],
        solves=params["solves"],
        dtype=factor_dtype,
    )
    build = jaxdia.ic0 if kind == "ic" else jaxdia.ilu0
    b = random_values(rng, (count, n) if count > 1 else (n,), dtype).astype(dtype)
    # the reference
    references = []
    expect_flag = False
    for member in range(count):
        A = dense[member]
        if params["shift"]:
            A = A + params["shift"] * np.diag(np.diag(A))
        permuted, perm_offsets, perm = _reversed_problem(A, offsets, grid, axes)
        pattern = _neighbour_pattern(n, perm_offsets, grid_arg)
        L, U, ok = ilu0_reference(permuted, pattern)
        if kind == "ic":
            pivots = np.diag(U)
            ok = (
                ok
                and bool(np.all(pivots.real > 0))
                and bool(np.all(np.abs(pivots.imag) <= 1e-8 * np.abs(pivots)))
            )
        expect_flag |= not ok
        references.append((L, U, perm, ok))
    try:
        if params["mode"] == "jit":
            if order == "auto":
                options["order"] = tuple(axes)
            M = jax.jit(lambda d: build(jaxdia.DiaMatrix(d, offsets, (n, n)), grid_arg, **options))(
                data[0]
            )
        else:
            A_data = data if count > 1 else data[0]
            M = build(jaxdia.DiaMatrix(A_data, offsets, (n, n)), grid_arg, **options)
        y = np.asarray(M(b))
    except CLEAR_ERRORS as error:
        return raised(error, unexpected=not expect_flag)
    outcome = Outcome()
    if tuple(M.order) != tuple(axes):
        outcome.add(FAIL, f"order {M.order}, the documented rule gives {tuple(axes)}")
    work = np.dtype(factor_dtype) if factor_dtype is not None else dtype
    eps = machine_epsilon(work)
    width = len(offsets)
    tol = 64 * eps * max(4, width)
    ys = y.reshape(count, n)
    bs = np.asarray(b).reshape(count, n)
    Ls = np.asarray(M.L.todense()).reshape(count, n, n)
    Us = np.asarray(M.U.todense()).reshape(count, n, n) if kind == "ilu" else None
    for member, (L, U, perm, ok) in enumerate(references):
        if not ok:
            if np.all(np.isfinite(ys[member])):
                outcome.add(
                    FAIL,
                    "the reference factorization breaks down, ilu0/ic0 reported "
                    "nothing and M(b) is finite",
                )
            else:
                outcome.add(FLAGGED, "breakdown: M(b) not finite (no error raised)")
            continue
        yp = ys[member].astype(wide_dtype(y.dtype))[perm]  # in the factor's ordering
        bp = bs[member].astype(wide_dtype(b.dtype))[perm]
        if not np.all(np.isfinite(yp)):
            outcome.add(
                FAIL if params["method"] != "chow-patel-few" else FLAGGED,
                "M(b) not finite, the reference factor is fine",
            )
            continue
        if params["method"] == "chow-patel-few":
            outcome.add(PASS)  # an approximate factor: finite is all one can ask
            continue
        if kind == "ic":
            d = np.sqrt(np.diag(U).real)
            L_ref = L * d[None, :]
            LU = L_ref @ np.conj(L_ref.T)
            scale = np.abs(L_ref) @ np.abs(L_ref.T)
        else:
            L_ref, LU, scale = L, L @ U, np.abs(L) @ np.abs(U)
        residual = np.max(np.abs(LU @ yp - bp), initial=0)
        denominator = np.max(scale.sum(-1), initial=0) * np.max(np.abs(yp), initial=0) + np.max(
            np.abs(bp), initial=0
        )
        error = residual / denominator if residual else 0.0
        if error > tol:
            outcome.add(
                FAIL,
                f"M(b) has backward error {error:.1e} > {tol:.1e} against the "
                "reference ILU(0)/IC(0)",
                error / tol,
            )
        else:
            outcome.add(PASS, "", error / tol)
        # the factors themselves
        got_L = Ls[member]
        factor_error = np.max(np.abs(got_L - L_ref), initial=0) / max(
            1.0, np.max(np.abs(L_ref), initial=0)
        )
        if Us is not None:
            factor_error = max(
                factor_error,
                np.max(np.abs(Us[member] - U), initial=0) / max(1.0, np.max(np.abs(U), initial=0)),
            )
        factor_tol = 1e3 * eps * max(4, width)
        if factor_error > factor_tol and error <= tol:
            outcome.add(
                FAIL,
                f"factor differs from the reference by {factor_error:.1e} (> {factor_tol:.1e})",
                factor_error / factor_tol,
            )
        elif factor_error > factor_tol:
            outcome.add(FAIL, f"factor differs from the reference by {factor_error:.1e}")
    return outcome.result()


# -- multigrid --------------------------------------------------------------------------------

MG_AXES = {
    1: [1, 2, 3, 5, 8, 17, 33, 64, 100, 257],
    2: [1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 64],
    3: [1, 2, 3, 4, 5, 8, 9, 16],
}


def gen_multigrid(rng, seed: int) -> dict:
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


def check_multigrid(params: dict) -> Result:
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
        if not np.all(np.isfinite(xm)):
            outcome.add(FAIL, "converged reported, solution not finite")
            continue
        ratio = true / (limit + slack) if limit + slack > 0 else 0.0
        if true > limit + slack:
            outcome.add(
                FAIL,
                f"converged reported but the true residual {true:.2e} > "
                f"rtol |b| {limit:.2e} (+ rounding {slack:.1e})",
                ratio,
            )
            continue
        if abs(float(reported[member]) - true) > slack + 1e-2 * true + 1e-300:
            outcome.add(FAIL, f"reported residual {float(reported[member]):.2e}, true {true:.2e}")
            continue
        outcome.add(PASS, "", ratio)
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


# -- banded Jacobians -------------------------------------------------------------------------

#: Holomorphic elementwise maps (so that complex arguments have a complex Jacobian).
_MAPS = {
    "identity": lambda v: v,
    "square": lambda v: v * v,
    "sin": jnp.sin,
    "exp": lambda v: jnp.exp(0.3 * v),
    "cube": lambda v: v * v * v,
}


def gen_jacobian(rng, seed: int) -> dict:
    n = int(rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 33, 64]))
    m = n if rng.random() < 0.8 else max(1, n + int(rng.integers(-3, 4)))
    width = int(rng.integers(1, 5))
    true = sorted({0, *(int(k) for k in rng.integers(-width, width + 1, int(rng.integers(1, 4))))})
    offsets = set(true)
    if rng.random() < 0.3:  # a wider pattern than the Jacobian's
        offsets |= {int(rng.integers(-width - 2, width + 3))}
    if rng.random() < 0.1:  # an offset outside the matrix
        offsets |= {max(m, n) + 2}
    leaky = rng.random() < 0.06  # the Jacobian leaves the pattern: check=True must raise
    args = pick(rng, {"real": 4, "complex": 2, "real_to_complex": 1.5})
    dtype = pick(
        rng,
        {"float64": 3, "float32": 2}
        if args == "real" or args == "real_to_complex"
        else {"complex128": 3, "complex64": 2},
    )
    return {
        "n": n,
        "m": m,
        "true": true,
        "offsets": sorted(offsets, key=lambda _: rng.random()),
        "maps": [str(rng.choice(list(_MAPS))) for _ in true],
        "coupled": bool(rng.random() < 0.4),  # products u[i] u[i + k]
        "args": args,
        "dtype": dtype,
        "mode": pick(rng, {"fwd": 1, "rev": 1}),
        "chunk_size": pick(rng, {"none": 4, 1: 1, 2: 1, 3: 1}),
        "mask": bool(rng.random() < 0.2),
        "has_aux": bool(rng.random() < 0.2),
        "value": bool(rng.random() < 0.25),
        "argnums": int(rng.random() < 0.2),
        "call": pick(rng, {"eager": 4, "jit": 2, "vmap": 1}),
        "check": bool(rng.random() < 0.2) or leaky,
        "leaky": leaky,
    }


def _jacobian_function(params, coefficients, mask_rows):
    """``f(p, u)`` (or ``f(u)``): ``out[i] = p * sum_k c_k[i] g_k(u[i + k])`` (plus
    ``u[i] u[i + k]`` terms), Jacobian within ``true``'s offsets (and ``leaky``'s)."""
    n, m = params["n"], params["m"]
    true = list(params["true"])
    maps = [_MAPS[name] for name in params["maps"]]
    if params["leaky"]:
        true = [*true, _leak_offset(params)]
        maps = [*maps, _MAPS["sin"]]

    def f(p, u):
        u = jnp.asarray(u)
        rows = jnp.arange(m)
        out = jnp.zeros((m,), jnp.result_type(u.dtype, coefficients.dtype))
        for k, g, c in zip(true, maps, coefficients):
            cols = rows + k
            inside = (cols >= 0) & (cols < n)
            values = jnp.where(inside, g(u[jnp.clip(cols, 0, max(n - 1, 0))]), 0)
            out = out + c[: len(rows)] * values
            if params["coupled"] and k != 0 and n:
                centre = jnp.where(rows < n, u[jnp.clip(rows, 0, n - 1)], 0)
                out = out + 0.5 * jnp.where(inside, centre * u[jnp.clip(cols, 0, n - 1)], 0)
        return p * out

    return f


def _leak_offset(params) -> int:
    true = params["true"]
    return max(true) + 1 if max(true) + 1 not in params["offsets"] else max(true) + 5


def _leaks(params) -> bool:
    """Whether a leaky case's extra diagonal has an entry inside the ``m x n`` matrix."""
    k = _leak_offset(params)
    return -params["m"] < k < params["n"]


def check_jacobian(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    n, m = params["n"], params["m"]
    dtype = np.dtype(DTYPES[params["dtype"]])
    coeff_dtype = np.complex128 if params["args"] != "real" else np.float64
    count = len(params["true"]) + (1 if params["leaky"] else 0)
    coefficients = random_values(rng, (count, m), coeff_dtype)
    offsets = [int(k) for k in params["offsets"]]
    mask = None
    if params["mask"]:
        # structural zeros: some entries of the pattern may not be nonzero (and are not)
        mask = rng.random((len(offsets), n)) < 0.8
        # the coefficients of masked-out entries vanish: entry (i, i + k) for k = offsets[r]
        for r, k in enumerate(offsets):
            if k in params["true"]:
                t = params["true"].index(k)
                for j in np.nonzero(~mask[r])[0]:
                    i = j - k
                    if 0 <= i < m:
                        coefficients[t, i] = 0
        if params["coupled"]:
            mask[:] = True  # the products also touch the main diagonal: keep it simple
    if params["args"] == "real":
        work = coefficients.astype(dtype)
    else:  # complex coefficients in the precision of the arguments
        work = coefficients.astype(
            np.complex64 if machine_epsilon(dtype) > 1e-10 else np.complex128
        )
    f2 = _jacobian_function(params, jnp.asarray(work), mask)
    p = jnp.asarray(1.5, dtype=np.float32 if machine_epsilon(dtype) > 1e-10 else np.float64)
    u = random_values(rng, (n,), dtype).astype(dtype)
    aux_value = jnp.arange(3.0)
    if params["argnums"] == 1:
        base = f2
    else:

        def base(u, p):
            return f2(p, u)

    if params["has_aux"]:

        def fun(*args):
            return base(*args), aux_value
    else:
        fun = base
    args = (p, u) if params["argnums"] == 1 else (u, p)
    options = dict(
        argnums=params["argnums"],
        has_aux=params["has_aux"],
        mask=mask,
        mode=params["mode"],
        check=params["check"],
    )
    if params["chunk_size"] != "none":
        options["chunk_size"] = int(params["chunk_size"])
    make = jaxdia.value_and_jacobian if params["value"] else jaxdia.jacobian
    jac = make(fun, offsets, **options)
    try:
        if params["call"] == "jit" and not params["check"]:
            result = jax.jit(jac)(*args)
        elif params["call"] == "vmap" and not params["check"]:
            batch_u = jnp.stack([u, 0.5 * u + 0.1])
            in_axes = (None, 0) if params["argnums"] == 1 else (0, None)
            batch_args = (p, batch_u) if params["argnums"] == 1 else (batch_u, p)
            result = jax.vmap(jac, in_axes=in_axes)(*batch_args)
        else:
            result = jac(*args)
    except CLEAR_ERRORS as error:
        return raised(
            error, unexpected=not (params["leaky"] and params["check"] and _leaks(params))
        )
    if params["leaky"] and params["check"] and _leaks(params):
        return Result(FAIL, "check=True did not raise for a Jacobian outside the pattern")
    if params["value"]:
        value, J = result
    else:
        value, J = None, result
    if params["has_aux"]:
        if params["value"]:
            value, aux = value
        else:
            J, aux = J
        aux = np.asarray(aux)  # a vmap broadcasts it over the batch
        if aux.shape[-1:] != (3,) or not np.all(aux == np.asarray(aux_value)):
            return Result(FAIL, "has_aux: the auxiliary value differs")
    # the oracle: jax.jacfwd of the same function in double precision
    wide_u = jnp.asarray(np.asarray(u).astype(wide_dtype(dtype)))
    wide_p = jnp.asarray(np.float64(1.5))
    f_wide = _jacobian_function(params, jnp.asarray(coefficients), mask)
    holomorphic = dtype.kind == "c"
    outcome = Outcome()
    members = (
        [(wide_u, 0)]
        if params["call"] != "vmap" or params["check"]
        else [(wide_u, 0), (0.5 * wide_u + 0.1, 1)]
    )
    eps = machine_epsilon(dtype)
    dense = np.asarray(J.todense())
    if J.shape != (m, n):
        return Result(FAIL, f"Jacobian shape {J.shape}, expected {(m, n)}")
    for point, member in members:
        reference = np.asarray(
            jax.jacfwd(lambda v: f_wide(wide_p, v), holomorphic=holomorphic)(point)
        )
        got = dense[member] if dense.ndim == 3 else dense
        scale = max(1.0, float(np.max(np.abs(reference), initial=0)))
        error = float(np.max(np.abs(got - reference), initial=0)) / scale
        tol = 256 * eps * max(1, len(params["true"]))
        if error > tol:
            note = f"Jacobian differs from jax.jacfwd by {error:.1e} (> {tol:.1e})"
            if np.iscomplexobj(reference) and not np.iscomplexobj(got):
                note += f"; the result is real ({got.dtype}), the Jacobian complex"
            outcome.add(FAIL, note, error / tol)
        else:
            outcome.add(PASS, "", error / tol)
        if value is not None:
            got_value = np.asarray(value)
            got_value = got_value[member] if got_value.ndim == 2 else got_value
            want = np.asarray(f_wide(wide_p, point))
            value_error = float(np.max(np.abs(got_value - want), initial=0)) / max(
                1.0, float(np.max(np.abs(want), initial=0))
            )
            if value_error > tol:
                outcome.add(FAIL, f"value_and_jacobian's value differs by {value_error:.1e}")
    return outcome.result()


# -- sharded matrices (8 fake CPU devices, in their own worker) ----------------------------------


def gen_sharded(rng, seed: int) -> dict:
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


def check_sharded(params: dict) -> Result:
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
        dense, _ = _band_matrix(rng, n, offsets, "dominant", dtype, 0)
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


GENERATORS = {
    "banded": gen_banded,
    "periodic": gen_periodic,
    "ilu": gen_ilu,
    "multigrid": gen_multigrid,
    "jacobian": gen_jacobian,
    "sharded": gen_sharded,
}
CHECKS = {
    "banded": check_banded,
    "periodic": check_periodic,
    "ilu": check_ilu,
    "multigrid": check_multigrid,
    "jacobian": check_jacobian,
    "sharded": check_sharded,
}
for _family in MODULE_FAMILIES:
    _module = importlib.import_module(f"fuzz.{_family}")
    GENERATORS[_family], CHECKS[_family] = _module.generate, _module.check
    TIMEOUTS[_family] = getattr(_module, "TIMEOUT", DEFAULT_TIMEOUT)


# -- running cases in a worker process, under timeouts -----------------------------------------

_MARK = "@@fuzz-result "


def _worker() -> None:
    """Reads cases (JSON lines) on stdin, writes their results on stdout."""
    if os.environ.get("FUZZ_OPTIMIZED") != "1":
        # compile as the test suite does: XLA's optimizations cost more than they save here
        jax.config.update("jax_disable_most_optimizations", True)
    # Results go to the original stdout; anything else written to fd 1 (Python or C++)
    # goes to stderr, so that it cannot mix with them.
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    for line in sys.stdin:
        spec = json.loads(line)
        case = Case(spec["family"], spec["seed"], spec["index"], spec["params"])
        result = run_case(case)
        out.write(_MARK + json.dumps(dataclasses.asdict(result)) + "\n")
        out.flush()


class Worker:
    """A worker process for one family (the sharded one gets 8 fake CPU devices)."""

    def __init__(self, family: str):
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if family == "sharded":
            env["XLA_FLAGS"] = (
                env.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
            ).strip()
        self.log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed by close())
        self.process = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.buffer = b""

    def run(self, case: Case, timeout: float) -> Result:
        spec = {
            "family": case.family,
            "seed": case.seed,
            "index": case.index,
            "params": case.params,
        }
        assert self.process.stdin is not None and self.process.stdout is not None
        start = time.perf_counter()
        try:
            self.process.stdin.write(json.dumps(spec) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            return Result(FAIL, f"worker died before the case: {self.tail()}")
        fd = self.process.stdout.fileno()
        while True:
            left = timeout - (time.perf_counter() - start)
            if left <= 0:
                self.kill()
                return Result(
                    FAIL, f"timeout: no result after {timeout:.0f} s (hang?)", seconds=timeout
                )
            ready, _, _ = select.select([fd], [], [], left)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                code = self.process.wait()
                return Result(
                    FAIL,
                    f"worker crashed (exit code {code}): {self.tail()}",
                    seconds=time.perf_counter() - start,
                )
            self.buffer += chunk
            while b"\n" in self.buffer:
                line, self.buffer = self.buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(_MARK):
                    return Result(**json.loads(text[len(_MARK) :]))

    def tail(self) -> str:
        self.log.seek(0)
        return " | ".join(self.log.read().strip().splitlines()[-3:])[-400:]

    def alive(self) -> bool:
        return self.process.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.killpg(self.process.pid, 9)  # the worker's own process group
            self.process.wait()

    def close(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        if self.alive():
            try:
                self.process.stdin.close()
                self.process.wait(timeout=30)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.log):
            with contextlib.suppress(BrokenPipeError):
                stream.close()


def run_isolated(cases: list[Case], timeout_scale: float = 1.0, progress=None):
    """Runs ``cases`` in worker processes (one per family, restarted after a crash or a
    timeout); yields ``(case, result)`` in the order run: by family, then in blocks of
    100 indices, within a block by banded implementation (switching it drops JAX's
    caches), then by index (so that a run cut short by a time budget still samples every
    implementation)."""
    order = sorted(
        cases,
        key=lambda c: (
            FAMILIES.index(c.family),
            c.index // 100,
            str(c.params.get("method")),
            c.index,
        ),
    )
    worker, family = None, None
    try:
        for case in order:
            if worker is None or family != case.family or not worker.alive():
                if worker is not None:
                    worker.close()
                worker, family = Worker(case.family), case.family
            timeout = TIMEOUTS.get(case.family, DEFAULT_TIMEOUT) * timeout_scale
            result = worker.run(case, timeout)
            if progress is not None:
                progress(case, result)
            yield case, result
    finally:
        if worker is not None:
            worker.close()


# -- the command line -------------------------------------------------------------------------


def summarize(results: list[tuple[Case, Result]], elapsed: float) -> str:
    lines = [
        f"{'family':<10} {'cases':>6} {'PASS':>6} {'FLAGGED':>8} {'(unexp.)':>9} "
        f"{'FAIL':>5} {'max err/tol':>12} {'seconds':>8}"
    ]
    for family in FAMILIES:
        mine = [(c, r) for c, r in results if c.family == family]
        if not mine:
            continue
        counts = Counter(r.verdict for _, r in mine)
        unexpected = sum(r.unexpected for _, r in mine)
        worst = max((r.ratio for _, r in mine if r.verdict == PASS), default=0.0)
        seconds = sum(r.seconds for _, r in mine)
        lines.append(
            f"{family:<10} {len(mine):>6} {counts[PASS]:>6} {counts[FLAGGED]:>8} "
            f"{unexpected:>9} {counts[FAIL]:>5} {worst:>12.3f} {seconds:>8.0f}"
        )
    lines.append(f"total {len(results)} cases in {elapsed:.0f} s")
    fails = [(c, r) for c, r in results if r.verdict == FAIL]
    if fails:
        lines.append(f"\nFAIL ({len(fails)}):")
        for c, r in sorted(fails, key=lambda cr: (cr[0].family, cr[0].index)):
            lines.append(f"  [{c.family} #{c.index}] {r.detail}\n    {c.reproducer()}")
    odd = [(c, r) for c, r in results if r.unexpected]
    if odd:
        lines.append(f"\nFLAGGED on a well-posed case ({len(odd)}):")
        for c, r in sorted(odd, key=lambda cr: (cr[0].family, cr[0].index)):
            lines.append(f"  [{c.family} #{c.index}] {r.detail}\n    {c.reproducer()}")
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--family", default="all", choices=("all", *FAMILIES))
    parser.add_argument("--cases", type=int, default=200, help="cases per family")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="20 cases per family")
    parser.add_argument("--start", type=int, default=0, help="first case index")
    parser.add_argument("--index", type=int, help="run this one case here, in this process")
    parser.add_argument("--params", help="run a case with these JSON params, in this process")
    parser.add_argument(
        "--budget",
        type=float,
        default=math.inf,
        help="seconds per family: no new case starts after that",
    )
    parser.add_argument("--timeout-scale", type=float, default=1.0)
    parser.add_argument("--json", help="write every case and its result to this file")
    parser.add_argument(
        "--isolate",
        action="store_true",
        help="with --index/--params: run the case in a worker, under its timeout",
    )
    parser.add_argument("--verbose", action="store_true", help="print every case's verdict")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        _worker()
        return 0
    families = FAMILIES if args.family == "all" else (args.family,)
    if args.index is not None or args.params:
        family = families[0] if args.family != "all" else "banded"
        if family == "sharded" and not args.isolate:  # before JAX starts its backend
            os.environ["XLA_FLAGS"] = (
                os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
            ).strip()
        case = generate(family, args.seed, args.index or 0)
        if args.params:
            case.params = json.loads(args.params)
        print(case.reproducer())
        if args.isolate:
            result = list(run_isolated([case], args.timeout_scale))[0][1]
        else:
            result = run_case(case)
        print(
            f"{result.verdict}: {result.detail} (err/tol {result.ratio:.3g}, "
            f"{result.seconds:.1f} s)"
        )
        return int(result.verdict == FAIL)
    count = 20 if args.quick else args.cases
    results: list[tuple[Case, Result]] = []
    start = time.perf_counter()
    for family in families:
        began = time.perf_counter()
        cases = [generate(family, args.seed, i) for i in range(args.start, args.start + count)]

        def progress(case, result):
            if args.verbose:
                print(
                    f"{result.verdict:8} {result.seconds:6.1f}s [{case.family} #{case.index}] "
                    f"{result.detail[:150]}",
                    flush=True,
                )
            elif result.verdict == FAIL:
                print(
                    f"FAIL [{case.family} #{case.index}] {result.detail}\n  {case.reproducer()}",
                    flush=True,
                )

        done = 0
        for case, result in run_isolated(cases, args.timeout_scale, progress):
            results.append((case, result))
            done += 1
            if time.perf_counter() - began > args.budget:
                print(f"[{family}: budget spent after {done} cases]", flush=True)
                break
        print(f"[{family}: {done} cases in {time.perf_counter() - began:.0f} s]", flush=True)
    print()
    print(summarize(results, time.perf_counter() - start))
    if args.json:
        with open(args.json, "w") as file:
            json.dump(
                [
                    {"case": dataclasses.asdict(c), "result": dataclasses.asdict(r)}
                    for c, r in results
                ],
                file,
                indent=1,
            )
    return int(any(r.verdict == FAIL for _, r in results))


if __name__ == "__main__":
    sys.exit(main())
