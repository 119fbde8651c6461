"""The ``lstsq`` family: ``jaxdia.lstsq_banded`` on random ``m x n`` banded matrices
(``m >= n``), against ``np.linalg.lstsq`` in double precision.

Cases: random bands (offsets near the diagonal and far below it, bands wider than the
matrix), columns scaled over many orders of magnitude, matrices near a rank-deficient
one (``D + level R``: ``D`` a first-difference matrix whose null vector is ``ones``, ``R``
random, ``level`` from 1e-1 to 1e-14), exactly rank-deficient ones (``level = 0``, or a
zero column), and NaN entries; float32/64 and complex; vectors and blocks of right-hand
sides, consistent (zero residual) or not; eager, ``jit`` and ``vmap`` over a batch.

Verdicts: a finite answer is PASS within a condition-aware tolerance of the oracle (in
the variables of the column-scaled problem, ``y = D x``, where the method's accuracy is
stated: ``eps (kappa + kappa^2 rho)`` up to a modest constant, ``kappa`` the condition
number of ``A`` with unit columns and ``rho = |r| / (|A D| |y|)``), FAIL beyond it (a
wrong answer reported as success; a rank-deficient matrix answered is one). A
``LinAlgError`` from ``lstsq_banded`` or an all-NaN answer under ``jit`` is FLAGGED: a
refusal, ``unexpected`` when ``kappa^2 eps`` is far below the method's limit (1e-2).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np

import jaxdia

from .core import (
    DTYPES,
    FAIL,
    FLAGGED,
    PASS,
    Outcome,
    Result,
    machine_epsilon,
    pick,
    raised,
    random_values,
    wide_dtype,
)

TIMEOUT = 60.0
#: ``kappa^2 eps`` below which a refusal is unexpected: the method's limit (1e-2) over the
#: factor by which its condition estimate may overestimate.
EXPECTED_TO_SOLVE = 1e-4


def generate(rng, seed) -> dict:
    del seed
    n = int(pick(rng, {1: 1, 2: 1, 3: 1, 5: 2, 12: 3, 30: 3, 60: 1}))
    extra = int(pick(rng, {0: 2, 1: 2, 3: 2, 10: 2, 40: 1, 150: 1}))
    m = n + extra
    kind = pick(
        rng,
        {"random": 5, "scaled": 2, "near": 4, "deficient": 2, "zero_column": 1, "nan": 1},
    )
    count = int(rng.integers(1, 5))
    near = sorted({int(k) for k in rng.integers(-3, 3, count)})
    far = [int(-rng.integers(4, m + 5))] if rng.random() < 0.4 else []
    wide = [int(rng.integers(n, n + 4))] if rng.random() < 0.15 else []  # beyond the matrix
    offsets = sorted({*near, *far, *wide} | ({0, 1} if kind in ("near", "deficient") else set()))
    return {
        "m": m,
        "n": n,
        "offsets": offsets,
        "kind": kind,
        "level": float(10.0 ** -rng.integers(1, 15)),
        "dtype": pick(rng, {"float64": 4, "complex128": 2, "float32": 2, "complex64": 1}),
        "rhs": pick(rng, {"vector": 3, "block": 1}),
        "consistent": bool(rng.random() < 0.3),
        "mode": pick(rng, {"eager": 2, "jit": 2, "vmap": 1}),
        "values": int(rng.integers(2**31)),
    }


def _matrix(params: dict, rng) -> tuple[np.ndarray, tuple[int, ...]]:
    """DIA ``data`` (double precision, zero padding) and offsets of the case's matrix."""
    m, n, offsets, kind = params["m"], params["n"], tuple(params["offsets"]), params["kind"]
    dtype = wide_dtype(DTYPES[params["dtype"]])
    data = random_values(rng, (len(offsets), n), dtype).astype(dtype)
    if kind in ("near", "deficient"):
        level = params["level"] if kind == "near" else 0.0
        data *= level
        difference = np.zeros_like(data)
        difference[offsets.index(0)] = -1.0
        difference[offsets.index(0), -1] = 0.0  # null vector: ones
        difference[offsets.index(1)] = 1.0
        data += difference
    elif kind == "scaled":
        data *= 10.0 ** rng.uniform(-8, 8, n)
    elif kind == "zero_column":
        data[:, int(rng.integers(n))] = 0.0
    elif kind == "nan":
        data[int(rng.integers(len(offsets))), int(rng.integers(n))] = np.nan
    cols = np.arange(n)
    for k, offset in enumerate(offsets):
        rows = cols - offset
        data[k, (rows < 0) | (rows >= m)] = 0.0
    return data, offsets


