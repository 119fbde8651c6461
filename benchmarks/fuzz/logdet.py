"""The fuzzer's ``logdet`` family: ``jaxdia.slogdet``, ``BandedLU.slogdet``,
``BandedCholesky.logdet``, ``jaxdia.selected_inverse`` (general, and ``assume_a="pos"``)
and the gradients of ``slogdet`` and ``BandedCholesky.logdet``, against NumPy's dense
``slogdet`` and ``inv`` and JAX's gradient of the dense ``slogdet``.

Cases draw the size (0 to 40, bands wider than the matrix included), the offsets (bands,
gaps, periodic corners one or two deep, on one side or both), the matrix (random
general, diagonally dominant, Hermitian positive definite, singular with a zero column,
and for periodic offsets a cyclic shift plus noise, whose band without the corners is
nearly singular; and from a second child stream, general matrices that need row
interchanges across cyclic reduction's blocks: a zero diagonal, or rows swapped in pairs
plus noise), the dtype, the implementation forced (LAPACK on the host, the
``lax.scan`` kernels, cyclic reduction), eager or jitted, and for the selected inverse of
a Hermitian positive definite matrix ``assume_a="pos"`` or not. A
NaN is a reported failure (FLAGGED), except for the general selected inverse and
``slogdet``'s gradient of a band without corners on CPU, which the pivoted LU answers
(FAIL there); a finite answer beyond the rounding that the condition number allows is
FAIL, as is a finite determinant of a singular matrix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdia
from jaxdia._linalg.plan import periodic_split

from .core import (
    DTYPES,
    FAIL,
    FLAGGED,
    PASS,
    Outcome,
    Result,
    condition_number,
    dia_data,
    pick,
    raised,
)

TIMEOUT = 90.0

APIS = {"slogdet": 3, "lu_slogdet": 2, "cho_logdet": 2, "selected_inverse": 2, "grad": 2}
KINDS = {"general": 2, "dominant": 2, "hpd": 2, "singular": 1}
METHODS = {"lapack": 2, "scan": 1, "parallel": 1}
FLOATS = {"float64": 3, "float32": 1, "complex128": 2, "complex64": 1}
CORNERS = {"both": 3, "upper": 1, "lower": 1}
PIVOTS = {"none": 2, "zero_diagonal": 1, "permutation": 1}


def generate(rng: np.random.Generator, seed: int) -> dict:
    n = int(rng.choice([0, 1, 2, 3, 5, 8, 17, 40]))
    shape = pick(rng, {"band": 4, "gaps": 2, "periodic": 1})
    lower, upper = int(rng.integers(0, 4)), int(rng.integers(0, 4))
    offsets = list(range(-lower, upper + 1))
    if shape == "gaps" and len(offsets) > 2:
        offsets = sorted({0, *rng.choice(offsets, size=len(offsets) - 1, replace=False).tolist()})
    params = {
        "kind": pick(rng, KINDS),
        "dtype": pick(rng, FLOATS),
        "api": pick(rng, APIS),
        "method": pick(rng, METHODS),
        "jit": bool(rng.integers(0, 2)),
        "values": int(rng.integers(0, 2**31)),
    }
    # From a child stream (rng's own is left as it was), so that the cases drawn before
    # these existed keep their parameters.
    extra = rng.spawn(1)[0]
    depth, corners = int(extra.integers(1, 3)), pick(extra, CORNERS)
    cycle, pos = bool(extra.integers(0, 3) == 0), bool(extra.integers(0, 2))
    if params["api"] in ("grad", "selected_inverse") and n >= 8 and extra.integers(0, 3) == 0:
        shape = "periodic"  # the Woodbury selected inverse, more often
    if shape == "periodic" and n > 2:
        # Corner diagonals ±(n - 1) .. ±(n - depth), on one side or both; a cycle: the
        # cyclic shift A[i, i + 1 mod n] = 1 plus a little noise, well conditioned while
        # its band without the corners is nearly singular.
        wrap = set(range(n - depth, n))
        if corners in ("both", "upper") or cycle:
            offsets = [*offsets, *wrap]
        if corners in ("both", "lower") or cycle:
            offsets = [*offsets, *(-k for k in wrap)]
        if cycle:
            offsets = [*offsets, 1]
        params["cycle"] = cycle
        if cycle:
            params["kind"] = "general"
    if params["api"] == "selected_inverse" and params["kind"] == "hpd":
        params["pos"] = pos
    # A second child stream (the first's draws above stay as they were): general matrices
    # that need row interchanges across cyclic reduction's blocks.
    pivot = pick(rng.spawn(1)[0], PIVOTS)
    if params["kind"] == "general" and not params.get("cycle") and pivot != "none":
        params["pivot"] = pivot
    offsets = sorted({k for k in offsets if -n < k < n} | ({0} if n else set()))
    return {"n": n, "offsets": [int(k) for k in offsets], **params}


def _dense(params: dict) -> np.ndarray:
    n, offsets, kind = params["n"], params["offsets"], params["kind"]
    rng = np.random.default_rng(params["values"])
    complex_ = np.dtype(DTYPES[params["dtype"]]).kind == "c"
    mask = np.zeros((n, n), bool)
    for k in offsets:
        mask |= np.eye(n, k=k, dtype=bool)
    dense = rng.standard_normal((n, n)) + (1j * rng.standard_normal((n, n)) if complex_ else 0)
    dense = np.where(mask, dense, 0)
    if params.get("cycle") and n:
        delta = 10.0 ** -rng.uniform(1, 4)
        dense = np.roll(np.eye(n), 1, axis=1) + delta * dense
    pivot = params.get("pivot")
    swaps = pivot == "permutation" and {-1, 1} <= set(offsets)
    if pivot and not swaps:
        np.fill_diagonal(dense, 0)
    elif swaps:
        # Rows swapped in pairs (from row 0 or 1) plus noise: pivots off the diagonal.
        target = np.arange(n)
        for i in range(int(rng.integers(0, 2)), n - 1, 2):
            target[i], target[i + 1] = i + 1, i
        dense = 1e-3 * dense
        dense[np.arange(n), target] += 1
    if kind == "hpd":
        dense = np.where(mask & mask.T, dense + dense.conj().T, 0)
        np.fill_diagonal(dense, np.abs(dense).sum(axis=1) + 1.0)
    elif kind == "dominant":
        np.fill_diagonal(dense, np.abs(dense).sum(axis=1) + 1.0)
    elif kind == "singular" and n:
        dense[:, int(rng.integers(0, n))] = 0
    return dense


def check(params: dict) -> Result:
    dtype = DTYPES[params["dtype"]]
    n, offsets = params["n"], tuple(params["offsets"])
    dense = _dense(params)
    A = jaxdia.DiaMatrix(dia_data(dense, offsets).astype(dtype), offsets, (n, n))
    dense = np.asarray(A.todense()).astype(np.complex128)  # what A holds, rounded
    outcome = Outcome()
    eps = float(jnp.finfo(dtype).eps)
    cond = condition_number(dense) if n else 1.0
    scale = 100 * eps * max(cond, 1) * max(n, 1)
    api = params["api"]
    if api == "cho_logdet" and params["kind"] != "hpd":
        api = "slogdet"
    # Half the Hermitian positive definite cases (by the parity of their values' seed, so
    # that no draw is added and every seed's cases stay as they were) ask selected_inverse
    # with assume_a="pos" and the gradient of cho_factor(A).logdet() (on CPU both read
    # LAPACK's Cholesky factor) instead of the general ones.
    hermitian = params["kind"] == "hpd" and params["values"] % 2 == 1
    try:
        pos = params.get("pos", False)
        result = _run(api, A, params["jit"], hermitian, pos, params["method"])
    except Exception as error:  # noqa: BLE001 (classified)
        return raised(error)
    if api in ("slogdet", "lu_slogdet", "cho_logdet"):
        _judge_slogdet(outcome, api, result, dense, scale)
    elif api == "selected_inverse":
        inverse = None
        if n and cond < 1e300:
            try:
                inverse = np.linalg.inv(dense)
            except np.linalg.LinAlgError:  # singular to NumPy's LU: nothing to compare
                inverse = None
        strict = not (hermitian or params.get("pos")) and _plain_band(offsets, n)
        _judge_entries(outcome, "selected inverse", result, inverse, A, scale, strict)
    elif hermitian:  # JAX's gradient of the dense logdet of the upper triangle's matrix
        gradient = None
        if n and cond < 1e300:
            gradient = _hermitian_gradient(A)
        _judge_entries(outcome, "Cholesky gradient", result, gradient, A, scale)
    else:  # JAX's gradient of the dense slogdet: A^-T, conjugated for complex A
        gradient = None
        if n and cond < 1e300:
            gradient = jax.grad(lambda M: jnp.linalg.slogdet(M)[1])(jnp.asarray(dense))
        _judge_entries(outcome, "gradient", result, gradient, A, scale, _plain_band(offsets, n))
    return outcome.result()


def _hermitian_gradient(A: jaxdia.DiaMatrix) -> np.ndarray:
    """The gradient with respect to ``A.data`` of ``log det`` of the Hermitian matrix
    ``A``'s upper triangle defines (dense, in complex128), as an ``n x n`` array whose
    entry ``(i, j)`` is that of ``A[i, j]``'s slot."""
    data = jnp.asarray(np.where(np.isfinite(np.asarray(A.data)), A.data, 0), jnp.complex128)
    upper = jnp.asarray([k >= 0 for k in A.offsets])[:, None]

    def dense_logdet(data):
        triangle = jaxdia.DiaMatrix(jnp.where(upper, data, 0), A.offsets, A.shape).todense()
        full = triangle + triangle.conj().T - jnp.diag(jnp.diagonal(triangle))
        full = full - jnp.diag(jnp.diagonal(full)) + jnp.diag(jnp.diagonal(triangle).real)
        return jnp.linalg.slogdet(full)[1]

    gradient = jax.grad(dense_logdet)(data)
    if not np.iscomplexobj(np.asarray(A.data)):
        gradient = gradient.real
    return np.asarray(jaxdia.DiaMatrix(gradient, A.offsets, A.shape).todense())


