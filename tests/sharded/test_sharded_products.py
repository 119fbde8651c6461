"""Plain DiaMatrix products and operations on sharded data (8 fake CPU devices): inside a
user's shard_map (``check_vma=True``), and with the data's columns split over an Explicit
mesh axis: values against SciPy and the unsharded call, documented result shardings, the
compiled halo exchange, grad, jvp, vmap and transposition.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.sharding import AxisType, PartitionSpec

import jaxdia

from .helpers import (
    auto_mesh,
    band_widths,
    close,
    collective_bytes,
    explicit_mesh_of,
    put,
    random_matrix,
    scipy_of,
    spec_of,
)


def test_products_inside_a_users_shard_map():
    """``A @ x`` inside a user's ``shard_map`` with its default ``check_vma=True``: one matrix
    per device, or one replicated matrix; forward, grad and jvp against plain ``vmap``."""
    rng = np.random.default_rng(12)
    mesh = auto_mesh()
    n, offsets = 30, (-4, -1, 0, 3)
    stacked = jnp.asarray(
        np.stack([np.nan_to_num(np.asarray(random_matrix(rng, n, offsets).data))] * 8)
        * rng.standard_normal((8, 1, 1))
    )
    x = jnp.asarray(rng.standard_normal((8, n, 2)))
    spec = PartitionSpec("rows")

    def product(d, v):
        return jaxdia.DiaMatrix(d, offsets, (n, n)) @ v

    def loss(y):
        return jnp.sum(jnp.sin(y))

    # One matrix per device: data and x both vary over the mesh axis.
    per_device = jax.shard_map(jax.vmap(product), mesh=mesh, in_specs=(spec, spec), out_specs=spec)
    close(jax.jit(per_device)(stacked, x), jax.vmap(product)(stacked, x))
    got = jax.jit(jax.grad(lambda d, v: loss(per_device(d, v)), argnums=(0, 1)))(stacked, x)
    want = jax.grad(lambda d, v: loss(jax.vmap(product)(d, v)), argnums=(0, 1))(stacked, x)
    for g, w in zip(got, want):
        close(g, w)
    _, tangent = jax.jvp(per_device, (stacked, x), (stacked, x))
    close(tangent, 2 * jax.vmap(product)(stacked, x))

    # One replicated matrix, x varying: the data cotangent is summed over the devices.
    shared = stacked[0]
    replicated = jax.shard_map(
        lambda d, v: jax.vmap(product, in_axes=(None, 0))(d, v),
        mesh=mesh,
        in_specs=(PartitionSpec(), spec),
        out_specs=spec,
    )
    plain = jax.vmap(product, in_axes=(None, 0))
    close(jax.jit(replicated)(shared, x), plain(shared, x))
    got = jax.jit(jax.grad(lambda d, v: loss(replicated(d, v)), argnums=(0, 1)))(shared, x)
    want = jax.grad(lambda d, v: loss(plain(d, v)), argnums=(0, 1))(shared, x)
    for g, w in zip(got, want):
        close(g, w)


def test_traces_inside_a_users_shard_map():
    """``jaxdia.traces`` and ``DiaMatrix.traces`` per device in a user's ``shard_map``
    (``check_vma=True``): values and gradients against NumPy and the unsharded call."""
    rng = np.random.default_rng(13)
    mesh = auto_mesh()
    spec = PartitionSpec("rows")
    M = jnp.asarray(rng.standard_normal((8, 6, 9)))
    dense = jax.shard_map(lambda m: jaxdia.traces(m, 4), mesh=mesh, in_specs=spec, out_specs=spec)
    expected = np.stack([[np.trace(m, k) for k in range(4)] for m in np.asarray(M)])
    close(jax.jit(dense)(M), expected)
    got = jax.grad(lambda m: jnp.sum(jnp.sin(dense(m))))(M)
    close(got, jax.grad(lambda m: jnp.sum(jnp.sin(jaxdia.traces(m, 4))))(M))

    data = jnp.asarray(rng.standard_normal((8, 3, 9)))
    offsets = (-2, 0, 5)

    def dia_traces(d):
        return jaxdia.DiaMatrix(d, offsets, (9, 9)).traces((-2, 0, 1, 5))

    sharded = jax.shard_map(dia_traces, mesh=mesh, in_specs=spec, out_specs=spec)
    close(jax.jit(sharded)(data), dia_traces(data))
    got = jax.grad(lambda d: jnp.sum(sharded(d) ** 2))(data)
    close(got, jax.grad(lambda d: jnp.sum(dia_traces(d) ** 2))(data))


def test_explicit_plain_products_match_scipy():
    """A plain DiaMatrix whose data columns are split over an Explicit axis: A @ x and
    x @ A against SciPy, square (halos wider than a block too) and rectangular, with x
    sharded like the columns, replicated, or (data replicated) x alone sharded."""
    rng = np.random.default_rng(20)
    cases = [  # devices, (m, n), offsets, x is ...
        (8, (64, 64), (-3, 0, 2), "sharded"),
        (8, (64, 64), (-20, -1, 0, 17), "sharded"),  # halos of 3 blocks (8 columns each)
        (4, (40, 40), (-1, 0, 1), "replicated"),
        (8, (48, 48), (-2, 0, 5), "only x"),
        (4, (24, 40), (-6, 0, 9, 30), "sharded"),  # m < n, m a multiple of 4
        (8, (70, 32), (-40, -3, 0, 2), "sharded"),  # m > n, not a multiple of 8
        (2, (30, 16), (-1, 0, 1), "only x"),  # x @ A: x of 30 rows, A's 16 columns
        (4, (32, 30), (-2, 0, 3), "only x"),  # w @ A: w split, A's 30 columns cannot be
    ]
    for devices, (m, n), offsets, how in cases:
        mesh = jax.make_mesh(
            (devices,), ("c",), axis_types=(AxisType.Explicit,), devices=jax.devices()[:devices]
        )
        data = np.asarray(random_matrix(rng, max(m, n), offsets).data)[:, :n]
        A = jaxdia.DiaMatrix(data, offsets, (m, n))
        oracle = sp.dia_array((np.nan_to_num(data), offsets), shape=(m, n))
        x, X = rng.standard_normal(n), rng.standard_normal((n, 3))
        w = rng.standard_normal((2, m))
        spec = (None,) if how == "only x" else (None, "c")
        sharded = jaxdia.DiaMatrix(put(A.data, mesh, *spec), offsets, (m, n))
        split = how != "replicated" and n % devices == 0
        xs, Xs = (put(x, mesh, "c"), put(X, mesh, "c")) if split else (put(x, mesh), put(X, mesh))
        ws = put(w, mesh, None, "c") if how == "only x" and m % devices == 0 else put(w, mesh)
        with jax.set_mesh(mesh):
            run = jax.jit(lambda A, x, X, w: (A @ x, A @ X, w @ A))
            for y, Y, z in (run(sharded, xs, Xs, ws), (sharded @ xs, sharded @ Xs, ws @ sharded)):
                close(y, oracle @ x)
                close(Y, oracle @ X)
                close(z, w @ oracle.toarray())
                # Documented result shardings: A @ x's rows over the columns' axis (for a
                # rectangular A, only when m is a multiple of its size), x @ A's columns.
                rows = ("c",) if m == n or m % devices == 0 else ()
                columns = (None, "c")
                if n % devices:  # nothing for A's columns to be split over: replicated
                    rows = columns = ()
                assert spec_of(y) == rows and spec_of(Y) == rows, (m, n, how, y.sharding)
                assert spec_of(z) == columns, (m, n, how, z.sharding)
    # Two mesh axes: the columns split over both, or over one while x is split over the
    # other (x is resharded to the columns' layout).
    mesh = explicit_mesh_of((2, 4), ("a", "c"))
    n, offsets = 64, (-11, 0, 3)
    A = random_matrix(rng, n, offsets)
    x = rng.standard_normal(n)
    for data_axes, x_axes in ((("a", "c"), ("a", "c")), (("a", "c"), "c"), ("c", "a")):
        sharded = jaxdia.DiaMatrix(put(A.data, mesh, None, data_axes), offsets, (n, n))
        with jax.set_mesh(mesh):
            y, z = jax.jit(lambda A, x: (A @ x, x @ A))(sharded, put(x, mesh, x_axes))
        close(y, scipy_of(A) @ x)
        close(z, scipy_of(A).T @ x)
        assert spec_of(y) == spec_of(z) == (data_axes,), (data_axes, y.sharding, z.sharding)


def test_explicit_plain_product_exchanges_halos():
    """The compiled product of a column-sharded DiaMatrix holds only collective-permutes,
    each device sending exactly its (lower + upper) halo rows: A @ x, x @ A and grad."""
    rng = np.random.default_rng(21)
    mesh = explicit_mesh_of(names=("c",))
    n, offsets = 4096, (-64, -1, 0, 1, 64)
    A = random_matrix(rng, n, offsets)
    sharded = jaxdia.DiaMatrix(put(A.data, mesh, None, "c"), offsets, (n, n))
    halo = sum(band_widths(offsets))
    with jax.set_mesh(mesh):
        for columns in (1, 3):
            x = put(rng.standard_normal((n, columns)), mesh, "c")
            for f in (lambda A, x: A @ x, lambda A, x: (x.T @ A).T):
                hlo = jax.jit(f).lower(sharded, x).compile().as_text()
                totals = collective_bytes(hlo)
                assert set(totals) == {"collective-permute"}, totals
                assert totals["collective-permute"] == halo * columns * 8, (totals, columns)
        # x replicated: resharded by a local slice, no more communication.
        hlo = jax.jit(lambda A, x: A @ x).lower(sharded, jnp.ones(n)).compile().as_text()
        assert collective_bytes(hlo) == {"collective-permute": halo * 8}, collective_bytes(hlo)
        loss = jax.grad(lambda A, x: jnp.sum(jnp.sin(A @ x)), argnums=(0, 1))
        hlo = jax.jit(loss).lower(sharded, put(np.ones(n), mesh, "c")).compile().as_text()
        assert set(collective_bytes(hlo)) == {"collective-permute"}, collective_bytes(hlo)


def _matrix_operations(A, x, dense):
    """Every DiaMatrix operation, as arrays: compared sharded against unsharded."""
    I2 = jaxdia.eye(2, dtype=A.dtype)
    shifted = A + 8 * jaxdia.eye(A.shape[0], dtype=A.dtype)
    return {
        "A.T": A.T.data,
        "A.T @ x": A.T @ x,
        "A.H": A.astype(jnp.complex128).H.data,
        "todense": A.todense(),
        "trace": A.trace(1),
        "traces": A.traces(3),
        "diagonal": A.diagonal(),
        "diagonal(-1)": A.diagonal(-1),
        "A + A": (A + A).data,
        "A - 2A": (A - 2 * A).data,
        "A * 2": (A * 2.0).data,
        "A + dense": A + dense,
        "A @ A": (A @ A).data,
        "sum": A.sum(),
        "sum(0)": A.sum(0),
        "sum(1)": A.sum(1),
        "mean(1)": A.mean(1),
        "count_nonzero(0)": A.count_nonzero(0),
        "to_bcoo": A.to_bcoo().data,
        "abs": abs(A).data,
        "power": (A**2).data,
        "with_diagonal": A.with_diagonal(2.0, 1).data,
        "multiply(row)": A.multiply(x).data,
        "multiply(dense)": A.multiply(dense).data,
        "A / dense": (A / (dense + 3.0)).data,
        "with_offsets": A.with_offsets((-2, -1, 0, 1, 2), check=False).data,
        "kron": jaxdia.kron(A, I2).data,
        "jacobi": jaxdia.jacobi(shifted)(x),
        "solve_banded": jaxdia.solve_banded(shifted, x),
        "from_dense": jaxdia.DiaMatrix.from_dense(dense, offsets=(-1, 0, 1)).data,
    }


def test_explicit_plain_matrix_operations():
    """Every DiaMatrix operation on data split over an Explicit axis (columns, batch, or
    both) and on an Auto one: the unsharded values, eagerly and under jit; documented
    result shardings."""
    rng = np.random.default_rng(22)
    n, offsets = 64, (-9, -1, 0, 1, 5)
    data = np.asarray(random_matrix(rng, n, offsets).data)
    x, dense = rng.standard_normal(n), rng.standard_normal((n, n))
    A = jaxdia.DiaMatrix(data, offsets, (n, n))
    want = _matrix_operations(A, jnp.asarray(x), jnp.asarray(dense))
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of(names=("c",), kind=kind)
        sharded = jaxdia.DiaMatrix(put(data, mesh, None, "c"), offsets, (n, n))
        xs, ds = put(x, mesh, "c"), put(dense, mesh, None, "c")
        # All eagerly on Explicit axes; a few under jit on both (on Auto: the unsharded
        # code, left to XLA's partitioner).
        few = ("A.T", "A.T @ x", "todense", "traces", "A @ A", "sum(1)", "jacobi")
        with jax.set_mesh(mesh):
            traced = jax.jit(
                lambda A, x, d: {k: v for k, v in _matrix_operations(A, x, d).items() if k in few}
            )(sharded, xs, ds)
            eager = _matrix_operations(sharded, xs, ds) if kind == AxisType.Explicit else {}
        for name, value in traced.items():
            close(value, want[name])
        for name, value in eager.items():
            close(value, want[name])
        if kind == AxisType.Explicit:
            # Matrices keep data's sharding; dense results indexed by rows or columns are
            # split over the columns' axis; traces, BCOO values, banded solves replicated.
            for name in ("A.T", "A + A", "A @ A", "kron", "from_dense", "todense", "A + dense"):
                assert spec_of(eager[name]) == (None, "c"), (name, eager[name].sharding)
            for name in ("A.T @ x", "sum(0)", "sum(1)", "diagonal", "jacobi"):
                assert spec_of(eager[name]) == ("c",), (name, eager[name].sharding)
            for name in ("traces", "to_bcoo", "diagonal(-1)", "solve_banded", "trace"):
                assert spec_of(eager[name]) == (), (name, eager[name].sharding)
            assert isinstance(sharded.to_scipy(), sp.dia_array)
            close(sharded.to_scipy().toarray(), A.to_scipy().toarray())
            close(sharded.matvec(x), A.matvec(x))
    # A batch split over one axis, the columns over another.
    mesh = explicit_mesh_of((2, 4), ("b", "c"))
    batch = np.stack([data, 2 * data])
    sharded = jaxdia.DiaMatrix(put(batch, mesh, "b", None, "c"), offsets, (n, n))
    plain = jaxdia.DiaMatrix(batch, offsets, (n, n))

    def some(A):
        v = jnp.ones(n)
        return A.T.data, A.todense(), A.traces(2), A @ v, v @ A, (A @ A).data

    with jax.set_mesh(mesh):
        for got, want_ in zip(jax.jit(some)(sharded), some(plain)):
            close(got, want_)
            assert got.sharding.spec[0] == "b", got.sharding


def test_explicit_plain_products_transform():
    """grad, jvp, vmap and linear_transpose of products of a column-sharded DiaMatrix."""
    rng = np.random.default_rng(23)
    mesh = explicit_mesh_of(names=("c",))
    n, offsets = 48, (-12, -1, 0, 3)
    A = random_matrix(rng, n, offsets)
    data = np.nan_to_num(np.asarray(A.data))
    x, X = rng.standard_normal(n), rng.standard_normal((5, n))

    def loss(d, v):
        M = jaxdia.DiaMatrix(d, offsets, (n, n))
        return jnp.sum(jnp.sin(M @ v)) + jnp.sum(jnp.cos(v @ M))

    want = jax.grad(loss, argnums=(0, 1))(data, x)
    with jax.set_mesh(mesh):
        ds, xs = put(data, mesh, None, "c"), put(x, mesh, "c")
        got = jax.jit(jax.grad(loss, argnums=(0, 1)))(ds, xs)
        for g, w in zip(got, want):
            close(g, w)
        assert spec_of(got[0]) == (None, "c") and spec_of(got[1]) == ("c",)
        sharded = jaxdia.DiaMatrix(ds, offsets, (n, n))
        _, tangent = jax.jvp(lambda v: sharded @ v, (xs,), (xs,))
        close(tangent, scipy_of(A) @ x)
        Y = jax.jit(jax.vmap(lambda v: sharded @ v))(put(X, mesh, None, "c"))
        close(Y, X @ scipy_of(A).T.toarray())
        (transposed,) = jax.linear_transpose(lambda v: sharded @ v, xs)(xs)
        close(transposed, scipy_of(A).T @ x)
