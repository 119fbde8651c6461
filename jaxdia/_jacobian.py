"""Banded Jacobians by compressed differentiation: :func:`jacobian` and
:func:`value_and_jacobian` return a :class:`jaxdia.DiaMatrix` from a few seeded products.

The pattern (static offsets, the shape, an optional structural mask) is coloured on the
host at trace time (:mod:`jaxdia._colouring`); ``f`` is linearized once and its linear
map applied to one seed per colour (a ``vmap``, or a ``lax.map`` over chunks of seeds),
and the products are decompressed into ``data`` by a gather with static indices.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import Array, lax

from ._checks import as_offsets, as_shape, check_distinct, check_dtype, is_traced, static_int
from ._colouring import Pattern, column_colouring, decompress, row_colouring, seeds
from ._geometry import holds_entries
from ._matrix import DiaMatrix
from ._parts import DiaParts
from ._typing import ArrayLike, DTypeLike, Offsets

_MODES = ("fwd", "rev")


def pattern(
    offsets: Offsets, shape: tuple[int, int], mask: ArrayLike | None, function: str
) -> Pattern:
    """The checked :class:`Pattern` of ``offsets`` (in any order) for a ``shape`` matrix;
    ``mask`` (rows in the order of ``offsets``) is reordered with them."""
    given = check_distinct(as_offsets(offsets, f"{function}: offsets"))
    shape = as_shape(shape)
    order = sorted(
        (k for k in range(len(given)) if holds_entries(given[k], shape)), key=given.__getitem__
    )
    if mask is not None:
        mask = np.asarray(mask)
        expected = (len(given), shape[1])
        if mask.shape != expected or mask.dtype != np.bool_:
            raise ValueError(
                f"{function}: mask must be a boolean array of shape (len(offsets), n) = "
                f"{expected} (data's layout, rows in the order of offsets), got "
                f"{mask.dtype} of shape {mask.shape}"
            )
        mask = mask[np.asarray(order, dtype=np.int64)]
    return Pattern(tuple(given[k] for k in order), shape, mask)


def _apply(linear: Callable[[Array], Array], seed_rows: Array, chunk_size: int | None) -> Array:
    """``linear`` applied to each row of ``seed_rows``: one vmap, or chunks in a loop."""
    if chunk_size is None or chunk_size >= seed_rows.shape[0]:
        return jax.vmap(linear)(seed_rows)
    return lax.map(linear, seed_rows, batch_size=chunk_size)


def dia_from_linear(
    linear: Callable[[Array], Array],
    pattern: Pattern,
    dtype: DTypeLike,
    *,
    transposed: bool = False,
    chunk_size: int | None = None,
) -> DiaMatrix:
    """The DiaMatrix of ``pattern`` that a linear map computes: ``linear`` takes a vector
    of ``n`` entries to ``A @ v`` (or, ``transposed``, ``m`` entries to ``A^T @ v``), in
    ``dtype``. One product per colour."""
    m, n = pattern.shape
    if transposed:
        colouring = row_colouring(pattern)
        products = _apply(linear, seeds(colouring, m, dtype), chunk_size)
    else:
        colouring = column_colouring(pattern)
        products = _apply(linear, seeds(colouring, n, dtype), chunk_size)
    data = decompress(products, pattern, colouring, rows=transposed)
    return DiaMatrix._wrap(DiaParts(data, pattern.offsets, pattern.shape))


def _first(pullback: Callable[[Array], tuple[Array]]) -> Callable[[Array], Array]:
    """The one cotangent of a pullback of one argument."""
    return lambda cotangent: pullback(cotangent)[0]


def _complex_rows(pullback: Callable[[Array], Array]) -> Callable[[Array], Array]:
    """``v -> J^T v`` for a complex-valued ``f`` of a real argument and real seeds ``v``:
    JAX's pullback to a real argument keeps only the real part (``Re(v^T J)``), so the
    imaginary part comes from a second pullback of ``-i v`` (``Re(-i v^T J) = v^T Im J``)."""
    return lambda seeds: pullback(seeds) + 1j * pullback(-1j * seeds)


def _options(
    function: str, offsets: Offsets, argnums: int, mode: str, chunk_size: int | None
) -> tuple[int, int | None]:
    """Checks what can be checked before the arguments are seen."""
    check_distinct(as_offsets(offsets, f"{function}: offsets"))
    if isinstance(argnums, (tuple, list)):
        raise TypeError(
            f"{function}: argnums must be one int (a DiaMatrix is the Jacobian with respect "
            f"to one array), got {argnums!r}; concatenate the arguments into one array, "
            "or take one Jacobian per argument"
        )
    argnum = static_int(argnums, f"{function}: argnums")
    if mode not in _MODES:
        raise ValueError(f"{function}: mode must be one of {_MODES}, got {mode!r}")
    if chunk_size is not None:
        chunk_size = static_int(chunk_size, f"{function}: chunk_size")
        if chunk_size < 1:
            raise ValueError(f"{function}: chunk_size must be a positive int, got {chunk_size}")
    return argnum, chunk_size


def _evaluate(
    function: str,
    f: Callable[..., Any],
    offsets: Offsets,
    argnum: int,
    args: tuple[Any, ...],
    *,
    has_aux: bool,
    mask: ArrayLike | None,
    mode: str,
    chunk_size: int | None,
    check: bool,
) -> tuple[Array, DiaMatrix, Any]:
    """``(f(*args), the Jacobian, aux)`` (aux None without ``has_aux``)."""
    if not -len(args) <= argnum < len(args):
        raise ValueError(
            f"{function}: argnums={argnum} is out of range for {len(args)} positional arguments"
        )
    x = jnp.asarray(args[argnum])
    if not jnp.issubdtype(x.dtype, jnp.inexact):
        raise TypeError(
            f"{function}: the argument differentiated (argnums={argnum}) must be a floating "
            f"or complex array, got dtype {x.dtype}"
        )
    check_dtype(x.dtype, f"{function}: the argument differentiated")

    out_shape: list[tuple[int, ...]] = []

    def flat_f(flat_x: Array) -> tuple[Array, Any]:
        call = list(args)
        call[argnum] = flat_x.reshape(x.shape)
        result = f(*call)
        out, aux = result if has_aux else (result, None)
        if not isinstance(out, (jax.Array, np.ndarray)):
            raise TypeError(
                f"{function}: f must return one array (its Jacobian is a DiaMatrix), got "
                f"{type(out).__name__}"
            )
        out_shape.append(out.shape)
        return jnp.ravel(out), aux

    flat_x = x.reshape(-1)
    if mode == "fwd":
        out, linear, aux = jax.linearize(flat_f, flat_x, has_aux=True)
    else:
        out, pullback, aux = jax.vjp(flat_f, flat_x, has_aux=True)
        linear = _first(pullback)
        if jnp.iscomplexobj(out) and not jnp.iscomplexobj(flat_x):
            linear = _complex_rows(linear)
    check_dtype(out.dtype, f"{function}: f's output")
    if jnp.iscomplexobj(flat_x) and not jnp.iscomplexobj(out):
        raise TypeError(
            f"{function}: f maps a complex argument to a real output ({out.dtype}), so it is "
            "not holomorphic and its Jacobian is no complex matrix; differentiate the real "
            "and imaginary parts of the argument as separate real arguments instead"
        )
    structure = pattern(offsets, (out.size, flat_x.size), mask, function)
    A = dia_from_linear(
        linear,
        structure,
        x.dtype if mode == "fwd" else out.dtype,
        transposed=mode == "rev",
        chunk_size=chunk_size,
    )
    if check:
        _check_against_dense(function, lambda v: flat_f(v)[0], flat_x, A, structure, mode)
    return out.reshape(out_shape[0]), A, aux


def _dense_jacobian(flat_f: Callable[[Array], Array], x: Array, mode: str) -> Array:
    """``jax.jacfwd`` (``jax.jacrev`` for ``mode="rev"``) of ``flat_f`` at ``x``: holomorphic
    for a complex ``x``; a complex-valued ``flat_f`` of a real ``x`` in reverse mode as the
    Jacobians of its real and imaginary parts (``jax.jacrev`` refuses it whole)."""
    holomorphic = bool(jnp.iscomplexobj(x))
    if mode == "fwd":
        return jax.jacfwd(flat_f, holomorphic=holomorphic)(x)
    if holomorphic or not jnp.iscomplexobj(jax.eval_shape(flat_f, x)):
        return jax.jacrev(flat_f, holomorphic=holomorphic)(x)
    real = jax.jacrev(lambda v: flat_f(v).real)(x)
    return real + 1j * jax.jacrev(lambda v: flat_f(v).imag)(x)


def _check_against_dense(
    function: str,
    flat_f: Callable[[Array], Array],
    x: Array,
    A: DiaMatrix,
    structure: Pattern,
    mode: str,
) -> None:
    """A ValueError unless ``A`` equals the dense Jacobian (to rounding): entries of ``f``
    outside the pattern would otherwise corrupt the entries of their colour silently."""
    if is_traced(x):
        raise ValueError(
            f"{function}: check=True compares with jax.jacfwd on concrete arguments; under "
            "jit, vmap or grad the argument is traced: check once on a small problem outside "
            "the transformation, then call without check"
        )
    expected = np.asarray(jax.jit(_dense_jacobian, static_argnums=(0, 2))(flat_f, x, mode))
    got = np.asarray(A.todense())
    scale = float(np.max(np.abs(expected), initial=0.0))
    tolerance = 64 * float(np.finfo(expected.dtype).eps) * max(scale, 1.0)
    wrong = np.argwhere(np.abs(got - expected) > tolerance)
    if not wrong.size:
        return
    inside = np.zeros(expected.shape, dtype=bool)
    columns = np.arange(A.shape[1])
    for k, offset in enumerate(structure.offsets):
        kept = columns[structure.slots[k]]
        inside[kept - offset, kept] = True
    outside = np.argwhere((np.abs(expected) > tolerance) & ~inside)
    if outside.size:
        i, j = (int(v) for v in outside[0])
        raise ValueError(
            f"{function}: f has derivatives outside the offsets {A.offsets} (or the mask): "
            f"d f[{i}] / d x[{j}] = {expected[i, j]!r} on offset {j - i}, and "
            f"{len(outside) - 1} more; add those offsets (or mask entries)"
        )
    i, j = (int(v) for v in wrong[0])
    raise ValueError(
        f"{function}: the Jacobian differs from jax.jacfwd at ({i}, {j}): {got[i, j]!r} "
        f"against {expected[i, j]!r}; the mask excludes an entry that is not zero"
    )


def jacobian(
    f: Callable[..., Any],
    offsets: Offsets,
    argnums: int = 0,
    *,
    has_aux: bool = False,
    mask: ArrayLike | None = None,
    mode: str = "fwd",
    chunk_size: int | None = None,
    check: bool = False,
) -> Callable[..., DiaMatrix | tuple[DiaMatrix, Any]]:
    """The Jacobian of ``f`` as a :class:`jaxdia.DiaMatrix` with the given offsets, from
    one product per colour of the pattern instead of one per column.

    As ``jax.jacfwd(f, argnums, has_aux)``, for an ``f`` whose Jacobian is banded: the
    returned function computes ``f(*args)``'s derivatives with respect to
    ``args[argnums]``, flattened (C order) on both sides, so the matrix has shape
    ``(f(*args).size, args[argnums].size)``: square for ``f: R^n -> R^n``, rectangular
    otherwise. Columns that share no row of the pattern share one seed (Curtis, Powell
    and Reid): a tridiagonal Jacobian takes 3 products, a 2-D 5-point stencil's 5 or 6, a
    3-D 7-point stencil's 7, whatever ``n``. The colouring is computed from the static
    offsets at trace time (the fewest colours of a modular, a blocked and a greedy
    colouring; cached per offsets, shape and mask), ``f`` is linearized once and its
    linear map applied to the seeds under ``vmap``, and the products are decompressed
    by a gather with static indices.

    Entries of ``f``'s Jacobian outside the offsets (or the mask) are not merely dropped:
    they add into the entries of columns of the same colour. Check a new ``f`` once with
    ``check=True`` on a small problem (or compare ``J.todense()`` with
    ``jax.jacfwd``).

    The function runs under ``jit`` and ``vmap`` (a batch of arguments gives a batched
    DiaMatrix) and is differentiable: ``J.data`` can enter a loss, and second
    derivatives flow through the decompression.

    Args:
      f: the function; it returns one array (and an auxiliary value with ``has_aux``).
      offsets: the diagonals of the Jacobian (static ints, distinct, any order). Offsets
        outside the matrix are dropped.
      argnums: which positional argument to differentiate (one int); it must be a
        floating or complex array (for complex arguments ``f`` is taken to be
        holomorphic, as ``jax.jacfwd(..., holomorphic=True)``; a complex-valued ``f`` of
        a real argument gives a complex Jacobian in either mode).
      has_aux: ``f`` returns ``(output, aux)``; the function then returns
        ``(J, aux)``.
      mask: optional structural zeros: booleans of shape ``(len(offsets), n)`` in
        ``data``'s layout (row ``k`` for ``offsets[k]`` as given), true where the
        entry may be non-zero. Fewer entries can mean fewer colours, e.g. 3 instead
        of 5 for 3 x 3 blocks on the diagonal (offsets ``-2 .. 2``).
      mode: ``"fwd"`` (JVPs) or ``"rev"`` (VJPs, seeding rows: for functions forward
        mode cannot differentiate, such as ``jax.custom_vjp`` code).
      chunk_size: apply the linear map to at most this many seeds at once
        (``lax.map``), bounding memory at the cost of a loop; None: all at once.
      check: compare with ``jax.jacfwd`` (``jacrev`` for ``mode="rev"``) and raise if
        they differ; needs concrete arguments (not under ``jit``), costs a dense
        Jacobian: for tests on a small problem.

    Returns:
      A function of ``f``'s arguments returning the DiaMatrix (and ``aux``).

    Raises:
      TypeError: for a tuple ``argnums``, an integer argument, an ``f`` that does not
        return one array, or a real-valued ``f`` of a complex argument (not holomorphic).
      ValueError: for duplicate offsets, a mask of the wrong shape, an unknown ``mode``,
        a ``chunk_size`` below 1; with ``check=True``, for a Jacobian with entries outside
        the pattern, or traced arguments.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> def f(u):  # -u'' + u^3 on a 1-D grid, zero boundary values
      ...     padded = jnp.pad(u, 1)
      ...     return 2 * u - padded[:-2] - padded[2:] + u**3
      >>> J = jaxdia.jacobian(f, offsets=(-1, 0, 1))(jnp.ones(5))
      >>> J.offsets, J.shape
      ((-1, 0, 1), (5, 5))
      >>> J.todense()[:2]
      Array([[ 5., -1.,  0.,  0.,  0.],
             [-1.,  5., -1.,  0.,  0.]], dtype=float32)
    """
    argnum, chunk_size = _options("jacobian", offsets, argnums, mode, chunk_size)

    def jacobian_function(*args: Any) -> DiaMatrix | tuple[DiaMatrix, Any]:
        _, A, aux = _evaluate(
            "jacobian",
            f,
            offsets,
            argnum,
            args,
            has_aux=has_aux,
            mask=mask,
            mode=mode,
            chunk_size=chunk_size,
            check=check,
        )
        return (A, aux) if has_aux else A

    return jacobian_function


def value_and_jacobian(
    f: Callable[..., Any],
    offsets: Offsets,
    argnums: int = 0,
    *,
    has_aux: bool = False,
    mask: ArrayLike | None = None,
    mode: str = "fwd",
    chunk_size: int | None = None,
    check: bool = False,
) -> Callable[..., tuple[Array | tuple[Array, Any], DiaMatrix]]:
    """:func:`jaxdia.jacobian` that returns ``f``'s value too, from the same
    linearization: ``(value, J)``, or ``((value, aux), J)`` with ``has_aux`` (as
    ``jax.value_and_grad``). The arguments are :func:`jaxdia.jacobian`'s.

    A Newton step needs both, ``x - J^{-1} f(x)``:

    Args:
      f: the function.
      offsets: the diagonals of the Jacobian.
      argnums: which positional argument to differentiate.
      has_aux: ``f`` returns ``(output, aux)``.
      mask: optional structural zeros (see :func:`jaxdia.jacobian`).
      mode: ``"fwd"`` or ``"rev"``.
      chunk_size: the most seeds per product.
      check: compare with a dense Jacobian (see :func:`jaxdia.jacobian`).

    Returns:
      A function of ``f``'s arguments returning ``(value, J)`` or ``((value, aux), J)``.

    Raises:
      TypeError, ValueError: as :func:`jaxdia.jacobian`.

    Example:
      >>> import jax.numpy as jnp
      >>> import jaxdia
      >>> def f(u):  # -u'' + u^3 = 1 on 50 points of (0, 1), zero boundary values
      ...     padded = jnp.pad(u, 1)
      ...     return (2 * u - padded[:-2] - padded[2:]) * 51**2 + u**3 - 1
      >>> u = jnp.zeros(50)
      >>> for _ in range(4):  # Newton's method, a banded solve per step
      ...     value, J = jaxdia.value_and_jacobian(f, (-1, 0, 1))(u)
      ...     u = u - jaxdia.solve_banded(J, value)
      >>> float(jnp.max(jnp.abs(f(u)))) < 1e-3  # float32 rounding of terms ~ 300
      True
    """
    argnum, chunk_size = _options("value_and_jacobian", offsets, argnums, mode, chunk_size)

    def value_and_jacobian_function(*args: Any) -> tuple[Array | tuple[Array, Any], DiaMatrix]:
        value, A, aux = _evaluate(
            "value_and_jacobian",
            f,
            offsets,
            argnum,
            args,
            has_aux=has_aux,
            mask=mask,
            mode=mode,
            chunk_size=chunk_size,
            check=check,
        )
        return ((value, aux) if has_aux else value), A

    return value_and_jacobian_function