def _run(api: str, A: jaxdia.DiaMatrix, jit: bool, hermitian: bool, pos: bool, method: str):
    def cholesky_logdet(d):
        return jaxdia.cho_factor(jaxdia.DiaMatrix(d, A.offsets, A.shape), method=method).logdet()

    def logabsdet(d):
        return jaxdia.slogdet(jaxdia.DiaMatrix(d, A.offsets, A.shape), method=method)[1]

    def run(data):
        M = jaxdia.DiaMatrix(data, A.offsets, A.shape)
        if api == "slogdet":
            return jaxdia.slogdet(M, method=method)
        if api == "lu_slogdet":
            return jaxdia.lu_factor(M, method=method).slogdet()
        if api == "cho_logdet":
            return jnp.ones(()), jaxdia.cho_factor(M, method=method).logdet()
        if api == "selected_inverse":
            assume_a = "pos" if hermitian or pos else "gen"
            return jaxdia.selected_inverse(M, assume_a=assume_a, method=method).data
        if hermitian:
            return jax.grad(cholesky_logdet)(data)
        return jax.grad(logabsdet)(data)

    if api == "lu_slogdet" and not jit and A.shape[0]:
        try:
            jaxdia.lu_factor(A, method=method)
        except np.linalg.LinAlgError:  # singular: lu_factor refuses outside jit
            return jax.jit(run)(A.data)
    return jax.jit(run)(A.data) if jit else run(A.data)


