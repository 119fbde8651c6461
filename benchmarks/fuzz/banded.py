"""The fuzzer's ``banded`` family: ``solve_banded``, ``lu_factor(...).solve`` (``trans`` 0, 1,
2), ``factorized``, ``cho_factor``/``cho_solve`` (either triangle, garbage in the other),
``solveh_banded`` and lineax's ``BandedSolver``; each implementation of the factors
(``method=``: ``"auto"``, LAPACK on the host, ``lax.scan``, cyclic reduction; lineax's
solver always ``"auto"``, as it has no ``method``), eager, jitted, ``vmap``-ed
and batched; n from 0 to 600, bands wider than n and offsets out of range, the four float
and complex dtypes (and 16-bit ones), right-hand sides of other dtypes; diagonally dominant,
random, pivoting, graded (ill-conditioned), singular and non-finite matrices.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

import jaxdia

from .core import (
    CLEAR_ERRORS,
    DTYPES,
    FAIL,
    FLAGGED,
    PASS,
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

#: This family's position in ``fuzz_solve.BUILTIN_FAMILIES`` (fixed), which seeds its pool
#: of structures as it seeds its cases.
POSITION = 0
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
METHODS = {"auto": 4, "lapack": 2, "scan": 2, "parallel": 2}
MODES = {"eager": 4, "jit": 3, "batched": 2, "vmap_both": 1, "vmap_A": 0.5, "vmap_b": 0.5}
BATCHES = {1: 1, 2: 2, 3: 2, 8: 2, 9: 1, 64: 1}


def _width(value, n: int) -> int:
    if isinstance(value, int):
        return value
    return {"n-1": n - 1, "n": n, "n+2": n + 2}[value]


def _structure_pool(seed: int, size: int = 48) -> list[tuple[int, tuple[int, ...]]]:
    """The ``(n, offsets)`` structures a run draws from: a pool per seed, so
    that compiled programs are reused by many cases (compilation dominates a case)."""
    rng = np.random.default_rng([seed, POSITION, 2**20])
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


def generate(rng, seed: int) -> dict:
    n, offsets = _structure_pool(seed)[int(rng.integers(48))]
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
    return solve_params(rng, n, offsets, api, matrix, dtype)


def solve_params(rng, n, offsets, api, matrix, dtype) -> dict:
    mode = pick(rng, MODES)
    if api.startswith("lineax"):
        mode = pick(rng, {"eager": 2, "jit": 1})
    batch = int(pick(rng, BATCHES)) if mode != "eager" and mode != "jit" else 0
    if batch == 64 and n > 64:
        batch = 8
    rhs = pick(rng, {"vector": 5, "matrix": 3, "stack": 1})
    if api.startswith("lineax") or mode.startswith("vmap"):
        rhs = pick(rng, {"vector": 3, "matrix": 1}) if not api.startswith("lineax") else "vector"
    # "precision": b in the other precision of its kind (float64 for a float32 or 16-bit
    # matrix, float32 for a float64 one; complex likewise)
    rhs_dtype = pick(rng, {"same": 17, "complex": 2, "precision": 1})
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


def band_matrix(rng, n: int, offsets, kind: str, dtype, batch: int):
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
        return _call_api(api, jaxdia.DiaMatrix(data, offsets, (n, n)), b, method)

    if mode == "jit":
        return jax.jit(call)
    return jax.jit(jax.vmap(call, in_axes=in_axes))


def _call_api(api: str, A, b, method: str):
    """``(x, info)`` of one api with ``method`` forced: ``info`` the factor's (or lineax's
    result as 0/1), None where the api reports nothing but NaN."""
    import lineax as lx

    if api == "solve_banded":
        return jaxdia.solve_banded(A, b, method=method), None
    if api.startswith("lu_solve"):
        lu = jaxdia.lu_factor(A, method=method)
        return lu.solve(b, trans=int(api[-1])), lu.info
    if api == "factorized":
        solve = jaxdia.factorized(A, method=method)
        return solve(b), solve.args[0].info
    if api in ("cho_solve_upper", "cho_solve_lower"):
        c = jaxdia.cho_factor(A, lower=api.endswith("lower"), method=method)
        return jaxdia.cho_solve(c, b), c.info
    if api == "solveh_banded":
        return jaxdia.solveh_banded(A, b, method=method), None
    if api.startswith("lineax"):
        solver = jaxdia.BandedSolver(positive_definite=api == "lineax_pd")
        sol = lx.linear_solve(jaxdia.DiaLinearOperator(A), b, solver, throw=False)
        return sol.value, jnp.where(sol.result == lx.RESULTS.successful, 0, 1)
    raise AssertionError(api)


def check_solve(params: dict, dense=None, expected=None, stored=None) -> Result:
    """Runs one banded solve case (``params`` from :func:`generate`, or the periodic
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
            dense, expected = band_matrix(rng, n, offsets, params["matrix"], dtype, batch)
            stored = dense
    data = dia_data(stored, offsets, params["padding"], rng)
    if params["dtype"] == "bfloat16":
        data = data.real.astype(np.float32)
    data = data.astype(dtype)
    # the oracle's matrix is the one jaxdia sees: after rounding to dtype
    rounded = dense_of(data, offsets, n)
    if cholesky:
        rounded = hermitian_of(rounded, api == "cho_solve_lower")
    # right-hand sides
    rhs_dtype = dtype
    if params["rhs_dtype"] == "complex" and dtype.kind == "f":
        rhs_dtype = np.dtype(np.complex64 if dtype.itemsize <= 4 else np.complex128)
    elif params["rhs_dtype"] == "precision":
        wide = np.dtype(np.complex128 if dtype.kind == "c" else np.float64)
        narrow = np.dtype(np.complex64 if dtype.kind == "c" else np.float32)
        rhs_dtype = narrow if dtype == wide else wide
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
    A_data = data if batched and mode != "vmap_b" else data[0]
    try:
        if mode in ("eager", "batched"):
            A = jaxdia.DiaMatrix(A_data, offsets, (n, n))
            x, info = _call_api(api, A, b, params["method"])
        else:
            in_axes = {"jit": None, "vmap_both": (0, 0), "vmap_A": (0, None), "vmap_b": (None, 0)}
            x, info = _compiled(api, mode, offsets, n, params["method"], in_axes[mode])(A_data, b)
    except CLEAR_ERRORS as error:
        return raised(error, unexpected=expected == "ok")
    x = np.asarray(jax.device_get(x))
    info = None if info is None else np.asarray(jax.device_get(info))
    return _judge_solve(params, rounded, expected, b, x, info, api, dtype, rhs_dtype)


def hermitian_of(dense: np.ndarray, lower: bool) -> np.ndarray:
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


def check(params: dict) -> Result:
    return check_solve(params)
