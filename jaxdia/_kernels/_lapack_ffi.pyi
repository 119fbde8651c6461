"""The compiled extension's interface (its source: csrc/lapack_ffi/)."""

from collections.abc import Mapping
from typing import Any

def targets(routines: Mapping[str, Any], /) -> dict[str, Any]:
    """XLA FFI handlers of jaxdia's LAPACK custom calls, as ``{name: capsule}``, calling the
    routines of ``routines`` (LAPACK/BLAS names to SciPy's ``__pyx_capi__`` capsules)."""
