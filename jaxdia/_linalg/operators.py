"""What the solvers take as an operator (``A``, or a preconditioner ``M``): every kind SciPy
takes, made into something the compiled solve applies to ``(*batch, n)`` arrays.

:func:`as_operator` sorts an operator into one of these kinds:

* a :class:`jaxdia.DiaMatrix`, a :class:`jaxdia.ShardedDiaMatrix`, jaxdia's
  preconditioners and factors, and a function ``v -> A v`` written in JAX: as they are,
  traced into the compiled solve;
* a dense matrix (a 2-D NumPy or JAX array): its product, in the compiled solve (the
  matrix is an argument of the program, not a constant);
* a ``scipy.sparse`` matrix: its product as a ``jax.experimental.sparse.BCOO`` (the
  stored entries, any pattern), in the compiled solve;
* a lineax operator: its ``mv``, in the compiled solve (a
  :class:`jaxdia.DiaLinearOperator`: its DiaMatrix);
* a SciPy ``LinearOperator``, or anything ``scipy.sparse.linalg.aslinearoperator`` takes
  (an object with ``shape`` and ``matvec``): the matrix that ``aslinearoperator`` wrapped
  (a dense or sparse matrix, the identity) as above; any other runs its own ``matvec``
  (``matmat`` for a batch) on the host, through ``jax.pure_callback`` (:class:`HostProduct`).

A host product works eagerly, under ``jit`` and under ``vmap`` (the batch goes to
``matmat`` in one call); differentiating through it raises a ``TypeError`` (JAX cannot
differentiate NumPy code). Its cost: each product copies the vector from the device to the
host and the result back and calls into Python, holding the GIL (on CPU the copies are
cheap and the Python call is what costs; on a GPU or TPU each product also synchronizes
the device); and JAX does not cache a program with a host callback on disk. An operator
written in JAX, or given as a matrix, avoids all of that.

Integer matrices are promoted as SciPy promotes them, to the default float type (float64
with x64 on, float32 otherwise); long double is refused (:func:`operator_dtype`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array

from .._checks import check_square, is_long_double, is_scipy_sparse, long_double_message
from .._matrix import DiaMatrix


class Converted(NamedTuple):
    """An operator as :func:`as_operator` returns it: what the solve applies (``operator``),
    its size ``n`` and its dtype (None where only applying it would tell: a function)."""

    operator: Any
    size: int | None
    dtype: np.dtype | None


def operator_dtype(dtype: Any, function: str, name: str) -> np.dtype:
    """The dtype an operator of ``dtype`` computes in: integers and bools as the default
    float (SciPy computes them in float64; JAX's default float is float32 with x64 off),
    long double refused (JAX has none)."""
    dtype = np.dtype(dtype)
    if is_long_double(dtype):
        raise TypeError(long_double_message(f"{function}: {name}", dtype))
    if dtype.kind in "biu":
        return np.dtype(jax.dtypes.canonicalize_dtype(float))
    if dtype.kind not in "fc":
        raise TypeError(f"{function}: {name} must be a numeric operator, got dtype {dtype}")
    return np.dtype(jax.dtypes.canonicalize_dtype(dtype))


def _scipy_linear_operator(A: object) -> bool:
    """Whether ``A`` is a SciPy ``LinearOperator`` (SciPy is not imported to tell: if it
    has not been imported, ``A`` cannot be one)."""
    module = sys.modules.get("scipy.sparse.linalg")
    return module is not None and isinstance(A, module.LinearOperator)


def _lineax_operator(A: object) -> bool:
    module = sys.modules.get("lineax")
    return module is not None and isinstance(A, module.AbstractLinearOperator)


def apply(A: Any, v: Array) -> Array:
    """``A @ v`` for vectors stacked on leading dims (``(*batch, n)``): ``A`` a DiaMatrix
    (a batch of matrices broadcasts with the vectors), another operator with ``@`` on
    vectors and ``(n, c)`` blocks (a :class:`jaxdia.ShardedDiaMatrix`: a stack goes
    through as one block), or a function of such stacks."""
    if callable(A) and not isinstance(A, DiaMatrix):
        applied: Any = A(v)
        return applied
    if v.ndim == 1:
        product: Any = A @ v  # DiaMatrix's @ is typed for matrices too
        return product
    if isinstance(A, DiaMatrix):
        product = A @ v[..., None]
        return product[..., 0]
    n = v.shape[-1]
    block = A @ v.reshape(-1, n).T
    return block.T.reshape(v.shape)


def vector_product(A: Any) -> Callable[[Array], Array]:
    """``v -> A @ v`` for vectors stacked on leading dims (:func:`apply`)."""
    return functools.partial(apply, A)


def _flat(v: Array) -> Array:
    return v.reshape(-1, v.shape[-1])


def _dense_product(matrix: Array, v: Array) -> Array:
    """``matrix @ v`` for vectors on leading dims (``(*batch, n)``), at full precision (a
    float32 dot at the default rounds to bfloat16 on a TPU)."""
    return jnp.einsum("ij,...j->...i", matrix.astype(v.dtype), v, precision="highest")


def _sparse_product(matrix: Any, v: Array) -> Array:
    """A BCOO matrix's product with vectors on leading dims."""
    product = matrix.astype(v.dtype) @ _flat(v).T
    return product.T.reshape(*v.shape[:-1], matrix.shape[0])


def _lineax_product(matrix: Any, v: Array) -> Array:
    """A lineax operator's ``mv`` on vectors on leading dims."""
    product = jax.vmap(matrix.mv)(_flat(v))
    return product.reshape(*v.shape[:-1], product.shape[-1]).astype(v.dtype)


def _identity(v: Array) -> Array:
    return v


class HostProduct:
    """A SciPy ``LinearOperator``'s product, run on the host by ``jax.pure_callback``:
    a function of ``(*batch, n)`` arrays, returning the vectors' dtype. It is static (a
    jit argument's structure), equal to another for the same operator, so that a second
    solve with the same operator compiles nothing. With ``adjoint`` it is the product
    with ``A^H`` (the operator's ``rmatmat``: see :func:`host_adjoint`)."""

    __slots__ = ("linear_operator", "function", "name", "adjoint")

    def __init__(self, linear_operator: Any, function: str, name: str, adjoint: bool = False):
        self.linear_operator = linear_operator
        self.function = function
        self.name = name
        self.adjoint = adjoint

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, HostProduct)
            and other.linear_operator is self.linear_operator
            and other.adjoint == self.adjoint
        )

    def __hash__(self) -> int:
        return hash((id(self.linear_operator), self.adjoint))

    def __call__(self, v: Array) -> Array:
        return _host_product(self, v)

    def on_host(self, x: np.ndarray) -> np.ndarray:
        """The product of the NumPy vectors ``x`` (``(*batch, n)``): ``matvec`` for one,
        ``matmat`` of their columns for several; a writable copy of ``x`` goes in, as
        SciPy's solvers hand one."""
        x = np.array(x)
        flat = x.reshape(-1, x.shape[-1])
        if self.adjoint:  # rmatmat: SciPy's falls back on rmatvec, and not the other way
            y = np.asarray(self.linear_operator.rmatmat(flat.T)).T
        elif flat.shape[0] == 1:
            y = np.asarray(self.linear_operator.matvec(flat[0])).reshape(1, -1)
        else:
            y = np.asarray(self.linear_operator.matmat(flat.T)).T
        if y.dtype.kind == "c" and x.dtype.kind != "c" and np.any(np.imag(y)):
            raise TypeError(
                f"{self.function}: {self.name} returned complex values for a real system; "
                "make b complex"
            )
        y = y.reshape(*x.shape[:-1], self.linear_operator.shape[0])
        return (y if x.dtype.kind == "c" else np.real(y)).astype(x.dtype, copy=False)