def _dense(data: np.ndarray, offsets, shape) -> np.ndarray:
    m, n = shape
    dense = np.zeros((m, n), data.dtype)
    for k, offset in enumerate(offsets):
        for j in range(max(0, offset), min(n, m + offset)):
            dense[j - offset, j] = data[k, j]
    return dense


def check(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    m, n = params["m"], params["n"]
    dtype = DTYPES[params["dtype"]]
    data, offsets = _matrix(params, rng)
    dense = _dense(data, offsets, (m, n))
    columns = 1 if params["rhs"] == "vector" else 2
    if params["consistent"]:
        b = dense @ random_values(rng, (n, columns), dtype)
    else:
        b = random_values(rng, (m, columns), dtype)
    b = b[:, 0] if params["rhs"] == "vector" else b
    A = jaxdia.DiaMatrix(data.astype(dtype), offsets, (m, n))
    b_cast = jnp.asarray(b.astype(dtype))
    try:
        if params["mode"] == "eager":
            x = jaxdia.lstsq_banded(A, b_cast)
        elif params["mode"] == "jit":
            x = jax.jit(jaxdia.lstsq_banded)(A, b_cast)
        else:  # a batch of two: the matrix and twice it
            batch = jaxdia.DiaMatrix(jnp.stack([A.data, 2 * A.data]), A.offsets, A.shape)
            both = jax.vmap(jaxdia.lstsq_banded, in_axes=(0, None))(batch, b_cast)
            # Both members solve A's problem: side by side, as columns.
            x = np.concatenate([_columns(both[0]), _columns(2 * both[1])], axis=-1)
    except Exception as error:  # noqa: BLE001 - every exception is judged
        kappa, _ = _conditioning(dense)
        unexpected = bool(kappa**2 * machine_epsilon(dtype) < EXPECTED_TO_SOLVE)
        result = raised(error, unexpected=unexpected and bool(np.all(np.isfinite(dense))))
        if result.verdict == FLAGGED and not isinstance(error, np.linalg.LinAlgError):
            return Result(FAIL, f"not a LinAlgError: {result.detail}")
        return result
    if params["mode"] == "vmap":
        b = np.concatenate([_columns(b), _columns(b)], axis=-1)
    return _judge(np.asarray(x).astype(wide_dtype(dtype)), dense, b, dtype)


def _columns(array) -> np.ndarray:
    array = np.asarray(array)
    return array[:, None] if array.ndim == 1 else array


def _conditioning(dense: np.ndarray) -> tuple[float, np.ndarray]:
    """``kappa`` of ``dense`` with unit columns, and the column norms (1 for zero ones)."""
    if not np.all(np.isfinite(dense)):
        return math.inf, np.ones(dense.shape[1])
    norms = np.linalg.norm(dense, axis=0)
    if np.any(norms == 0):
        return math.inf, np.ones(dense.shape[1])
    s = np.linalg.svd(dense / norms, compute_uv=False)
    return (float(s[0] / s[-1]) if s[-1] > 0 else math.inf), norms


def _judge(x: np.ndarray, dense: np.ndarray, b: np.ndarray, dtype) -> Result:
    outcome = Outcome()
    eps = machine_epsilon(dtype)
    kappa, norms = _conditioning(dense)
    if np.all(np.isnan(x)):
        outcome.add(
            FLAGGED,
            f"NaN (refused) at kappa {kappa:.2e}",
            unexpected=kappa**2 * eps < EXPECTED_TO_SOLVE,
        )
        return outcome.result()
    if not np.all(np.isfinite(x)):
        outcome.add(FAIL, "partly non-finite answer")
        return outcome.result()
    if not math.isfinite(kappa):
        outcome.add(FAIL, "a rank-deficient matrix answered as if it had full rank")
        return outcome.result()
    scaled = dense / norms
    wide_b = b.astype(np.complex128)
    y_true = np.linalg.lstsq(scaled, wide_b, rcond=None)[0]
    y = x * (norms if x.ndim == 1 else norms[:, None])
    residual = np.linalg.norm(scaled @ y_true - wide_b)
    size = np.linalg.norm(y_true)
    if size == 0:
        error = np.linalg.norm(y)
        rho = 1.0
    else:
        error = np.linalg.norm(y - y_true) / size
        rho = residual / (np.linalg.norm(scaled, 2) * size)
    n = dense.shape[1]
    tolerance = 5 * math.sqrt(n + 1) * eps * (kappa + kappa**2 * rho) + 10 * eps
    ratio = float(error / tolerance)
    if ratio > 1:
        outcome.add(
            FAIL, f"error {error:.2e} > tolerance {tolerance:.2e} (kappa {kappa:.2e})", ratio
        )
    else:
        outcome.add(PASS, "", ratio)
    return outcome.result()
