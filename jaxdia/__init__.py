"""jaxdia: DIA-format (diagonal storage) sparse matrices for JAX, in SciPy's layout."""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

from ._compilation_cache import enable_compilation_cache as enable_compilation_cache
from ._construct import diags as diags, eye as eye, kron as kron
from ._functions import align as align, matmul as matmul, traces as traces
from ._io import load_npz as load_npz, save_npz as save_npz
from ._ivp import OdeResult as OdeResult, odeint as odeint, solve_ivp as solve_ivp
from ._ivp_output import OdeSolution as OdeSolution
from ._jacobian import jacobian as jacobian, value_and_jacobian as value_and_jacobian
from ._linalg.chebyshev import Chebyshev as Chebyshev, chebyshev as chebyshev
from ._linalg.determinant import slogdet as slogdet
from ._linalg.direct import (
    factorized as factorized,
    solve_banded as solve_banded,
    solveh_banded as solveh_banded,
)
from ._linalg.eigsh import eigsh as eigsh
from ._linalg.expm import expm_multiply as expm_multiply
from ._linalg.factor import (
    BandedCholesky as BandedCholesky,
    BandedLU as BandedLU,
    cho_factor as cho_factor,
    cho_solve as cho_solve,
    lu_factor as lu_factor,
    lu_solve as lu_solve,
)
from ._linalg.gmres import gmres as gmres
from ._linalg.incomplete import (
    IncompleteCholesky as IncompleteCholesky,
    IncompleteLU as IncompleteLU,
    ic0 as ic0,
    ilu0 as ilu0,
)
from ._linalg.jacobi import Jacobi as Jacobi, jacobi as jacobi
from ._linalg.krylov import SolveInfo as SolveInfo, bicgstab as bicgstab, cg as cg
from ._linalg.lstsq import lstsq_banded as lstsq_banded
from ._linalg.multigrid import Multigrid as Multigrid, multigrid as multigrid
from ._linalg.selected_inverse import selected_inverse as selected_inverse
from ._linalg.sharded_multigrid import ShardedMultigrid as ShardedMultigrid
from ._matrix import DiaMatrix as DiaMatrix
from ._shard import ShardedDiaMatrix as ShardedDiaMatrix, shard as shard

try:
    __version__ = version("jaxdia")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"


#: Public names whose modules load on first use (PEP 562), name -> module below jaxdia:
#: their imports are heavy or optional (lineax and equinox for the lineax classes). A new
#: lazy name is one entry here, one in the TYPE_CHECKING block below, and one in __all__
#: unless it needs an optional extra (tests/test_startup.py checks the first two agree).
_LAZY = {
    "BandedSolver": "._lineax",
    "DiaLinearOperator": "._lineax",
    "MultigridSolver": "._lineax",
    "offsets_tag": "._lineax",
}

if TYPE_CHECKING:  # what type checkers see of the lazy names
    from ._lineax import (
        BandedSolver as BandedSolver,
        DiaLinearOperator as DiaLinearOperator,
        MultigridSolver as MultigridSolver,
        offsets_tag as offsets_tag,
    )


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name], __name__), name)
        globals()[name] = value  # later lookups skip this function
        return value
    raise AttributeError(f"module 'jaxdia' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


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
    "enable_compilation_cache",
    "expm_multiply",
    "eye",
    "factorized",
    "gmres",
    "ic0",
    "ilu0",
    "IncompleteCholesky",
    "IncompleteLU",
    "Jacobi",
    "jacobi",
    "jacobian",
    "kron",
    "load_npz",
    "lstsq_banded",
    "lu_factor",
    "lu_solve",
    "matmul",
    "Multigrid",
    "multigrid",
    "odeint",
    "OdeResult",
    "OdeSolution",
    "save_npz",
    "selected_inverse",
    "shard",
    "slogdet",
    "ShardedDiaMatrix",
    "ShardedMultigrid",
    "solve_banded",
    "solve_ivp",
    "solveh_banded",
    "SolveInfo",
    "traces",
    "value_and_jacobian",
]
