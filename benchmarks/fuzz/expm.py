"""The ``expm`` family: ``jaxdia.expm_multiply`` on random square DIA matrices, against
SciPy's dense ``expm`` in double precision (of the case's rounded inputs), and its
reverse-mode gradient against ``jax.scipy.linalg.expm``'s.

Cases: tiny and moderate ``n`` (1 to 150), offsets near the diagonal, beyond the matrix
(empty diagonals), or scattered (``0, +-1, +-8, +-32``: the powers' norms estimated, not
formed); random non-normal bands, symmetric ones, Schrödinger-like ``-1j H``, strictly
upper (nilpotent) ones, stiff ones (a large negative diagonal), the zero matrix and NaN
entries; norms ``||A||_1`` from 1e-3 to 300 (many substeps); NaN padding (never read);
float32/64 and complex, a real matrix with a complex ``B`` or the other way round;
vectors, blocks and a batch of two matrices (under ``vmap``, or one batched DiaMatrix);
a single time or a grid of 2 to 7 times (negative starts, with or without the
endpoint); ``traceA`` exact, zero or wrong; eager, ``jit`` and ``vmap``; and the
gradient of a loss w.r.t. ``A.data`` and ``B``. The same matrix is also passed as another
operator (``operator``, drawn last so that earlier seeds keep their cases): a dense NumPy
array, a ``scipy.sparse`` matrix, ``aslinearoperator`` of it, a ``LinearOperator`` whose
NumPy products run on the host, a lineax operator or a function written in JAX (its
norms estimated, its trace too without ``traceA``); ``vmap`` then maps a batch of two
``B`` (``B`` and ``-2 B``), and the gradient is w.r.t. ``B`` (a ``TypeError`` through the
host operator, which is what must happen).

Verdicts: PASS within a rounding bound on the error of the Taylor method,
``c u (1 + ||t A'||_1) e^min(||t A'||_1, 10) P K`` (``A' = A - mu I`` the shifted matrix,
``P`` the largest ``||exp(tau A) B||`` and ``K`` the largest ``||exp(tau A)||`` over the
times ``tau`` from 0 to ``t``: the hump of a non-normal matrix), FAIL beyond it or for a
non-finite answer to a finite problem (``expm_multiply`` has no failure to report),
unless ``P`` is within ``1e5`` of the dtype's largest value (an overflow: FLAGGED).
A matrix with a NaN entry must answer NaN (FLAGGED); a finite answer is a FAIL. A
``ValueError``/``TypeError`` from jaxdia is FLAGGED (unexpected: every drawn case is
valid).
"""

from __future__ import annotations

import math
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg as sla
import scipy.sparse as sp
import scipy.sparse.linalg as spla

import jaxdia

