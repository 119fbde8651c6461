"""The fuzzer's ``jacobian`` family: ``jacobian``/``value_and_jacobian`` in both modes, with
masks, chunks, ``argnums``, ``has_aux``, ``jit``, ``vmap``, real and complex functions and
arguments, against ``jax.jacfwd``; ``check=True`` on a function whose Jacobian leaves the
pattern must raise.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import jaxdia

from .core import (
    CLEAR_ERRORS,
    DTYPES,
    FAIL,
    PASS,
    Outcome,
    Result,
    machine_epsilon,
    pick,
    raised,
    random_values,
    wide_dtype,
)

#: Holomorphic elementwise maps (so that complex arguments have a complex Jacobian).
_MAPS = {
    "identity": lambda v: v,
    "square": lambda v: v * v,
    "sin": jnp.sin,
    "exp": lambda v: jnp.exp(0.3 * v),
    "cube": lambda v: v * v * v,
}


def generate(rng, seed: int) -> dict:
    n = int(rng.choice([1, 2, 3, 4, 5, 7, 8, 16, 33, 64]))
    m = n if rng.random() < 0.8 else max(1, n + int(rng.integers(-3, 4)))
    width = int(rng.integers(1, 5))
    true = sorted({0, *(int(k) for k in rng.integers(-width, width + 1, int(rng.integers(1, 4))))})
    offsets = set(true)
    if rng.random() < 0.3:  # a wider pattern than the Jacobian's
        offsets |= {int(rng.integers(-width - 2, width + 3))}
    if rng.random() < 0.1:  # an offset outside the matrix
        offsets |= {max(m, n) + 2}
    leaky = rng.random() < 0.06  # the Jacobian leaves the pattern: check=True must raise
    args = pick(rng, {"real": 4, "complex": 2, "real_to_complex": 1.5})
    dtype = pick(
        rng,
        {"float64": 3, "float32": 2}
        if args == "real" or args == "real_to_complex"
        else {"complex128": 3, "complex64": 2},
    )
    return {
        "n": n,
        "m": m,
        "true": true,
        "offsets": sorted(offsets, key=lambda _: rng.random()),
        "maps": [str(rng.choice(list(_MAPS))) for _ in true],
        "coupled": bool(rng.random() < 0.4),  # products u[i] u[i + k]
        "args": args,
        "dtype": dtype,
        "mode": pick(rng, {"fwd": 1, "rev": 1}),
        "chunk_size": pick(rng, {"none": 4, 1: 1, 2: 1, 3: 1}),
        "mask": bool(rng.random() < 0.2),
        "has_aux": bool(rng.random() < 0.2),
        "value": bool(rng.random() < 0.25),
        "argnums": int(rng.random() < 0.2),
        "call": pick(rng, {"eager": 4, "jit": 2, "vmap": 1}),
        "check": bool(rng.random() < 0.2) or leaky,
        "leaky": leaky,
    }


def _jacobian_function(params, coefficients, mask_rows):
    """``f(p, u)`` (or ``f(u)``): ``out[i] = p * sum_k c_k[i] g_k(u[i + k])`` (plus
    ``u[i] u[i + k]`` terms), Jacobian within ``true``'s offsets (and ``leaky``'s)."""
    n, m = params["n"], params["m"]
    true = list(params["true"])
    maps = [_MAPS[name] for name in params["maps"]]
    if params["leaky"]:
        true = [*true, _leak_offset(params)]
        maps = [*maps, _MAPS["sin"]]

    def f(p, u):
        u = jnp.asarray(u)
        rows = jnp.arange(m)
        out = jnp.zeros((m,), jnp.result_type(u.dtype, coefficients.dtype))
        for k, g, c in zip(true, maps, coefficients):
            cols = rows + k
            inside = (cols >= 0) & (cols < n)
            values = jnp.where(inside, g(u[jnp.clip(cols, 0, max(n - 1, 0))]), 0)
            out = out + c[: len(rows)] * values
            if params["coupled"] and k != 0 and n:
                centre = jnp.where(rows < n, u[jnp.clip(rows, 0, n - 1)], 0)
                out = out + 0.5 * jnp.where(inside, centre * u[jnp.clip(cols, 0, n - 1)], 0)
        return p * out

    return f


def _leak_offset(params) -> int:
    true = params["true"]
    return max(true) + 1 if max(true) + 1 not in params["offsets"] else max(true) + 5


def _leaks(params) -> bool:
    """Whether a leaky case's extra diagonal has an entry inside the ``m x n`` matrix."""
    k = _leak_offset(params)
    return -params["m"] < k < params["n"]


