"""The dtypes jaxdia accepts, and the checks that say so."""

from __future__ import annotations

import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: dtypes a DiaMatrix can hold. Integer and bool matrices are rejected: convert them with
#: ``.astype`` first (the products, gradients and kernels are defined for inexact types).
SUPPORTED_DTYPES = tuple(
    np.dtype(d)
    for d in (jnp.bfloat16, np.float16, np.float32, np.float64, np.complex64, np.complex128)
)


def is_int(value: Any) -> bool:
    """Whether ``value`` is a Python or NumPy integer (bools excluded)."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_numeric(dtype: Any) -> bool:
    """Whether ``dtype`` is a bool, integer, floating (bfloat16 included) or complex type."""
    dtype = np.dtype(dtype)
    return dtype == np.bool_ or bool(jnp.issubdtype(dtype, jnp.number))


def native(array: np.ndarray) -> np.ndarray:
    """``array`` in the machine's byte order (JAX rejects the other, e.g. data in a file
    written on a big-endian machine)."""
    return array if array.dtype.isnative else array.astype(array.dtype.newbyteorder("="))


def check_dtype(dtype: Any, what: str = "data") -> np.dtype:
    """Returns ``dtype`` (in native byte order) if a DiaMatrix can hold it, else raises a
    TypeError saying why."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if dtype not in SUPPORTED_DTYPES:
        names = ", ".join(d.name for d in SUPPORTED_DTYPES)
        if what == "dtype":  # a requested result dtype, not the dtype of given values
            raise TypeError(
                f"dtype {dtype.name} is not supported: a DiaMatrix holds one of {names}"
            )
        hint = (
            " Convert integer or bool matrices first, e.g. S.astype(np.float64)."
            if dtype == np.bool_ or np.issubdtype(dtype, np.integer)
            else ""
        )
        raise TypeError(f"{what} has dtype {dtype.name}; a DiaMatrix holds one of {names}.{hint}")
    return dtype


def warn_if_unavailable(dtype: np.dtype, function: str) -> None:
    """Warns, as JAX does, when an explicitly requested ``dtype`` will be narrowed (float64
    and complex128 without x64): JAX would otherwise narrow it silently here."""
    available = np.dtype(jax.dtypes.canonicalize_dtype(dtype))
    if available != dtype:
        warnings.warn(
            f"Explicitly requested dtype {dtype.name} requested in {function} is not "
            f"available, and will be truncated to dtype {available.name}. To enable more "
            "dtypes, set the jax_enable_x64 configuration option or the JAX_ENABLE_X64 "
            "shell environment variable.",
            UserWarning,
            stacklevel=3,
        )