from .core import (
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

TIMEOUT = 90.0
#: The constant of the rounding bound.
SLACK = 50.0
#: Times ``tau`` between 0 and ``t`` at which the hump ``P``, ``K`` is sampled.
HUMP_SAMPLES = 12


def generate(rng, seed) -> dict:
    del seed
    n = int(pick(rng, {1: 1, 2: 1, 3: 1, 5: 2, 8: 2, 20: 3, 60: 2, 150: 1}))
    offsets_kind = pick(rng, {"near": 6, "wide": 1, "scattered": 1})
    if offsets_kind == "scattered" and n >= 40:
        offsets = [-32, -8, -1, 0, 1, 8, 32]
    else:
        count = int(rng.integers(1, 6))
        offsets = sorted({int(k) for k in rng.integers(-3, 4, count)})
        if offsets_kind == "wide":
            offsets = sorted({*offsets, int(rng.integers(n, n + 3)), -int(rng.integers(1, n + 3))})
    grid = pick(rng, {"none": 3, "grid": 2})
    return {
        "n": n,
        "offsets": offsets,
        "kind": pick(
            rng,
            {
                "random": 5,
                "symmetric": 2,
                "schrodinger": 2,
                "nilpotent": 1,
                "stiff": 1,
                "zero": 1,
                "nan": 1,
            },
        ),
        "norm": float(10.0 ** rng.uniform(-3, 2.5)),
        "dtype": pick(rng, {"float64": 4, "complex128": 2, "float32": 2, "complex64": 1}),
        "b_dtype": pick(rng, {"same": 4, "complex": 1}),
        "rhs": pick(rng, {"vector": 3, "block": 2}),
        "grid": grid,
        "start": float(pick(rng, {0.0: 2, -0.5: 1, 0.3: 1})),
        "stop": float(pick(rng, {1.0: 3, 0.2: 1, -1.0: 1})),
        "num": int(pick(rng, {2: 1, 3: 2, 7: 1})),
        "endpoint": bool(rng.random() < 0.7),
        "trace": pick(rng, {"exact": 6, "zero": 1, "wrong": 1}),
        "mode": pick(rng, {"eager": 3, "jit": 2, "vmap": 1, "grad": 2}),
        "values": int(rng.integers(2**31)),
        "operator": pick(
            rng,
            {
                "dia": 12,
                "dense": 1,
                "sparse": 1,
                "aslinearoperator": 1,
                "host": 1,
                "lineax": 1,
                "function": 1,
            },
        ),
    }


def _dense(params: dict, rng) -> np.ndarray:
    """The case's matrix, dense, in double precision (zero outside its offsets)."""
    n, offsets, kind = params["n"], params["offsets"], params["kind"]
    dtype = wide_dtype(DTYPES[params["dtype"]])
    on_band = np.zeros((n, n), bool)
    rows, cols = np.indices((n, n))
    for offset in offsets:
        on_band |= cols - rows == offset
    M = random_values(rng, (n, n), dtype)
    if kind == "symmetric":
        M = M + M.conj().T
        on_band |= on_band.T
    elif kind == "schrodinger":  # skew-Hermitian (skew-symmetric if real): exp is unitary
        M = -1j * (M + M.conj().T) if np.iscomplexobj(M) else M - M.T
        on_band |= on_band.T
    elif kind == "nilpotent":
        on_band &= cols > rows
    elif kind == "zero":
        M = np.zeros_like(M)
    M = np.where(on_band, M, 0)
    norm = np.abs(M).sum(axis=0).max()
    if norm > 0:
        M = M * (params["norm"] / norm)
    if kind == "stiff":
        M = M - params["norm"] * 10 * np.eye(n)  # a large negative diagonal
    if kind == "nan":
        i, j = np.nonzero(on_band | np.eye(n, dtype=bool))
        k = int(rng.integers(len(i)))
        M[i[k], j[k]] = np.nan
    return M.astype(dtype)


def _all_offsets(dense: np.ndarray, offsets) -> tuple[int, ...]:
    """``offsets`` plus those of the transpose and the diagonal, where ``dense`` has
    entries there (symmetric kinds, a stiff diagonal), within the matrix."""
    n = dense.shape[0]
    found = {int(c - r) for r, c in zip(*np.nonzero(dense))} if n else set()
    return tuple(sorted({*offsets, *found}))


def times(params: dict) -> list[float] | None:
    if params["grid"] == "none":
        return None
    return [
        float(t)
        for t in np.linspace(
            params["start"], params["stop"], params["num"], endpoint=params["endpoint"]
        )
    ]


def check(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    n = params["n"]
    dtype = DTYPES[params["dtype"]]
    dense = _dense(params, rng)
    offsets = _all_offsets(np.nan_to_num(dense, nan=1.0), params["offsets"])
    data = dia_data(dense, offsets, padding="nan").astype(dtype)
    A = jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))
    b_dtype = dtype if params["b_dtype"] == "same" else np.complex128
    if np.dtype(dtype) == np.float32 and params["b_dtype"] == "complex":
        b_dtype = np.complex64
    shape = (n,) if params["rhs"] == "vector" else (n, 2)
    B = random_values(rng, shape, b_dtype).astype(b_dtype)
    trace = complex(np.trace(dense_of(data, offsets, n))) if n else 0.0
    traceA = {"exact": None, "zero": 0.0, "wrong": trace + 3.7 * n}[params["trace"]]
    if traceA is not None and np.dtype(dtype).kind == "f":
        traceA = float(np.real(traceA))
    grid = times(params)
    kwargs = (
        {}
        if grid is None
        else {
            "start": params["start"],
            "stop": params["stop"],
            "num": params["num"],
            "endpoint": params["endpoint"],
        }
    )
    if params.get("operator", "dia") != "dia":
        return _check_operator(params, dense_of(data, offsets, n), B, kwargs, traceA, grid)
    if params["mode"] == "grad":
        return _check_gradient(params, A, B, kwargs, traceA)
    try:
        direct = params["values"] % 2 == 1  # half the vmap cases: a batched DiaMatrix
        X = _call(params["mode"], A, jnp.asarray(B), kwargs, traceA, direct)
    except Exception as error:  # noqa: BLE001 - every exception is judged
        return raised(error, unexpected=True)
    traceA = None if params["mode"] == "vmap" else traceA  # the batch computes its own
    return _judge(np.asarray(X), dense_of(data, offsets, n), B, grid, traceA, dtype)