def check(params: dict) -> Result:
    rng = np.random.default_rng(params["values"])
    n, m = params["n"], params["m"]
    dtype = np.dtype(DTYPES[params["dtype"]])
    coeff_dtype = np.complex128 if params["args"] != "real" else np.float64
    count = len(params["true"]) + (1 if params["leaky"] else 0)
    coefficients = random_values(rng, (count, m), coeff_dtype)
    offsets = [int(k) for k in params["offsets"]]
    mask = None
    if params["mask"]:
        # structural zeros: some entries of the pattern may not be nonzero (and are not)
        mask = rng.random((len(offsets), n)) < 0.8
        # the coefficients of masked-out entries vanish: entry (i, i + k) for k = offsets[r]
        for r, k in enumerate(offsets):
            if k in params["true"]:
                t = params["true"].index(k)
                for j in np.nonzero(~mask[r])[0]:
                    i = j - k
                    if 0 <= i < m:
                        coefficients[t, i] = 0
        if params["coupled"]:
            mask[:] = True  # the products also touch the main diagonal: keep it simple
    if params["args"] == "real":
        work = coefficients.astype(dtype)
    else:  # complex coefficients in the precision of the arguments
        work = coefficients.astype(
            np.complex64 if machine_epsilon(dtype) > 1e-10 else np.complex128
        )
    f2 = _jacobian_function(params, jnp.asarray(work), mask)
    p = jnp.asarray(1.5, dtype=np.float32 if machine_epsilon(dtype) > 1e-10 else np.float64)
    u = random_values(rng, (n,), dtype).astype(dtype)
    aux_value = jnp.arange(3.0)
    if params["argnums"] == 1:
        base = f2
    else:

        def base(u, p):
            return f2(p, u)

    if params["has_aux"]:

        def fun(*args):
            return base(*args), aux_value
    else:
        fun = base
    args = (p, u) if params["argnums"] == 1 else (u, p)
    options = dict(
        argnums=params["argnums"],
        has_aux=params["has_aux"],
        mask=mask,
        mode=params["mode"],
        check=params["check"],
    )
    if params["chunk_size"] != "none":
        options["chunk_size"] = int(params["chunk_size"])
    make = jaxdia.value_and_jacobian if params["value"] else jaxdia.jacobian
    jac = make(fun, offsets, **options)
    try:
        if params["call"] == "jit" and not params["check"]:
            result = jax.jit(jac)(*args)
        elif params["call"] == "vmap" and not params["check"]:
            batch_u = jnp.stack([u, 0.5 * u + 0.1])
            in_axes = (None, 0) if params["argnums"] == 1 else (0, None)
            batch_args = (p, batch_u) if params["argnums"] == 1 else (batch_u, p)
            result = jax.vmap(jac, in_axes=in_axes)(*batch_args)
        else:
            result = jac(*args)
    except CLEAR_ERRORS as error:
        return raised(
            error, unexpected=not (params["leaky"] and params["check"] and _leaks(params))
        )
    if params["leaky"] and params["check"] and _leaks(params):
        return Result(FAIL, "check=True did not raise for a Jacobian outside the pattern")
    if params["value"]:
        value, J = result
    else:
        value, J = None, result
    if params["has_aux"]:
        if params["value"]:
            value, aux = value
        else:
            J, aux = J
        aux = np.asarray(aux)  # a vmap broadcasts it over the batch
        if aux.shape[-1:] != (3,) or not np.all(aux == np.asarray(aux_value)):
            return Result(FAIL, "has_aux: the auxiliary value differs")
    # the oracle: jax.jacfwd of the same function in double precision
    wide_u = jnp.asarray(np.asarray(u).astype(wide_dtype(dtype)))
    wide_p = jnp.asarray(np.float64(1.5))
    f_wide = _jacobian_function(params, jnp.asarray(coefficients), mask)
    holomorphic = dtype.kind == "c"
    outcome = Outcome()
    members = (
        [(wide_u, 0)]
        if params["call"] != "vmap" or params["check"]
        else [(wide_u, 0), (0.5 * wide_u + 0.1, 1)]
    )
    eps = machine_epsilon(dtype)
    dense = np.asarray(J.todense())
    if J.shape != (m, n):
        return Result(FAIL, f"Jacobian shape {J.shape}, expected {(m, n)}")
    for point, member in members:
        reference = np.asarray(
            jax.jacfwd(lambda v: f_wide(wide_p, v), holomorphic=holomorphic)(point)
        )
        got = dense[member] if dense.ndim == 3 else dense
        scale = max(1.0, float(np.max(np.abs(reference), initial=0)))
        error = float(np.max(np.abs(got - reference), initial=0)) / scale
        tol = 256 * eps * max(1, len(params["true"]))
        if error > tol:
            note = f"Jacobian differs from jax.jacfwd by {error:.1e} (> {tol:.1e})"
            if np.iscomplexobj(reference) and not np.iscomplexobj(got):
                note += f"; the result is real ({got.dtype}), the Jacobian complex"
            outcome.add(FAIL, note, error / tol)
        else:
            outcome.add(PASS, "", error / tol)
        if value is not None:
            got_value = np.asarray(value)
            got_value = got_value[member] if got_value.ndim == 2 else got_value
            want = np.asarray(f_wide(wide_p, point))
            value_error = float(np.max(np.abs(got_value - want), initial=0)) / max(
                1.0, float(np.max(np.abs(want), initial=0))
            )
            if value_error > tol:
                outcome.add(FAIL, f"value_and_jacobian's value differs by {value_error:.1e}")
    return outcome.result()
