"""What every family of the fuzzer shares: cases, verdicts, their merging, and the
numerics of the checks (DIA data of a dense matrix and back, backward errors, condition
numbers).

A family is a module ``benchmarks/fuzz/<family>.py`` with

* ``generate(rng, seed) -> dict``: one case's parameters (JSON-serializable), drawn from
  ``rng`` (``numpy.random.default_rng([seed, family, index])``);
* ``check(params) -> Result``: runs the case and judges it (:class:`Outcome` merges the
  verdicts of several checks); it may raise, and :func:`raised` classifies the error;
* ``TIMEOUT`` (optional): seconds a case may take before its worker is killed;

and its name added to ``MODULE_FAMILIES`` in ``benchmarks/fuzz_solve.py`` (its name seeds
its cases: ``fuzz_solve.family_seed``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import traceback

import jax.numpy as jnp
import numpy as np

import jaxdia

#: The exceptions that are a clear report of a bad input (FLAGGED, not FAIL).
CLEAR_ERRORS = (ValueError, TypeError, np.linalg.LinAlgError)

PASS, FLAGGED, FAIL = "PASS", "FLAGGED", "FAIL"
RANK = {PASS: 0, FLAGGED: 1, FAIL: 2}


# -- cases and results ------------------------------------------------------------------------


@dataclasses.dataclass
class Case:
    family: str
    seed: int
    index: int
    params: dict

    def reproducer(self) -> str:
        return (
            f"python benchmarks/fuzz_solve.py --family {self.family} --seed {self.seed} "
            f"--index {self.index}  # {json.dumps(self.params, sort_keys=True)}"
        )


@dataclasses.dataclass
class Result:
    verdict: str
    detail: str = ""
    #: the worst error measured, in units of the tolerance (for calibration)
    ratio: float = 0.0
    unexpected: bool = False
    seconds: float = 0.0


class Outcome:
    """The verdicts of one case's checks, merged: the worst wins; the notes of the worst
    verdict are kept (the first few, and how many more)."""

    def __init__(self):
        self.verdict, self.notes, self.ratio, self.unexpected = PASS, [], 0.0, False
        self.more = 0

    def add(self, verdict: str, note: str = "", ratio: float = 0.0, unexpected: bool = False):
        if RANK[verdict] > RANK[self.verdict]:
            self.verdict, self.notes, self.more = verdict, [], 0
        if note and RANK[verdict] == RANK[self.verdict] and note not in self.notes:
            if len(self.notes) < 2:
                self.notes.append(note)
            else:
                self.more += 1
        if np.isfinite(ratio):
            self.ratio = max(self.ratio, float(ratio))
        self.unexpected |= unexpected and verdict == FLAGGED

    def result(self) -> Result:
        detail = "; ".join(self.notes) + (f" (+{self.more} more)" if self.more else "")
        return Result(self.verdict, detail[:600], self.ratio, self.unexpected)


def clear_error(error: BaseException) -> bool:
    """Whether ``error`` is jaxdia's own clear report of a bad input: a ValueError,
    TypeError or LinAlgError whose message starts with the jaxdia name that raised it
    (``"lu_factor: ..."``), not an error of JAX's or NumPy's internals."""
    if not isinstance(error, CLEAR_ERRORS):
        return False
    name = str(error).split(":", 1)[0].split(".")[0].split("(")[0].strip()
    return ":" in str(error) and name in JAXDIA_NAMES


JAXDIA_NAMES = {*dir(jaxdia), "DiaMatrix", "BandedLU", "BandedCholesky"}


def raised(error: BaseException, unexpected: bool = False) -> Result:
    """FLAGGED for jaxdia's clear errors (``unexpected``: on a well-posed case), FAIL for
    any other exception."""
    lines = traceback.format_exception_only(type(error), error)
    text = " | ".join(line.strip() for line in "".join(lines).splitlines() if line.strip())
    if clear_error(error):
        return Result(FLAGGED, f"raised {text}"[:300], unexpected=unexpected)
    return Result(FAIL, f"unclear exception {text}"[:400])


# -- shared numerics --------------------------------------------------------------------------


def wide_dtype(dtype) -> np.dtype:
    return np.dtype(np.complex128 if np.dtype(dtype).kind == "c" else np.float64)


def machine_epsilon(dtype) -> float:
    return float(jnp.finfo(np.dtype(dtype)).eps)


DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "float16": np.float16,
    "bfloat16": jnp.bfloat16,
}


def random_values(rng, shape, dtype) -> np.ndarray:
    """Standard normal values, complex ones with both parts random (in double precision)."""
    values = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        values = values + 1j * rng.standard_normal(shape)
    return values


def pick(rng, options: dict):
    """A key of ``options`` drawn with the given weights."""
    keys = list(options)
    weights = np.array([options[k] for k in keys], float)
    return keys[int(rng.choice(len(keys), p=weights / weights.sum()))]


def dia_data(dense: np.ndarray, offsets, padding: str = "nan", rng=None) -> np.ndarray:
    """SciPy's DIA ``data`` of ``dense`` ``(..., n, n)`` on ``offsets``: in-bounds slots from
    ``dense``, the others NaN or random garbage (which jaxdia must never read)."""
    n = dense.shape[-1]
    data = np.empty((*dense.shape[:-2], len(offsets), n), dense.dtype)
    cols = np.arange(n)
    for k, offset in enumerate(offsets):
        rows = cols - offset
        inside = (rows >= 0) & (rows < n)
        data[..., k, inside] = dense[..., rows[inside], cols[inside]]
        if padding == "nan":
            data[..., k, ~inside] = np.nan
        elif padding == "garbage" and rng is not None:
            data[..., k, ~inside] = 1e3 * rng.standard_normal(data[..., k, ~inside].shape)
        else:
            data[..., k, ~inside] = 0
    return data


def dense_of(data: np.ndarray, offsets, n: int) -> np.ndarray:
    """The dense ``(..., n, n)`` matrix of DIA ``data`` (padding ignored), in double
    precision."""
    data = np.asarray(data).astype(wide_dtype(data.dtype) if data.dtype != jnp.bfloat16 else float)
    dense = np.zeros((*data.shape[:-2], n, n), data.dtype)
    cols = np.arange(n)
    for k, offset in enumerate(offsets):
        rows = cols - offset
        inside = (rows >= 0) & (rows < n)
        dense[..., rows[inside], cols[inside]] = data[..., k, inside]
    return dense


def backward_error(A: np.ndarray, x: np.ndarray, b: np.ndarray) -> float:
    """The normwise backward error ``|A x - b| / (|A| |x| + |b|)`` (infinity norms) of one
    system, in double precision; 0 for an exact zero residual."""
    r = A @ x - b
    rn = np.max(np.abs(r), initial=0.0)
    if rn == 0:
        return 0.0
    an = np.max(np.abs(A).sum(axis=-1), initial=0.0)
    return float(rn / (an * np.max(np.abs(x), initial=0.0) + np.max(np.abs(b), initial=0.0)))


def condition_number(A: np.ndarray) -> float:
    if A.shape[-1] == 0:
        return 1.0
    with np.errstate(all="ignore"):
        try:
            s = np.linalg.svd(A, compute_uv=False)
        except np.linalg.LinAlgError:
            return math.inf
    return float(s[0] / s[-1]) if s[-1] > 0 else math.inf


def judge_converged(
    outcome: Outcome,
    *,
    solution: np.ndarray,
    true: float,
    limit: float,
    slack: float,
    reported: float,
) -> bool:
    """Judges one system an iterative solver reported converged, into ``outcome``: FAIL if
    its ``solution`` is not finite, if its ``true`` residual exceeds the tolerance
    ``limit`` by more than rounding (``slack``), or if the residual it ``reported`` is not
    the true one; else PASS. Returns whether it passed (the caller may then check more)."""
    if not np.all(np.isfinite(solution)):
        outcome.add(FAIL, "converged reported, solution not finite")
        return False
    ratio = true / (limit + slack) if limit + slack > 0 else 0.0
    if true > limit + slack:
        outcome.add(
            FAIL,
            f"converged reported but the true residual {true:.2e} > the tolerance "
            f"{limit:.2e} (+ rounding {slack:.1e})",
            ratio,
        )
        return False
    if abs(reported - true) > slack + 1e-2 * true + 1e-300:
        outcome.add(FAIL, f"reported residual {reported:.2e}, true {true:.2e}")
        return False
    outcome.add(PASS, "", ratio)
    return True
