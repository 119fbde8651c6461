"""The ``eigsh`` family: ``jaxdia.eigsh`` on random Hermitian DIA matrices, against
``numpy.linalg.eigh`` in double precision (of the case's rounded matrix).

Cases: tiny ``n`` (2, 3: the dense path) and ``n`` above the dense limit (150 to 300:
thick-restart Lanczos); random Hermitian bands (offsets beyond the matrix too), 1-D
Laplacians (clustered ends), diagonal matrices with repeated entries (multiple
eigenvalues), spectra spread over many orders of magnitude, and indefinite ones; every
``which``, with and without a shift ``sigma`` (between eigenvalues, or exactly one: a
singular ``A - sigma I``); ``k`` from 1 to ``n - 1``, ``ncv``, ``tol``, ``v0`` given or
not, ``return_eigenvectors`` either way; float32/64 and complex; eager, ``jit`` and
``vmap`` over a batch of two.

Verdicts: for pairs reported converged, FAIL if an eigenvector is not unit or not
orthogonal to the others, if its true residual ``||A v - w v||`` exceeds the test
``tol |w|`` (with a shift ``tol (|w| + ||A - sigma I||)``; ``tol = 0``: machine
precision) beyond rounding (``2000 sqrt(n) eps ||A||_inf``: eigsh's own allowance,
1000, doubled), if the residual ``info``
reports is not the true one, or if the eigenvalues are not the wanted ones of the
spectrum (each within its residual of an eigenvalue, and the ``k`` of them the ones
``which`` selects; a copy of a multiple eigenvalue missed by Lanczos, which cannot see
multiplicity, is FLAGGED). ``converged`` false is FLAGGED (``unexpected`` on the dense
path), as is jaxdia's ``LinAlgError`` for a singular shift and NaN eigenvalues for one
under ``jit``. Any other exception is a FAIL.
"""

from __future__ import annotations

import math
import warnings

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
    dense_of,
    dia_data,
    machine_epsilon,
    pick,
    raised,
    random_values,
    wide_dtype,
)

TIMEOUT = 120.0
#: The constant of the rounding slack (``SLACK sqrt(n) eps ||A||_inf``) of orthogonality
#: and of the reported residuals.
SLACK = 50.0
#: That of the convergence test: eigsh's own allowance, 1000, doubled.
RESIDUAL_SLACK = 2e3
#: The restarts a case may take (SciPy's default ``10 n`` takes minutes on clustered
#: spectra): beyond them it reports ``converged`` false.
MAXITER = 300
#: The dense path's limit (jaxdia.eigsh: ``n <= 128`` is solved with ``eigh``).
DENSE_LIMIT = 128


def generate(rng, seed) -> dict:
    del seed
    n = int(pick(rng, {2: 1, 3: 1, 6: 1, 40: 1, 150: 3, 300: 2}))
    k = pick(rng, {1: 3, 2: 2, 3: 2, 6: 2, "many": 1})
    k = n - 1 - int(rng.integers(0, 3)) if k == "many" else int(k)
    return {
        "n": n,
        "k": max(1, min(k, n - 1)),
        "kind": pick(
            rng, {"random": 4, "laplacian": 2, "repeated": 2, "graded": 1, "indefinite": 2}
        ),
        "half": pick(rng, {0: 1, 1: 3, 2: 2, 5: 1, "wide": 1}),
        "which": pick(rng, {"LM": 2, "SM": 1, "LA": 2, "SA": 2, "BE": 1}),
        "sigma": pick(rng, {"none": 3, "between": 2, "eigenvalue": 1}),
        "ncv": pick(rng, {"default": 4, "small": 1, "large": 1}),
        "tol": pick(rng, {0.0: 4, 1e-6: 1, 1e-3: 1}),
        "v0": bool(rng.random() < 0.3),
        "vectors": bool(rng.random() < 0.8),
        "dtype": pick(rng, {"float64": 4, "complex128": 2, "float32": 2, "complex64": 1}),
        "mode": pick(rng, {"eager": 3, "jit": 2, "vmap": 1}),
        "values": int(rng.integers(2**31)),
    }