def _call(mode: str, A, B, kwargs, traceA, direct: bool = False):
    def run(A, B):
        return jaxdia.expm_multiply(A, B, traceA=traceA, **kwargs)

    if mode == "eager":
        return run(A, B)
    if mode == "jit":
        return jax.jit(run)(A, B)
    # a batch of two: the matrix and half of it, solved side by side (mapped by vmap, or
    # ``direct``: a batched DiaMatrix, batched by expm_multiply itself)
    batch = jaxdia.DiaMatrix(jnp.stack([A.data, A.data / 2]), A.offsets, A.shape)
    if direct:
        both = jaxdia.expm_multiply(batch, B, **kwargs)
    else:
        both = jax.vmap(
            lambda d, B: jaxdia.expm_multiply(
                jaxdia.DiaMatrix(d, A.offsets, A.shape), B, traceA=None, **kwargs
            ),
            in_axes=(0, None),
        )(batch.data, B)
    full = jaxdia.expm_multiply(A, B, **kwargs)
    # the first member is the matrix itself; the second is compared with A / 2 by the caller
    return np.stack([np.asarray(both[0]), np.asarray(full), np.asarray(both[1])])


def _judge(X, dense, B, grid, traceA, dtype) -> Result:
    outcome = Outcome()
    n = dense.shape[0]
    if not np.all(np.isfinite(dense)):
        if np.all(np.isfinite(X)) and n > 0:
            outcome.add(FAIL, "a matrix with a NaN entry answered finite")
        else:
            outcome.add(FLAGGED, "NaN entry: non-finite answer")
        return outcome.result()
    members = [(X, dense)]
    if X.ndim == B.ndim + 1 + (grid is not None):  # vmap: itself, eager, half
        members = [(X[0], dense), (X[1], dense), (X[2], dense / 2)]
    for X_k, M in members:
        _judge_one(outcome, X_k, M, B, grid, traceA, dtype)
    return outcome.result()


def _judge_one(outcome, X, M, B, grid, traceA, dtype):
    n = M.shape[0]
    eps = machine_epsilon(dtype) / 2
    if np.dtype(B.dtype).kind == "c" or np.dtype(dtype).kind == "c":
        eps = max(eps, machine_epsilon(B.dtype) / 2)
    mu = (traceA if traceA is not None else np.trace(M)) / max(n, 1)
    wide_B = B.astype(np.complex128)
    for k, t in enumerate([1.0] if grid is None else grid):
        X_t = X if grid is None else X[k]
        expected = sla.expm(t * M) @ wide_B if n else wide_B
        shifted = t * (M - mu * np.eye(n))
        size = float(np.abs(shifted).sum(axis=0).max(initial=0.0))
        peak, gain = 0.0, 1.0
        for tau in np.linspace(0, t, HUMP_SAMPLES):
            E = sla.expm(tau * M) if n else np.eye(0)
            peak = max(peak, float(np.abs(E @ wide_B).max(initial=0.0)))
            gain = max(gain, float(np.linalg.norm(E, 2)) if n else 1.0)
        scale = abs(np.exp(np.real(mu * t)))
        peak = max(peak, float(np.abs(wide_B).max(initial=0.0)))
        if not np.all(np.isfinite(X_t)):
            # the answer, or the Taylor terms on the way (up to e^theta_55 ~ 2e4 times the
            # hump), beyond the dtype's range: an overflow is the right report
            overflow = peak * 1e5 > float(np.finfo(np.asarray(X_t).dtype).max)
            verdict = FLAGGED if overflow else FAIL
            outcome.add(verdict, f"non-finite answer at t = {t} (hump {peak:.1e})")
            return
        tolerance = (
            SLACK * eps * (1 + size) * math.exp(min(size, 10.0)) * peak * gain * max(1.0, scale)
        )
        error = float(np.abs(X_t - expected).max(initial=0.0))
        ratio = error / tolerance if tolerance > 0 else (0.0 if error == 0 else math.inf)
        if ratio > 1:
            outcome.add(
                FAIL,
                f"t = {t}: error {error:.2e} > tolerance {tolerance:.2e} "
                f"(||t A'||_1 {size:.2e}, hump {peak:.2e}, gain {gain:.2e})",
                ratio,
            )
        else:
            outcome.add(PASS, "", ratio)