def on_host(A: Any) -> bool:
    """Whether ``A`` (as :func:`as_operator` returns it) runs its product on the host: a
    custom linear solve then gets no transposed solve (JAX cannot transpose the
    callback, and a gradient through it raises anyway)."""
    return isinstance(A, jax.tree_util.Partial) and isinstance(A.func, HostProduct)


#: SciPy's operators that combine others (``A + B``, ``A @ B``, ``c * A``, ``A ** p``,
#: ``A.H``, ``A.T``): each has an adjoint when every operator it combines has one.
_COMBINATIONS = {
    "_SumLinearOperator",
    "_ProductLinearOperator",
    "_ScaledLinearOperator",
    "_PowerLinearOperator",
    "_AdjointLinearOperator",
    "_TransposedLinearOperator",
}
#: A class that overrides one of these has an adjoint (SciPy's defaults of each defer to
#: the others and raise where none is defined).
_ADJOINT_METHODS = ("_rmatvec", "_rmatmat", "_adjoint")


def has_adjoint(linear_operator: Any) -> bool:
    """Whether a SciPy ``LinearOperator`` defines its product with ``A^H`` (``rmatvec``,
    ``rmatmat`` or ``_adjoint``), read from its class as SciPy's defaults decide, without
    calling it: one built by ``LinearOperator(shape, matvec)`` alone has none."""
    base = sys.modules["scipy.sparse.linalg"].LinearOperator
    kind = type(linear_operator)
    if kind.__name__ == "_CustomLinearOperator":
        return any(
            getattr(linear_operator, f"_CustomLinearOperator__{name}_impl", None) is not None
            for name in ("rmatvec", "rmatmat")
        )
    if kind.__name__ in _COMBINATIONS:
        parts = [part for part in linear_operator.args if isinstance(part, base)]
        return all(has_adjoint(part) for part in parts)
    return any(getattr(kind, name) is not getattr(base, name) for name in _ADJOINT_METHODS)


