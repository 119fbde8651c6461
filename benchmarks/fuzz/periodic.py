"""The fuzzer's ``periodic`` family: bands plus corner diagonals (periodic stencils of
half-width 1-3, one or both corners), small n where the corners overlap the band, bands that are
singular or badly conditioned while the whole matrix is not, singular periodic Laplacians.

The solves are the ``banded`` family's (:func:`fuzz.banded.check_solve`).
"""

from __future__ import annotations

import numpy as np

from .banded import check_solve, hermitian_of, solve_params
from .core import (
    DTYPES,
    FAIL,
    Result,
    condition_number,
    machine_epsilon,
    pick,
    random_values,
    wide_dtype,
)


def generate(rng, seed: int) -> dict:
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
    params = solve_params(rng, n, (), api, matrix, dtype)
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


def check(params: dict) -> Result:
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
        dense = hermitian_of(dense, lower)
    else:
        stored = dense
    # tiny n can make the "well conditioned" constructions singular: judge by the matrix
    cond = max(condition_number(member) for member in dense)
    if expected == "ok" and cond > 1e6:
        expected = "flag" if cond > 0.1 / machine_epsilon(dtype) else "any"
    if expected == "ok" and params["mode"] != "eager" and _refused_split(dense, params["half"]):
        expected = "any"
    result = check_solve(params, dense=dense, expected=expected, stored=stored)
    if result.verdict == FAIL and params["matrix"] in ("band_ill",):
        result.detail += " [band ill-conditioned, whole matrix well conditioned]"
    return result


def _refused_split(dense: np.ndarray, half: int) -> bool:
    """Whether a factor that splits the corners off (``2 (2 half + 1) <= n``) may refuse
    its Woodbury correction: the band ``B`` without the corners singular or its growth
    ``1 + ||B^-1 C||_inf`` (``C`` the corners) near ``MAX_GROWTH`` (1e3). Outside
    ``jit`` such a factor factors the whole band instead; under ``jit`` and in batches its
    solutions are NaN with ``info = -3`` (docs/solvers.md), a documented refusal."""
    n = dense.shape[-1]
    if 2 * (2 * half + 1) > n:
        return False
    rows, cols = np.indices((n, n))
    on_band = np.abs(cols - rows) <= half
    for member in dense:
        band = np.where(on_band, member, 0)
        corners = np.where(on_band, 0, member)
        try:
            growth = 1 + np.abs(np.linalg.solve(band, corners)).sum(axis=1).max()
        except np.linalg.LinAlgError:
            return True
        if not np.isfinite(growth) or growth > 1e2:
            return True
    return False