def _check_gradient(params: dict, A, B, kwargs, traceA) -> Result:
    """The gradient of ``sum |G * X|^2`` w.r.t. ``A.data`` (in-bounds slots) and ``B``,
    against the same loss through ``jax.scipy.linalg.expm`` of the dense matrix."""
    outcome = Outcome()
    n = A.shape[0]
    if n > 40 or not np.all(np.isfinite(np.asarray(A.todense()))):
        params = {**params, "mode": "eager"}  # dense gradients of large n: too slow
        X = jaxdia.expm_multiply(A, jnp.asarray(B), traceA=traceA, **kwargs)
        M = np.asarray(A.todense()).astype(wide_dtype(A.dtype))
        return _judge(np.asarray(X), M, B, times(params), traceA, DTYPES[params["dtype"]])
    wide = wide_dtype(A.dtype)
    clean = np.nan_to_num(np.asarray(A.data).astype(wide), nan=0.0)
    mask = np.zeros(A.data.shape, bool)
    cols = np.arange(n)
    for k, offset in enumerate(A.offsets):
        rows = cols - offset
        mask[k] = (rows >= 0) & (rows < n)
    clean = np.where(mask, clean, 0)
    B_wide = jnp.asarray(B.astype(wide_dtype(B.dtype)))
    G = np.random.default_rng(params["values"] + 1).standard_normal(B.shape)
    grid = times(params)

    def loss(data, B, oracle):
        M = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        if oracle:
            dense = M.todense()
            if grid is None:
                X = jax.scipy.linalg.expm(dense) @ B
            else:
                X = jnp.stack([jax.scipy.linalg.expm(t * dense) @ B for t in grid])
        else:
            X = jaxdia.expm_multiply(M, B, traceA=traceA, **kwargs)
        return jnp.sum(jnp.abs(X * G) ** 2)

    try:
        got = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(
            jnp.asarray(np.where(mask, np.asarray(A.data), np.nan)), jnp.asarray(B), False
        )
    except Exception as error:  # noqa: BLE001 - every exception is judged
        return raised(error, unexpected=True)
    expected = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(
        jnp.asarray(clean), B_wide, True
    )
    got_data, got_B = np.asarray(got[0]), np.asarray(got[1])
    if np.any(got_data[~mask] != 0):
        outcome.add(FAIL, "a gradient on padding slots")
    eps = machine_epsilon(A.dtype)
    size = float(np.abs(np.asarray(A.todense())).sum(axis=0).max(initial=0.0))
    span = max([1.0] + [abs(t) for t in grid or []])
    growth = math.exp(min(2 * size * span, 30.0))
    for name, value, oracle in (
        ("A.data", np.where(mask, got_data, 0), np.asarray(expected[0])),
        ("B", got_B, np.asarray(expected[1])),
    ):
        if not np.all(np.isfinite(value)):
            outcome.add(FAIL, f"non-finite gradient w.r.t. {name}")
            continue
        scale = max(float(np.abs(oracle).max(initial=0.0)), 1e-300)
        error = float(np.abs(value - oracle).max(initial=0.0)) / scale
        tolerance = SLACK * 100 * eps * growth
        ratio = error / tolerance
        if ratio > 1:
            outcome.add(
                FAIL,
                f"gradient w.r.t. {name}: relative error {error:.2e} > {tolerance:.2e}",
                ratio,
            )
        else:
            outcome.add(PASS, "", ratio)
    return outcome.result()


def _operator(kind: str, M: np.ndarray):
    """The matrix ``M`` (in the case's dtype) as the operator ``kind``."""
    if kind == "dense":
        return M
    if kind == "sparse":
        return sp.csr_array(M)
    if kind == "aslinearoperator":
        return spla.aslinearoperator(M)
    if kind == "host":
        return spla.LinearOperator(
            M.shape, matvec=lambda v: M @ v, rmatvec=lambda v: M.conj().T @ v, dtype=M.dtype
        )
    if kind == "lineax":
        import lineax

        return lineax.MatrixLinearOperator(jnp.asarray(M))
    matrix = jnp.asarray(M)
    return lambda v: jnp.matmul(matrix, v, precision=jax.lax.Precision.HIGHEST)