def host_adjoint(A: Any) -> Any:
    """The product ``v -> A^H v`` of a host operator ``A`` (as :func:`as_operator` returns
    it) whose ``LinearOperator`` defines one (:func:`has_adjoint`), as ``A`` is applied;
    None for any other ``A``."""
    if not on_host(A):
        return None
    product = A.func
    if not has_adjoint(product.linear_operator):
        return None
    adjoint = HostProduct(product.linear_operator, product.function, product.name, adjoint=True)
    return jax.tree_util.Partial(adjoint)


def matrix_of(A: Any) -> Any:
    """The matrix behind ``A`` (as :func:`as_operator` returns it) when it was given as a
    dense matrix (a NumPy or JAX array) or a ``scipy.sparse`` one (a
    ``jax.experimental.sparse.BCOO``); None for any other operator."""
    if isinstance(A, jax.tree_util.Partial) and A.func in (_dense_product, _sparse_product):
        return A.args[0]
    return None


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def _host_product(product: HostProduct, v: Array) -> Array:
    rows = product.linear_operator.shape[0]
    result = jax.ShapeDtypeStruct((*v.shape[:-1], rows), v.dtype)
    return jax.pure_callback(product.on_host, result, v, vmap_method="broadcast_all")


@_host_product.defjvp
def _host_product_jvp(product: HostProduct, primals: Any, tangents: Any) -> Any:
    raise TypeError(
        f"{product.function}: {product.name} is a SciPy LinearOperator whose product runs on "
        "the host (NumPy, through jax.pure_callback), and JAX cannot differentiate through "
        "it. To differentiate, pass the operator as a DiaMatrix, a dense array, a lineax "
        "operator or a function written in jax.numpy."
    )


