"""Shared test helpers: tolerances per dtype, oracle comparisons, a forced method."""

import functools
import gc
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from hypothesis import settings
from jax import monitoring

import jaxdia


def examples(count: int) -> int:
    """``count`` examples for a profile of 10, scaled for the loaded one (at least 2):
    ``ci`` 0.6x, ``full`` 4.4x, ``dev`` 15x. Read when a test module is imported, after
    tests/conftest.py has loaded the profile (read when this module was imported, the
    scale was Hypothesis's default profile's, 10x, in every profile)."""
    return max(2, round(count * settings().max_examples / 10))


_MAPS = Path("/proc/self/maps")
_MAPPING_LIMIT = Path("/proc/sys/vm/max_map_count")


def mappings() -> int | None:
    """The memory mappings this process holds (Linux), else None."""
    return _MAPS.read_bytes().count(b"\n") if _MAPS.exists() else None


def mapping_share() -> float:
    """The share of the mappings Linux allows this process that it holds (0 elsewhere)."""
    held = mappings()
    if held is None or not _MAPPING_LIMIT.exists():
        return 0.0
    return held / int(_MAPPING_LIMIT.read_text())


class Compiles:
    """Counts XLA's compilations in a ``with`` block (a listener on JAX's compile events;
    a program loaded from the persistent compilation cache counts too)::

        with Compiles() as compiles:
            f(x)
        assert compiles.count == 0
    """

    def __init__(self) -> None:
        self.count = 0

    def _listener(self, event: str, duration: float, **kwargs: object) -> None:
        if event == "/jax/core/compile/backend_compile_duration":
            self.count += 1

    def __enter__(self) -> "Compiles":
        monitoring.register_event_duration_secs_listener(self._listener)
        return self

    def __exit__(self, *exc: object) -> None:
        monitoring.unregister_event_duration_listener(self._listener)


def release_compiled_programs() -> None:
    """Drops JAX's caches, and with them the code mappings of every compiled program."""
    jax.clear_caches()
    gc.collect()


# Relative tolerances per dtype (scaled by the size of the sums involved).
TOLERANCES = {
    np.dtype(np.float16): 2e-2,
    np.dtype("bfloat16"): 5e-2,
    np.dtype(np.float32): 1e-5,
    np.dtype(np.complex64): 1e-5,
    np.dtype(np.float64): 1e-12,
    np.dtype(np.complex128): 1e-12,
}


class Forced:
    """jaxdia's banded functions with ``method`` forced (``"lapack"``, ``"scan"``,
    ``"parallel"``): ``Forced("scan").lu_factor(A)`` is ``jaxdia.lu_factor(A,
    method="scan")``, and ``jax.jit(Forced("scan").lu_factor)`` compiles with it."""

    FUNCTIONS = (
        "lu_factor",
        "cho_factor",
        "solve_banded",
        "solveh_banded",
        "factorized",
        "slogdet",
        "selected_inverse",
    )

    def __init__(self, method: str):
        self.method = method

    def __getattr__(self, name: str):
        if name not in self.FUNCTIONS:
            raise AttributeError(name)
        return functools.partial(getattr(jaxdia, name), method=self.method)

    def __repr__(self) -> str:
        return self.method


def tolerance(dtype) -> float:
    return TOLERANCES[np.dtype(dtype)]


def to_scipy_f64(A: jaxdia.DiaMatrix) -> sp.dia_array:
    """The SciPy oracle of one matrix in double precision (complex if A is)."""
    wide = np.complex128 if A.dtype.kind == "c" else np.float64
    return sp.dia_array((np.asarray(A.data).astype(wide), A.offsets), shape=A.shape)


def in_bounds_mask(A):
    """True at every in-bounds slot of A.data (NumPy oracle)."""
    m, n = A.shape
    cols = np.arange(n)
    rows = cols[None, :] - np.asarray(A.offsets, dtype=np.int64).reshape(-1, 1)
    return (rows >= 0) & (rows < m)


def dense_f64(A: jaxdia.DiaMatrix) -> np.ndarray:
    """The dense oracle of a (possibly batched) matrix, built with NumPy only."""
    wide = np.complex128 if A.dtype.kind == "c" else np.float64
    data = np.asarray(A.data).astype(wide)
    m, n = A.shape
    dense = np.zeros((*A.batch_shape, m, n), wide)
    for k, offset in enumerate(A.offsets):
        for j in range(max(0, offset), min(n, m + offset)):
            dense[..., j - offset, j] = data[..., k, j]
    return dense