def _check_operator(params: dict, dense: np.ndarray, B, kwargs, traceA, grid) -> Result:
    """``expm_multiply`` of the case's matrix (rounded to its dtype) as another operator:
    judged as the DiaMatrix (eager, ``jit``; ``vmap`` over ``B`` and ``-2 B``), or its
    gradient w.r.t. ``B`` against dense ``expm``'s."""
    dtype = DTYPES[params["dtype"]]
    A = _operator(params["operator"], dense.astype(dtype))
    mode = params["mode"]

    def run(B):
        with warnings.catch_warnings():  # SciPy's warning that the trace is estimated
            warnings.simplefilter("ignore", UserWarning)
            return jaxdia.expm_multiply(A, B, traceA=traceA, **kwargs)

    if mode == "grad":
        return _check_operator_gradient(params, dense, run, B, grid)
    try:
        if mode == "vmap":
            both = jax.vmap(run)(jnp.stack([jnp.asarray(B), -2 * jnp.asarray(B)]))
            X = np.asarray(both[0])
            other = np.asarray(both[1])
        else:
            X = np.asarray((jax.jit(run) if mode == "jit" else run)(jnp.asarray(B)))
            other = None
    except Exception as error:  # noqa: BLE001 - every exception is judged
        return raised(error, unexpected=True)
    result = _judge(X, dense, B, grid, traceA, dtype)
    if other is None or result.verdict != PASS:
        return result
    return _judge(other, dense, -2 * B, grid, traceA, dtype)


def _check_operator_gradient(params: dict, dense: np.ndarray, run, B, grid) -> Result:
    """The gradient of ``sum |G * X|^2`` w.r.t. ``B`` against the same loss through
    ``jax.scipy.linalg.expm``; through a host operator, the ``TypeError`` it must raise."""
    outcome = Outcome()
    n = dense.shape[0]
    G = np.random.default_rng(params["values"] + 1).standard_normal(B.shape)
    wide = jnp.asarray(dense.astype(wide_dtype(dense.dtype)))

    def loss(B):
        return jnp.sum(jnp.abs(run(B) * G) ** 2)

    def oracle(B):
        if grid is None:
            X = jax.scipy.linalg.expm(wide) @ B
        else:
            X = jnp.stack([jax.scipy.linalg.expm(t * wide) @ B for t in grid])
        return jnp.sum(jnp.abs(X * G) ** 2)

    try:
        got = np.asarray(jax.grad(loss)(jnp.asarray(B)))
    except TypeError as error:
        if params["operator"] == "host" and "runs on the host" in str(error):
            return Result(PASS, "the host operator's TypeError")
        return raised(error, unexpected=True)
    except Exception as error:  # noqa: BLE001 - every exception is judged
        return raised(error, unexpected=True)
    if params["operator"] == "host":
        return Result(FAIL, "a gradient through a host operator did not raise")
    if n > 40 or not np.all(np.isfinite(dense)):
        if np.all(np.isfinite(dense)) and not np.all(np.isfinite(got)):
            outcome.add(FAIL, "non-finite gradient w.r.t. B")
        return outcome.result()
    expected = np.asarray(jax.grad(oracle)(jnp.asarray(B.astype(wide_dtype(B.dtype)))))
    if not np.all(np.isfinite(got)):
        outcome.add(FAIL, "non-finite gradient w.r.t. B")
        return outcome.result()
    eps = machine_epsilon(np.result_type(DTYPES[params["dtype"]], B.dtype))
    size = float(np.abs(dense).sum(axis=0).max(initial=0.0))
    span = max([1.0] + [abs(t) for t in grid or []])
    scale = max(float(np.abs(expected).max(initial=0.0)), 1e-300)
    error = float(np.abs(got - expected).max(initial=0.0)) / scale
    tolerance = SLACK * 100 * eps * math.exp(min(2 * size * span, 30.0))
    ratio = error / tolerance
    if ratio > 1:
        outcome.add(FAIL, f"gradient w.r.t. B: relative error {error:.2e} > {tolerance:.2e}", ratio)
    else:
        outcome.add(PASS, "", ratio)
    return outcome.result()