def _from_matrix(matrix: Any, function: str, name: str) -> Converted:
    """A dense or ``scipy.sparse`` matrix as an operator applied in the compiled solve."""
    if is_scipy_sparse(matrix):
        from jax.experimental import sparse as jsparse  # on first use: it slows the import

        dtype = operator_dtype(matrix.dtype, function, name)
        check_square(matrix, function)
        bcoo = jsparse.BCOO.from_scipy_sparse(matrix.astype(dtype))
        return Converted(jax.tree_util.Partial(_sparse_product, bcoo), matrix.shape[0], dtype)
    dtype = operator_dtype(matrix.dtype, function, name)
    check_square(matrix, function)
    dense = matrix.astype(dtype) if isinstance(matrix, jax.Array) else np.asarray(matrix, dtype)
    return Converted(jax.tree_util.Partial(_dense_product, dense), matrix.shape[0], dtype)


def _from_linear_operator(A: Any, function: str, name: str) -> Converted:
    """A SciPy ``LinearOperator``: the matrix ``aslinearoperator`` wrapped, the identity,
    or a :class:`HostProduct`."""
    kind = type(A).__name__
    wrapped = getattr(A, "A", None)
    if kind == "MatrixLinearOperator" and (
        is_scipy_sparse(wrapped) or isinstance(wrapped, np.ndarray)
    ):
        return _from_matrix(wrapped, function, name)
    check_square(A, function)
    if A.dtype is None:
        raise TypeError(f"{function}: {name} is a LinearOperator without a dtype")
    dtype = operator_dtype(A.dtype, function, name)
    if kind == "IdentityOperator":
        return Converted(jax.tree_util.Partial(_identity), A.shape[0], dtype)
    return Converted(jax.tree_util.Partial(HostProduct(A, function, name)), A.shape[0], dtype)


def as_operator(A: Any, function: str, name: str) -> Converted:
    """``A`` (the argument ``name`` of ``function``) as the solve applies it: see the
    module's docstring for the kinds. A DiaMatrix, another jaxdia operator or a function
    comes back as it is (with its size and dtype where it has them); the caller checks
    those kinds as it did before.

    Raises:
      TypeError: for anything else, saying what is accepted; for long double.
      ValueError: for a matrix or operator that is not square.
    """
    if isinstance(A, DiaMatrix):
        return Converted(A, A.shape[-1], np.dtype(A.dtype))
    if _scipy_linear_operator(A):
        return _from_linear_operator(A, function, name)
    if _lineax_operator(A):
        matrix = getattr(A, "matrix", None)
        if type(A).__name__ == "DiaLinearOperator" and isinstance(matrix, DiaMatrix):
            return Converted(matrix, matrix.shape[-1], np.dtype(matrix.dtype))
        structure = A.in_structure()
        if not isinstance(structure, jax.ShapeDtypeStruct) or len(structure.shape) != 1:
            raise TypeError(
                f"{function}: {name} must be a lineax operator on vectors, got input "
                f"structure {structure}"
            )
        check_square(jax.ShapeDtypeStruct((A.out_size(), A.in_size()), structure.dtype), function)
        dtype = operator_dtype(structure.dtype, function, name)
        return Converted(jax.tree_util.Partial(_lineax_product, A), A.in_size(), dtype)
    if is_scipy_sparse(A) or (isinstance(A, (np.ndarray, jax.Array)) and A.ndim == 2):
        return _from_matrix(A, function, name)
    if isinstance(A, (np.ndarray, jax.Array)):
        raise ValueError(
            f"{function}: {name} given as an array must be a 2-D matrix, got shape {A.shape}"
        )
    if callable(A) or hasattr(A, "__matmul__"):
        return Converted(A, None, None)
    if hasattr(A, "shape") and hasattr(A, "matvec"):
        from scipy.sparse.linalg import aslinearoperator

        return _from_linear_operator(aslinearoperator(A), function, name)
    raise TypeError(
        f"{function}: {name} must be a jaxdia.DiaMatrix (or ShardedDiaMatrix), a dense or "
        "scipy.sparse matrix, a scipy.sparse.linalg.LinearOperator (or an object with shape "
        f"and matvec), a lineax operator or a function v -> {name} v, got {type(A).__name__}"
    )
