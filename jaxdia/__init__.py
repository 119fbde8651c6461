"""jaxdia: DIA-format (diagonal storage) sparse matrices for JAX, in SciPy's layout."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._construct import diags as diags, eye as eye
from ._functions import align as align, kron as kron, matmul as matmul, traces as traces
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

try:
    __version__ = version("jaxdia")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    # DiaLinearOperator subclasses a lineax class: import lineax only when it is used.
    if name == "DiaLinearOperator":
        from ._lineax import DiaLinearOperator

        return DiaLinearOperator
    raise AttributeError(f"module 'jaxdia' has no attribute {name!r}")


__all__ = [
    "align",
    "bicgstab",
    "cg",
    "chebyshev",
    "Chebyshev",
    "diags",
    "DiaMatrix",
    "eye",
    "jacobi",
    "kron",
    "load_npz",
    "matmul",
    "multigrid",
    "Multigrid",
    "save_npz",
    "shard",
    "ShardedDiaMatrix",
    "solve_banded",
    "SolveInfo",
    "traces",
]
