"""The fuzzer's ``ilu`` family: ``ilu0``/``ic0`` on 3-, 5-, 9-, 7- and 27-point stencils on
grids whose axes are 1..5 (any position) and a few larger, with every ``order``, ``method``,
``solves`` and ``shift``, against a NumPy textbook (IKJ) ILU(0)/IC(0) on the documented
pattern (the stored diagonals, restricted to grid neighbours when a grid is given).
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

import jaxdia

from .banded import hermitian_of
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
from .grids import STENCILS, flat_index, is_live, stencil_matrix

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


def generate(rng, seed: int) -> dict:
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
    stored = [d for d in cells if is_live(d, grid) and flat_index(d, grid) in offsets]
    flipped = [tuple(-s if a in axes else s for a, s in enumerate(d)) for d in stored]
    return permuted, tuple(sorted({flat_index(d, grid) for d in flipped})), perm


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


def check(params: dict) -> Result:
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
        dense = hermitian_of(dense, lower=True)  # IC(0) reads the lower triangle
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