def _matrix(params: dict, rng) -> tuple[np.ndarray, tuple[int, ...]]:
    """The case's Hermitian matrix (double precision) and its offsets."""
    n, kind = params["n"], params["kind"]
    half = params["half"]
    half = n + 1 if half == "wide" else min(int(half), n - 1)
    dtype = wide_dtype(DTYPES[params["dtype"]])
    rows, cols = np.indices((n, n))
    if kind == "laplacian":
        M = 2 * np.eye(n) - np.eye(n, k=1) - np.eye(n, k=-1)
        return M.astype(dtype), (-1, 0, 1) if n > 1 else (0,)
    if kind == "repeated":
        values = rng.integers(-3, 4, n).astype(float)
        return np.diag(values).astype(dtype), (0,)
    M = random_values(rng, (n, n), dtype)
    M = np.where(np.abs(cols - rows) <= half, M + M.conj().T, 0)
    if kind == "graded":  # eigenvalues spread over orders of magnitude
        scale = 10.0 ** rng.uniform(-6, 3, n)
        M = M * np.sqrt(np.outer(scale, scale))
    elif kind == "random":
        M = M + 3 * math.sqrt(half + 1) * np.eye(n)  # mostly positive, not all
    offsets = tuple(range(-half, half + 1)) if half < n else (-(n + 1), *range(-(n - 1), n), n + 1)
    return M.astype(dtype), offsets


def _sigma(params: dict, spectrum: np.ndarray, rng) -> float | None:
    if params["sigma"] == "none":
        return None
    if params["sigma"] == "eigenvalue":
        return float(spectrum[int(rng.integers(len(spectrum)))])
    i = int(rng.integers(len(spectrum)))
    j = min(i + 1, len(spectrum) - 1)
    return float(spectrum[i] + (spectrum[j] - spectrum[i]) * rng.uniform(0.2, 0.8) + 1e-3)


def wanted(
    spectrum: np.ndarray, k: int, which: str, sigma: float | None, key: np.ndarray | None = None
) -> np.ndarray:
    """The ``k`` eigenvalues ``which`` selects (of ``nu = 1 / (lambda - sigma)`` with a
    shift, or of the values ``key`` given), ascending."""
    if key is None:
        key = spectrum if sigma is None else 1 / (spectrum - sigma)
    order = {
        "LM": np.argsort(-np.abs(key), kind="stable"),
        "SM": np.argsort(np.abs(key), kind="stable"),
        "LA": np.argsort(-key, kind="stable"),
        "SA": np.argsort(key, kind="stable"),
    }
    if which == "BE":
        ascending = np.argsort(key, kind="stable")
        high = (k + 1) // 2
        chosen = np.concatenate([ascending[: k - high], ascending[len(key) - high :]])
    else:
        chosen = order[which][:k]
    return np.sort(spectrum[chosen])


