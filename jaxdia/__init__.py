"""jaxdia: DIA-format (diagonal storage) sparse matrices for JAX, in SciPy's layout."""

from importlib.metadata import PackageNotFoundError, version

from ._construct import diags as diags, eye as eye
from ._matrix import DiaMatrix as DiaMatrix, matmul as matmul

try:
    __version__ = version("jaxdia")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["DiaMatrix", "diags", "eye", "matmul"]
