"""jaxdia: DIA-format (diagonal storage) sparse matrices for JAX, in SciPy's layout."""

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from ._construct import diags as diags, eye as eye, kron as kron
from ._functions import align as align, matmul as matmul, traces as traces
from ._io import load_npz as load_npz, save_npz as save_npz
from ._jacobian import jacobian as jacobian, value_and_jacobian as value_and_jacobian
from ._linalg.chebyshev import Chebyshev as Chebyshev, chebyshev as chebyshev
from ._linalg.determinant import slogdet as slogdet
from ._linalg.expm import expm_multiply as expm_multiply
from ._linalg.factor import (
    BandedCholesky as BandedCholesky,
    BandedLU as BandedLU,
    cho_factor as cho_factor,
    cho_solve as cho_solve,
    factorized as factorized,
    lu_factor as lu_factor,
    lu_solve as lu_solve,
    solve_banded as solve_banded,
    solveh_banded as solveh_banded,
)
from ._linalg.incomplete import (
    IncompleteCholesky as IncompleteCholesky,
    IncompleteLU as IncompleteLU,
    ic0 as ic0,
    ilu0 as ilu0,
)
from ._linalg.jacobi import Jacobi as Jacobi, jacobi as jacobi
from ._linalg.krylov import SolveInfo as SolveInfo, bicgstab as bicgstab, cg as cg
from ._linalg.lanczos import eigsh as eigsh
from ._linalg.multigrid import Multigrid as Multigrid, multigrid as multigrid
from ._linalg.selected_inverse import selected_inverse as selected_inverse
from ._linalg.sharded_multigrid import ShardedMultigrid as ShardedMultigrid
from ._matrix import DiaMatrix as DiaMatrix
from ._shard import ShardedDiaMatrix as ShardedDiaMatrix, shard as shard

try:
    __version__ = version("jaxdia")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"


def __getattr__(name: str) -> Any:
    # DiaLinearOperator and BandedSolver subclass lineax classes (and offsets_tag is read by
    # BandedSolver): import lineax only when one of them is used.
    if name == "DiaLinearOperator":
        from ._lineax import DiaLinearOperator

        return DiaLinearOperator
    if name == "BandedSolver":
        from ._lineax import BandedSolver

        return BandedSolver
    if name == "MultigridSolver":
        from ._lineax import MultigridSolver

        return MultigridSolver
    if name == "offsets_tag":
        from ._lineax import offsets_tag

        return offsets_tag
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
    "Jacobi",
    "jacobi",
    "jacobian",
    "kron",
    "load_npz",
    "lu_factor",
    "lu_solve",
    "matmul",
    "Multigrid",
    "multigrid",
    "save_npz",
    "selected_inverse",
    "shard",
    "slogdet",
    "ShardedDiaMatrix",
    "ShardedMultigrid",
    "solve_banded",
    "solveh_banded",
    "SolveInfo",
    "traces",
    "value_and_jacobian",
]
