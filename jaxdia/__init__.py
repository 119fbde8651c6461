"""jaxdia: DIA-format (diagonal storage) sparse matrices for JAX, in SciPy's layout."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._construct import diags as diags, eye as eye
from ._factor import (
    BandedCholesky as BandedCholesky,
    BandedLU as BandedLU,
    cho_factor as cho_factor,
    cho_solve as cho_solve,
    factorized as factorized,
    lu_factor as lu_factor,
    lu_solve as lu_solve,
    solveh_banded as solveh_banded,
)
from ._functions import align as align, kron as kron, matmul as matmul, traces as traces
from ._incomplete import (
    IncompleteCholesky as IncompleteCholesky,
    IncompleteLU as IncompleteLU,
    ic0 as ic0,
    ilu0 as ilu0,
)
from ._io import load_npz as load_npz, save_npz as save_npz
from ._linalg import jacobi as jacobi, solve_banded as solve_banded
from ._matrix import DiaMatrix as DiaMatrix
from ._precond import (
    Chebyshev as Chebyshev,
    Multigrid as Multigrid,
    SolveInfo as SolveInfo,
    bicgstab as bicgstab,
    cg as cg,
    chebyshev as chebyshev,
    multigrid as multigrid,
)
from ._shard import ShardedDiaMatrix as ShardedDiaMatrix, shard as shard
from ._spectral import eigsh as eigsh, expm_multiply as expm_multiply

try:
    __version__ = version("jaxdia")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    # DiaLinearOperator and BandedSolver subclass lineax classes: import lineax only when
    # one of them is used.
    if name == "DiaLinearOperator":
        from ._lineax import DiaLinearOperator

        return DiaLinearOperator
    if name == "BandedSolver":
        from ._lineax import BandedSolver

        return BandedSolver
    raise AttributeError(f"module 'jaxdia' has no attribute {name!r}")


__all__ = [
    "align",
    "BandedCholesky",
    "BandedLU",
    "bicgstab",
    "cg",
    "Chebyshev",
    "chebyshev",
    "cho_factor",
    "cho_solve",
    "diags",
    "DiaMatrix",
    "eigsh",
    "expm_multiply",
    "eye",
    "factorized",
    "ic0",
    "ilu0",
    "IncompleteCholesky",
    "IncompleteLU",
    "jacobi",
    "kron",
    "load_npz",
    "lu_factor",
    "lu_solve",
    "matmul",
    "Multigrid",
    "multigrid",
    "save_npz",
    "shard",
    "ShardedDiaMatrix",
    "solve_banded",
    "solveh_banded",
    "SolveInfo",
    "traces",
]