def check(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    n, k = params["n"], params["k"]
    dtype = DTYPES[params["dtype"]]
    dense, offsets = _matrix(params, rng)
    data = dia_data(dense, offsets, padding="nan").astype(dtype)
    rounded = dense_of(data, offsets, n)
    rounded = (rounded + rounded.conj().T) / 2  # the Hermitian part (float32 keeps it so)
    spectrum = np.linalg.eigvalsh(rounded)
    sigma = _sigma(params, spectrum, rng)
    ncv = {"default": None, "small": min(n, k + 2), "large": min(n, max(2 * k + 1, 40))}[
        params["ncv"]
    ]
    v0 = random_values(rng, (n,), dtype).astype(dtype) if params["v0"] else None
    kwargs = {
        "k": k,
        "which": params["which"],
        "sigma": sigma,
        "ncv": ncv,
        "tol": params["tol"],
        "maxiter": MAXITER,
        "v0": None if v0 is None else jnp.asarray(v0),
        "return_eigenvectors": params["vectors"],
        "return_info": True,
    }
    A = jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out = _call(params["mode"], A, kwargs)
    except np.linalg.LinAlgError as error:
        result = raised(error)
        if result.verdict == FLAGGED and sigma is not None:
            gap = float(np.min(np.abs(spectrum - sigma)))
            result.unexpected = bool(gap > 1e3 * machine_epsilon(dtype) * np.abs(spectrum).max())
        return result
    except Exception as error:  # noqa: BLE001 - every exception is judged
        return raised(error, unexpected=True)
    members = out if params["mode"] == "vmap" else [out]
    outcome = Outcome()
    for scale, member in zip((1.0, 2.0), members):
        _judge(outcome, params, rounded * scale, spectrum * scale, member, sigma, dtype, scale)
    return outcome.result()


def _call(mode: str, A, kwargs):
    def run(data):
        return jaxdia.eigsh(jaxdia.DiaMatrix(data, A.offsets, A.shape), **kwargs)

    if mode == "eager":
        return run(A.data)
    if mode == "jit":
        return jax.jit(run)(A.data)
    sigma = kwargs["sigma"]
    if sigma is not None:  # the second member is 2 A: its shift 2 sigma
        kwargs = {key: value for key, value in kwargs.items() if key != "sigma"}
        out = [jaxdia.eigsh(A, sigma=sigma, **kwargs)]
        twice = jaxdia.DiaMatrix(2 * A.data, A.offsets, A.shape)
        out.append(jaxdia.eigsh(twice, sigma=2 * sigma, **kwargs))
        return out
    both = jax.vmap(run)(jnp.stack([A.data, 2 * A.data]))
    return [jax.tree_util.tree_map(lambda x, i=i: x[i], both) for i in range(2)]


def _judge(outcome, params, M, spectrum, out, sigma, dtype, scale):
    n, k = params["n"], params["k"]
    sigma = None if sigma is None else sigma * scale
    if params["vectors"]:
        w, v, info = out
        v = np.asarray(v).astype(np.complex128)
    else:
        w, info = out
        v = None
    w = np.asarray(w).astype(float)
    converged = np.asarray(info.converged)
    eps = machine_epsilon(dtype)
    norm = float(np.abs(spectrum).max(initial=0.0))
    norm_inf = float(np.abs(M).sum(axis=1).max(initial=0.0))
    slack = SLACK * math.sqrt(n) * eps * max(norm_inf, 1e-300)
    dense_path = n <= DENSE_LIMIT
    if w.shape != (k,):
        outcome.add(FAIL, f"eigenvalues of shape {w.shape}, expected ({k},)")
        return
    if not bool(converged):
        if sigma is not None and np.all(np.isnan(w)):
            gap = float(np.min(np.abs(spectrum - sigma)))
            outcome.add(
                FLAGGED,
                "NaN eigenvalues (A - sigma I singular)",
                unexpected=bool(gap > 1e3 * eps * norm),
            )
        else:
            outcome.add(
                FLAGGED,
                f"not converged ({int(np.asarray(info.nconv))} of {k})",
                unexpected=dense_path,
            )
        return
    if not np.all(np.isfinite(w)):
        outcome.add(FAIL, "converged reported, eigenvalues not finite")
        return
    # SciPy's order (ascending, except without eigenvectors and shift: ARPACK's order,
    # from the least wanted to the most for LM, SM and SA); then compared ascending
    key = w
    if v is None and sigma is None:
        key = {"LM": np.abs(w), "SM": -np.abs(w), "SA": -w}.get(params["which"], w)
    if np.any(np.diff(key) < 0):
        outcome.add(FAIL, f"eigenvalues not in SciPy's order for which={params['which']}: {w}")
    ascending = np.argsort(w, kind="stable")
    w = w[ascending]
    if v is not None:
        v = v[:, ascending]
    tol = params["tol"] if params["tol"] > 0 else eps
    reported = np.asarray(info.residuals).astype(float)[ascending]
    if v is not None:
        if not np.all(np.isfinite(v)):
            outcome.add(FAIL, "converged reported, eigenvectors not finite")
            return
        gram = v.conj().T @ v
        orthogonality = float(np.abs(gram - np.eye(k)).max())
        limit = SLACK * math.sqrt(n) * eps
        if orthogonality > limit:
            outcome.add(FAIL, f"eigenvectors not orthonormal ({orthogonality:.1e} > {limit:.1e})")
        residuals = np.linalg.norm(M @ v - v * w, axis=0)
    else:
        residuals = reported
    # eigsh's test: tol |w|, with a shift tol (|w| + ||A - sigma I||) (ARPACK's test on
    # nu = 1 / (w - sigma)), plus rounding
    bound = tol * np.abs(w) + slack * RESIDUAL_SLACK / SLACK
    if sigma is not None:
        bound = bound + tol * (norm_inf + abs(sigma))
    if v is not None:
        worst = float(np.max(residuals / bound))
        if worst > 1:
            i = int(np.argmax(residuals / bound))
            outcome.add(
                FAIL,
                f"converged reported, residual {residuals[i]:.2e} of w = {w[i]:.6g} > "
                f"tol |w| + rounding {bound[i]:.2e}",
                worst,
            )
            return
        mismatch = np.abs(reported - residuals) > 1e-2 * residuals + slack
        if np.any(mismatch):
            i = int(np.argmax(mismatch))
            outcome.add(FAIL, f"reported residual {reported[i]:.2e}, true {residuals[i]:.2e}")
    # every eigenvalue is within its residual of the spectrum (residual bound, Hermitian)
    distance = np.min(np.abs(w[:, None] - spectrum[None, :]), axis=1)
    radius = np.maximum(residuals, bound) + slack
    if np.any(distance > radius):
        i = int(np.argmax(distance - radius))
        outcome.add(
            FAIL, f"w = {w[i]:.8g} is {distance[i]:.2e} from the spectrum (> {radius[i]:.2e})"
        )
        return
    expected = wanted(spectrum, k, params["which"], sigma)
    error = np.abs(w - expected)
    if np.all(error <= radius):
        outcome.add(PASS, "", float(np.max(error / radius)))
        return
    # a tie in which's order is a right answer too; a missed copy of a multiple
    # eigenvalue is Lanczos's limit (FLAGGED); any other difference is a wrong answer
    note = f"eigenvalues {w} where {params['which']} wants {expected}"
    if _tie(spectrum, expected, w, radius, params["which"], sigma):
        outcome.add(PASS, "")
    elif _cluster(spectrum, expected, w, radius):
        outcome.add(FLAGGED, f"a multiple eigenvalue: {note}"[:300])
    else:
        outcome.add(FAIL, f"converged reported, {note}"[:400], float(np.max(error / radius)))


def _preference(values, which: str, sigma: float | None) -> np.ndarray:
    """How much ``which`` wants each eigenvalue (larger: more)."""
    key = values if sigma is None else 1 / (values - sigma)
    return {"LM": np.abs(key), "SM": -np.abs(key), "LA": key, "SA": -key}[which]


def _tie(spectrum, expected, w, radius, which: str, sigma: float | None) -> bool:
    """Whether every ``w`` is as wanted as the least wanted of ``expected``, to rounding
    (``which``'s order has ties: ``+-lambda`` for LM, a shift midway), or ``w`` is what
    ``which`` wants for a shift moved by rounding (an eigenvalue at ``sigma`` has
    ``nu = +-inf``: either sign is right)."""
    if sigma is not None:
        delta = 10 * float(np.max(radius))
        for moved in (sigma - delta, sigma + delta):
            if np.all(np.abs(w - wanted(spectrum, len(w), which, moved)) <= radius):
                return True
        # the eigenvalue at sigma (the nearest, within 10 radii) as nu = +inf or -inf, the
        # others' nu kept (a move of 10 radii can cross a neighbour too)
        apart = np.abs(spectrum - sigma)
        at = (apart == apart.min(initial=np.inf)) & (apart <= delta)
        if at.any():
            with np.errstate(divide="ignore"):
                nu = 1 / (spectrum - sigma)
            for side in (np.inf, -np.inf):
                key = np.where(at, side, nu)
                if np.all(np.abs(w - wanted(spectrum, len(w), which, sigma, key)) <= radius):
                    return True
    if which == "BE":
        return False
    if sigma is None:
        delta = 10 * float(np.max(radius))
    else:
        nearest = float(np.min(np.abs(np.concatenate([expected, w]) - sigma)))
        if nearest**2 == 0:  # nu = +-inf, or its square underflows: the shifts above decide
            return False
        delta = 10 * float(np.max(radius)) / nearest**2
    threshold = float(np.min(_preference(expected, which, sigma)))
    return bool(np.all(_preference(w, which, sigma) >= threshold - delta))


def _cluster(spectrum, expected, w, radius) -> bool:
    """Whether the difference is within clusters of the spectrum (eigenvalues closer
    than ten radii: multiple ones)."""
    close = float(np.max(radius)) * 10
    for value in np.concatenate([expected, w]):
        if np.sum(np.abs(spectrum - value) <= close) > 1:
            return True
    return False