def assert_close(actual, expected, dtype, scale=1.0):
    """``actual`` ~ ``expected`` within the dtype's tolerance times ``scale``."""
    actual = np.asarray(actual).astype(np.complex128)
    expected = np.asarray(expected).astype(np.complex128)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    tol = tolerance(dtype) * scale
    np.testing.assert_allclose(actual, expected, rtol=tol, atol=tol)


def wide(array) -> np.ndarray:
    """``array`` in double precision (complex128 if it is complex)."""
    array = np.asarray(array)
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


def spmm_oracle(data, x, offsets, shape, transpose):
    """``A @ x`` (or ``A^T @ x``) by SciPy, matrix by matrix over the broadcast batch.

    Works in double precision on a copy of ``data`` whose NaN padding is zeroed. Returns
    the product and the same product of absolute values (the scale of rounding errors).
    """
    data, x = wide(data), wide(x)
    batch = np.broadcast_shapes(data.shape[:-2], x.shape[:-2])
    data = np.broadcast_to(data, (*batch, *data.shape[-2:]))
    x = np.broadcast_to(x, (*batch, *x.shape[-2:]))
    out_rows = shape[1] if transpose else shape[0]
    y = np.zeros((*batch, out_rows, x.shape[-1]), data.dtype)
    scale = np.zeros(y.shape)
    for b in np.ndindex(*batch):
        clean = np.nan_to_num(data[b], nan=0.0)
        A = sp.dia_array((clean, np.array(offsets, dtype=np.int64)), shape=shape).tocsr()
        if transpose:
            A = A.T
        y[b] = A @ x[b]
        scale[b] = abs(A) @ np.abs(x[b])
    return y, scale


# -- problems on n x n (x n) grids (solves, Krylov solvers, preconditioners) ----------


def laplacian_1d(n):
    return sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(n, n))


def poisson(n, dims):
    """The ``dims``-D (3/5/7-point) Laplacian on an ``n^dims`` grid (Dirichlet)."""
    T, I = laplacian_1d(n), sp.eye_array(n)
    if dims == 1:
        return T
    if dims == 2:
        return sp.kron(T, I) + sp.kron(I, T)
    return sp.kron(sp.kron(T, I), I) + sp.kron(sp.kron(I, T), I) + sp.kron(sp.kron(I, I), T)


def convection_diffusion(n, peclet=20.0):
    """Upwinded 2-D convection-diffusion: nonsymmetric, diagonally dominant."""
    h = 1.0 / (n + 1)
    upwind = sp.diags_array([-1.0, 1.0], offsets=[-1, 0], shape=(n, n))
    I = sp.eye_array(n)
    return poisson(n, 2) / h**2 + peclet / h * (sp.kron(upwind, I) + 0.5 * sp.kron(I, upwind))


def helmholtz(n, k2=30.0, damping=5.0):
    """Complex shifted 2-D Helmholtz: ``-Laplacian - (k^2 + i sigma) I``: indefinite."""
    h = 1.0 / (n + 1)
    shift = (k2 + 1j * damping) * sp.eye_array(n * n)
    return (poisson(n, 2) / h**2 - shift).astype(np.complex128)


def rhs(n, dtype=np.float64, seed=0):
    rng = np.random.default_rng(seed)
    b = rng.standard_normal(n)
    if np.dtype(dtype).kind == "c":
        b = b + 1j * rng.standard_normal(n)
    return b.astype(dtype)


def relative_error(x, expected):
    return np.linalg.norm(np.asarray(x) - expected) / np.linalg.norm(expected)


def dense_solution(data, offsets, shape, b):
    return jnp.linalg.solve(jaxdia.DiaMatrix(data, offsets, shape).todense(), b)


def program_lines(fn, *args, compiled: bool = True) -> tuple[int, int]:
    """Lines of ``jax.jit(fn)(*args)``'s lowered StableHLO and of its compiled HLO for
    this backend (0 when ``compiled`` is False): the program's size, which compile
    time follows. The StableHLO holds one copy of each jitted function however often it
    is called; the compiled HLO has them inlined."""
    lowered = jax.jit(fn).lower(*args)
    hlo = len(lowered.compile().as_text().splitlines()) if compiled else 0
    return len(lowered.as_text().splitlines()), hlo