def _judge_slogdet(outcome: Outcome, api: str, result, dense: np.ndarray, scale: float) -> None:
    sign, logabsdet = (np.asarray(x).astype(np.complex128) for x in result)
    expected_sign, expected = np.linalg.slogdet(dense) if dense.size else (1.0, 0.0)
    singular = expected_sign == 0
    if np.isnan(logabsdet) or np.isnan(sign):
        outcome.add(FLAGGED, f"{api}: NaN (a reported failure)")
        return
    if singular:
        if sign == 0 and logabsdet.real == -np.inf:
            outcome.add(PASS)
        elif scale > 1e-2:
            outcome.add(PASS, "singular to rounding: any answer")
        else:
            outcome.add(FAIL, f"{api}: singular matrix gave ({sign}, {logabsdet})")
        return
    if scale > 1e-2:
        outcome.add(PASS, "too ill-conditioned to check")
        return
    error = abs(logabsdet.real - expected) / max(1.0, abs(expected))
    sign_error = abs(sign - expected_sign)
    ratio = float(max(error, sign_error) / scale)
    if ratio > 1:
        got = f"({sign}, {logabsdet.real})"
        outcome.add(FAIL, f"{api}: {got} vs NumPy ({expected_sign}, {expected})", ratio)
    else:
        outcome.add(PASS, ratio=ratio)


def _plain_band(offsets: tuple[int, ...], n: int) -> bool:
    """Whether ``A`` is a band without periodic corners: on CPU its general selected
    inverse (and ``slogdet``'s gradient) is then never NaN for a nonsingular matrix (cyclic
    reduction's, or the pivoted LU's where that is refused), so NaN is a FAIL there."""
    return periodic_split(offsets, n) is None and jax.default_backend() == "cpu"


def _judge_entries(outcome, what, data, expected_dense, A, scale, strict=False) -> None:
    data = np.asarray(data).astype(np.complex128)
    n = A.shape[0]
    if n == 0:
        outcome.add(PASS)
        return
    inside = np.isfinite(np.asarray(A.data))
    if expected_dense is None or scale > 1e-2:
        outcome.add(PASS, "too ill-conditioned to check")
        return
    if np.isnan(data[inside]).any():
        outcome.add(FAIL if strict else FLAGGED, f"{what}: NaN (a reported failure)")
        return
    worst = 0.0
    expected_dense = np.asarray(expected_dense)
    magnitude = np.abs(expected_dense).max()
    for k, offset in enumerate(A.offsets):
        for j in range(n):
            if not inside[k, j]:
                continue
            i = j - offset
            worst = max(worst, abs(data[k, j] - expected_dense[i, j]) / (scale * magnitude))
    outcome.add(FAIL if worst > 1 else PASS, f"{what}: error {worst:.2g} x tolerance", worst)
