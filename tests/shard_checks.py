"""Checks of the sharded DIA product on 8 fake CPU devices, run in their own process.

JAX fixes its device count when it initializes, and the rest of the test suite runs on
one device, so ``tests/test_shard.py`` runs this script in subprocesses (two groups of
checks) with ``XLA_FLAGS=--xla_force_host_platform_device_count=8``. Each check prints
``PASS <name>`` or ``FAIL <name>`` and a traceback; the exit code is the number of
failures.

Run one by hand: ``python tests/shard_checks.py [name ...]``.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import re
import sys
import time
import traceback

os.environ["XLA_FLAGS"] = (
    os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8"
).strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
import scipy.sparse.linalg as spla  # noqa: E402
from jax.scipy.sparse import linalg as jla  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec  # noqa: E402

jax.config.update("jax_enable_x64", True)

# The jaxdia of the checkout this script is in (as pytest imports it in tests/test_shard.py),
# not whichever one the environment has installed; and tests.test_multigrid's matrices.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxdia  # noqa: E402
from jaxdia._geometry import band_widths  # noqa: E402

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def full_check(fn):
    """A check of the full tier: run by name (``tests/test_shard.py``'s tests marked
    ``full``), not in the groups of ``@check`` functions."""
    CHECKS[fn.__name__] = fn
    return fn


def auto_mesh(devices=8, name="rows"):
    return jax.make_mesh(
        (devices,), (name,), axis_types=(AxisType.Auto,), devices=jax.devices()[:devices]
    )


def random_matrix(rng, n, offsets, dtype=np.float64):
    data = rng.standard_normal((len(offsets), n))
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal((len(offsets), n))
    # Garbage in SciPy's padding slots: the sharded product must never read it.
    for k, offset in enumerate(offsets):
        data[k, : max(0, offset)] = np.nan
        data[k, min(n, n + offset) :] = np.nan
    return jaxdia.DiaMatrix(data.astype(dtype), offsets, (n, n))


def scipy_of(A):
    data = np.nan_to_num(np.asarray(A.data), nan=0.0)
    return sp.dia_array((data, A.offsets), shape=A.shape)


def poisson_2d(side, dtype=np.float64):
    """The 5-point Laplacian on a side x side grid (SPD), as a DiaMatrix."""
    one = sp.diags_array([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(side, side))
    eye = sp.eye_array(side)
    S = (sp.kron(eye, one) + sp.kron(one, eye)).todia()
    return jaxdia.DiaMatrix.from_scipy(S.astype(dtype))


_ITEMSIZE = {
    "pred": 1,
    "s8": 1,
    "u8": 1,
    "f16": 2,
    "bf16": 2,
    "s16": 2,
    "f32": 4,
    "s32": 4,
    "u32": 4,
    "f64": 8,
    "s64": 8,
    "u64": 8,
    "c64": 8,
    "c128": 16,
}
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%(\S+) = (\w+)\[([\d,]*)\]\S* ([\w-]+)\((.*?)\)")
COLLECTIVES = ("collective-permute", "all-gather", "all-reduce", "all-to-all", "reduce-scatter")


def collective_traffic(hlo: str) -> dict[str, dict[str, int]]:
    """Per kind of collective in compiled HLO text: count, and bytes per device.

    Reads ``jax.jit(f).lower(...).compile().as_text()``: every instruction's result size
    is recorded by name, then the operands of each collective are looked up. ``sent`` is
    the operands' size (what each device contributes), ``received`` the result's (for an
    all-gather, less the device's own block). Written for CPU HLO, whose collectives are
    synchronous (GPU HLO splits them into ``-start``/``-done`` pairs with tuple results).
    """
    sizes: dict[str, int] = {}
    totals: dict[str, dict[str, int]] = {}
    for line in hlo.splitlines():
        match = _INSTRUCTION.match(line)
        if not match:
            continue
        name, dtype, dims, kind, operands = match.groups()
        size = _ITEMSIZE.get(dtype, 0) * int(np.prod([int(d) for d in dims.split(",") if d]))
        sizes[name] = size
        if kind in COLLECTIVES:
            sent = sum(sizes.get(op, 0) for op in re.findall(r"%([\w.-]+)", operands))
            entry = totals.setdefault(kind, {"count": 0, "sent": 0, "received": 0})
            entry["count"] += 1
            entry["sent"] += sent
            entry["received"] += size - sent if kind == "all-gather" else size
    return totals


def collective_bytes(hlo: str) -> dict[str, int]:
    """Bytes each device sends, per kind of collective (see ``collective_traffic``)."""
    return {kind: entry["sent"] for kind, entry in collective_traffic(hlo).items()}


def close(actual, expected, tol=1e-12):
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=tol, atol=tol)


# -- products -------------------------------------------------------------------------------


@check
def products_match_scipy():
    """Random sizes (divisible or not), offsets (halos wider than a shard too), devices."""
    rng = np.random.default_rng(0)
    fixed = [
        (8, 64, (-3, 0, 2)),  # divisible, halo within a shard
        (8, 37, (-1, 0, 1)),  # padded to 40 rows
        (8, 20, (-9, 0, 5, 19)),  # halos of 3 and 7 shards (3 rows each)
        (8, 5, (-4, 1)),  # fewer rows than devices
        (3, 10, ()),  # no diagonals
    ]
    for case in range(len(fixed) + 6):
        if case < len(fixed):
            devices, n, offsets = fixed[case]
        else:
            devices = int(rng.choice([1, 2, 3, 4, 8]))
            n = int(rng.integers(1, 70))
            pool = np.arange(-n + 1, n)
            size = min(len(pool), int(rng.integers(1, 5)))
            offsets = tuple(sorted(rng.choice(pool, size=size, replace=False).tolist()))
        A = random_matrix(rng, n, offsets)
        mesh = auto_mesh(devices)
        x, X = rng.standard_normal(n), rng.standard_normal((n, 3))

        @jax.jit  # one compilation per case: this check is about values
        def run(A, x, X):
            S = jaxdia.shard(A, mesh, "rows")
            y = S @ S.shard_vector(x)
            return y, S.unshard_vector(y), S.unshard_vector(S @ S.shard_vector(X)), S.to_dia()

        y, y_n, Y_n, back = run(A, x, X)
        assert y.shape == (devices * max(1, -(-n // devices)),), (case, y.shape)
        close(y_n, scipy_of(A) @ x)
        assert not np.any(np.asarray(y)[n:]), case  # padding rows of the result stay zero
        close(Y_n, scipy_of(A) @ X)
        close(back.todense(), scipy_of(A).toarray())


@check
def products_with_many_diagonals():
    """A product of more than 64 diagonals (one loop over them on CPU) inside the sharded
    product's shard_map and inside one of the user's: its carry varies over the devices."""
    rng = np.random.default_rng(3)
    n, offsets = 200, tuple(range(-40, 40))
    A = random_matrix(rng, n, offsets)
    x = rng.standard_normal(n)
    for kind in (AxisType.Auto, AxisType.Explicit):
        S = jaxdia.shard(A, explicit_mesh_of(kind=kind), "rows")
        y = jax.jit(lambda S, b: S @ b)(S, S.shard_vector(x))
        close(S.unshard_vector(y), scipy_of(A) @ x)
    mesh = explicit_mesh_of()
    B = jaxdia.DiaMatrix(np.nan_to_num(np.asarray(A.data)), offsets, A.shape)
    X = rng.standard_normal((8, n))
    each = jax.shard_map(
        lambda v: (B @ v[0])[None],
        mesh=mesh,
        in_specs=PartitionSpec("rows"),
        out_specs=PartitionSpec("rows"),
    )
    close(jax.jit(each)(put(X, mesh, "rows")), X @ scipy_of(A).T)


@check
def unpadded_vector_gets_a_hint():
    S = jaxdia.shard(jaxdia.eye(37), auto_mesh(), "rows")
    assert S.padded_size == 40
    try:
        S @ np.ones(37)
    except ValueError as error:
        assert "S.shard_vector(x)" in str(error), error
    else:
        raise AssertionError("a length-n vector was accepted where N rows are needed")


@check
def dtypes_and_promotion():
    rng = np.random.default_rng(1)
    mesh = auto_mesh()
    for dtype, tol in ((np.float32, 1e-5), (np.complex128, 1e-12), (np.complex64, 1e-5)):
        A = random_matrix(rng, 40, (-5, 0, 3), dtype)
        S = jaxdia.shard(A, mesh, "rows")
        assert S.dtype == dtype
        x = rng.standard_normal(40).astype(dtype)
        y = S @ S.shard_vector(x)
        assert y.dtype == dtype, (dtype, y.dtype)
        close(S.unshard_vector(y), scipy_of(A) @ x.astype(np.complex128), tol)
    A = random_matrix(rng, 40, (-1, 0, 1), np.float32)
    S = jaxdia.shard(A, mesh, "rows")
    y = S @ S.shard_vector(np.ones(40, np.float64))
    assert y.dtype == np.float64, y.dtype


@check
def matches_unsharded_product():
    rng = np.random.default_rng(2)
    A = random_matrix(rng, 100, (-10, -1, 0, 1, 10))
    S = jaxdia.shard(A, auto_mesh(), "rows")
    x = rng.standard_normal(100)
    close(S.unshard_vector(S @ S.shard_vector(x)), A @ x)


@check
def result_stays_sharded():
    rng = np.random.default_rng(3)
    A = random_matrix(rng, 64, (-2, 0, 2))
    S = jaxdia.shard(A, auto_mesh(), "rows")
    y = jax.jit(lambda S, v: S @ (S @ v))(S, S.shard_vector(rng.standard_normal(64)))
    assert y.sharding.spec == PartitionSpec("rows"), y.sharding
    assert S.windows.sharding.spec[0] == "rows", S.windows.sharding


@check
def from_a_global_array():
    """Data built shard by shard (as on several hosts) is never gathered on one device."""
    rng = np.random.default_rng(12)
    mesh = auto_mesh()
    n, offsets = 64, (-8, 0, 8)
    host = rng.standard_normal((3, n))
    data = jax.make_array_from_callback(
        host.shape, jax.NamedSharding(mesh, PartitionSpec(None, "rows")), lambda i: host[i]
    )
    S = jaxdia.shard(jaxdia.DiaMatrix(data, offsets, (n, n)), mesh, "rows")
    x = rng.standard_normal(n)
    xs = jax.make_array_from_callback((n,), S.vector_sharding, lambda i: x[i])
    close(S.unshard_vector(S @ xs), sp.dia_array((host, offsets), shape=(n, n)) @ x)
    build = jax.jit(lambda d: jaxdia.shard(jaxdia.DiaMatrix(d, offsets, (n, n)), mesh, "rows"))
    hlo = build.lower(data).compile().as_text()
    assert set(collective_bytes(hlo)) == {"collective-permute"}, collective_bytes(hlo)


@check
def multi_axis_mesh():
    """Rows split over one axis of a 4 x 2 mesh; the other axis holds replicas."""
    rng = np.random.default_rng(4)
    mesh = jax.make_mesh((4, 2), ("rows", "model"), axis_types=(AxisType.Auto,) * 2)
    A = random_matrix(rng, 30, (-3, 0, 1))
    for axis in ("rows", "model"):
        S = jaxdia.shard(A, mesh, axis)
        x = rng.standard_normal(30)
        close(S.unshard_vector(jax.jit(S.__matmul__)(S.shard_vector(x))), scipy_of(A) @ x)


@check
def explicit_mesh():
    """JAX's default (Explicit) axis types: eager, and jit inside ``jax.set_mesh``."""
    rng = np.random.default_rng(5)
    mesh = jax.make_mesh((8,), ("rows",), devices=jax.devices())
    A = random_matrix(rng, 50, (-7, 0, 7))
    x = rng.standard_normal(50)
    S = jaxdia.shard(A, mesh, "rows")
    close(S.unshard_vector(S @ S.shard_vector(x)), scipy_of(A) @ x)
    with jax.set_mesh(mesh):
        f = jax.jit(
            lambda d, v: S.unshard_vector(
                jaxdia.shard(jaxdia.DiaMatrix(d, A.offsets, A.shape), mesh, "rows")
                @ S.shard_vector(v)
            )
        )
        close(f(A.data, x), scipy_of(A) @ x)


@check
def jit_cache_hits():
    rng = np.random.default_rng(6)
    mesh = auto_mesh()
    traces = []

    @jax.jit
    def f(S, v):
        traces.append(1)
        return S @ v

    S1 = jaxdia.shard(random_matrix(rng, 64, (-1, 0, 1)), mesh, "rows")
    S2 = jaxdia.shard(random_matrix(rng, 64, (-1, 0, 1)), mesh, "rows")
    v = S1.shard_vector(np.ones(64))
    f(S1, v)
    f(S2, v)
    assert len(traces) == 1, traces


@check
def vmap_over_vectors():
    rng = np.random.default_rng(7)
    A = random_matrix(rng, 48, (-4, 0, 2))
    S = jaxdia.shard(A, auto_mesh(), "rows")
    X = rng.standard_normal((5, 48))
    Y = jax.vmap(lambda v: S @ v)(jnp.stack([S.shard_vector(x) for x in X]))
    close(np.asarray(Y)[:, :48], X @ scipy_of(A).T.toarray())


# -- communication ---------------------------------------------------------------------------


@check
def hlo_has_halo_exchange_and_no_all_gather():
    rng = np.random.default_rng(8)
    for n, offsets, columns in ((4096, (-64, -1, 0, 1, 64), 1), (1000, (-3, 0, 5), 4)):
        A = random_matrix(rng, n, offsets)
        S = jaxdia.shard(A, auto_mesh(), "rows")
        x = S.shard_vector(rng.standard_normal((n, columns)))
        hlo = jax.jit(lambda S, v: S @ v).lower(S, x).compile().as_text()
        totals = collective_bytes(hlo)
        assert "all-gather" not in hlo, "the product all-gathers"
        assert set(totals) == {"collective-permute"}, totals
        lower, upper = S.halo
        # Each device sends exactly its halo rows: (lower + upper) * columns elements.
        assert totals["collective-permute"] == (lower + upper) * columns * 8, (totals, S.halo)


@check
def hlo_of_grad_and_cg_has_no_all_gather():
    A = poisson_2d(16)
    S = jaxdia.shard(A, auto_mesh(), "rows")
    b = S.shard_vector(np.ones(256))
    solve = jax.jit(lambda S, b: jla.cg(S, b, tol=1e-10, maxiter=500)[0])
    hlo = solve.lower(S, b).compile().as_text()
    assert "collective-permute" in hlo and "all-gather" not in hlo
    loss = jax.jit(jax.grad(lambda S, b: jnp.sum(jnp.sin(S @ b)), argnums=(0, 1)))
    hlo = loss.lower(S, b).compile().as_text()
    assert "collective-permute" in hlo and "all-gather" not in hlo


@contextlib.contextmanager
def host_as_gpu():
    """Lets Pallas Triton kernels lower for cuda/rocm inside ``shard_map`` without a GPU.

    jax 0.12 reads the GPU's compute capability when it lowers a Triton kernel. Outside
    ``shard_map`` an abstract device supplies it (``abstract_gpu`` in test_lowering.py);
    inside, the abstract device is the mesh's own (a CPU here), so this registers the
    host's device kind as an H100 in JAX's private GPU table for the duration. jax 0.10.2
    does not ask, and has no such table.
    """
    try:
        from jax._src.pallas.triton import gpu_info
    except ImportError:
        yield
        return
    kind = jax.devices()[0].device_kind
    added = kind not in gpu_info.registry
    if added:
        gpu_info.registry[kind] = lambda: gpu_info.GpuInfo(
            gpu_version=gpu_info.GpuVersion.H100, arch_name="9.0", compute_capability=90
        )
    try:
        yield
    finally:
        if added:
            del gpu_info.registry[kind]


@check
def lowers_for_gpu_and_tpu():
    """Inside shard_map the local product is dia_spmm: the Pallas kernels on GPU (Triton
    or, from JAX 0.11 on, Mosaic GPU) and TPU."""
    A = jaxdia.diags([1.0, -2.0, 1.0], offsets=[-1, 0, 1], shape=(256, 256), dtype=np.float32)
    S = jaxdia.shard(A, auto_mesh(), "rows")
    x = S.shard_vector(np.ones(256, np.float32))
    traced = jax.jit(lambda S, v: S @ v).trace(S, x)
    for platform, calls in (
        ("cuda", ("__gpu$xla.gpu.triton", "triton_kernel_call", "mosaic_gpu")),
        ("tpu", ("tpu_custom_call",)),
    ):
        with host_as_gpu():
            text = traced.lower(lowering_platforms=(platform,)).as_text()
        assert any(call in text for call in calls), platform
        assert "collective_permute" in text and "all_gather" not in text, platform


# -- solvers and gradients -------------------------------------------------------------------


@check
def cg_poisson_matches_unsharded_and_scipy():
    for side in (16, 15):  # 256 rows (divisible by 8) and 225 rows (padded to 232)
        A = poisson_2d(side)
        n = side * side
        S = jaxdia.shard(A, auto_mesh(), "rows")
        rhs = np.random.default_rng(side).standard_normal(n)
        x_sharded, _ = jax.jit(lambda S, b: jla.cg(S, b, tol=1e-12, maxiter=1000))(
            S, S.shard_vector(rhs)
        )
        assert x_sharded.sharding.spec == PartitionSpec("rows"), x_sharded.sharding
        assert not np.any(np.asarray(x_sharded)[n:])
        x_plain, _ = jax.jit(lambda A, b: jla.cg(A, b, tol=1e-12, maxiter=1000))(A, rhs)
        close(S.unshard_vector(x_sharded), x_plain, 1e-9)
        close(S.unshard_vector(x_sharded), spla.spsolve(scipy_of(A).tocsc(), rhs), 1e-9)


@check
def gmres_and_bicgstab():
    rng = np.random.default_rng(9)
    A = jaxdia.DiaMatrix(np.asarray(poisson_2d(8).data), (-8, -1, 0, 1, 8), (64, 64))
    data = np.asarray(A.data).copy()
    data[3] += 0.3 * rng.standard_normal(64)  # nonsymmetric
    A = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    S = jaxdia.shard(A, auto_mesh(), "rows")
    rhs = rng.standard_normal(64)
    expected = spla.spsolve(scipy_of(A).tocsc(), rhs)
    for solver in (jla.gmres, jla.bicgstab):
        x, _ = jax.jit(lambda S, b: solver(S, b, tol=1e-12, atol=0.0, maxiter=500))(
            S, S.shard_vector(rhs)
        )
        close(S.unshard_vector(x), expected, 1e-8)


@check
def grad_wrt_data_and_rhs():
    rng = np.random.default_rng(10)
    mesh = auto_mesh()
    A = random_matrix(rng, 45, (-9, -1, 0, 2))
    data = jnp.asarray(np.nan_to_num(np.asarray(A.data)))
    x = rng.standard_normal(45)

    def sharded(d, v):
        S = jaxdia.shard(jaxdia.DiaMatrix(d, A.offsets, A.shape), mesh, "rows")
        return jnp.sum(jnp.sin(S.unshard_vector(S @ S.shard_vector(v))))

    def plain(d, v):
        return jnp.sum(jnp.sin(jaxdia.DiaMatrix(d, A.offsets, A.shape) @ v))

    got = jax.jit(jax.grad(sharded, argnums=(0, 1)))(data, x)
    want = jax.grad(plain, argnums=(0, 1))(data, x)
    for g, w in zip(got, want):
        close(g, w)
    # Forward mode and transposition agree too.
    S = jaxdia.shard(A, mesh, "rows")
    v = S.shard_vector(x)
    _, tangent = jax.jvp(lambda v: S @ v, (v,), (v,))
    close(tangent, S @ v)
    (transposed,) = jax.linear_transpose(lambda v: S @ v, v)(v)
    close(S.unshard_vector(transposed), scipy_of(A).T @ np.asarray(v)[:45])


@check
def products_inside_a_users_shard_map():
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


@check
def traces_inside_a_users_shard_map():
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


@check
def grad_through_cg():
    """d/d(data) and d/d(b) of a loss of cg's solution, sharded vs unsharded."""
    side = 8
    A = poisson_2d(side)
    mesh = auto_mesh()
    rhs = np.random.default_rng(11).standard_normal(side * side)

    def sharded(d, b):
        S = jaxdia.shard(jaxdia.DiaMatrix(d, A.offsets, A.shape), mesh, "rows")
        x, _ = jla.cg(S, S.shard_vector(b), tol=1e-13, maxiter=500)
        return jnp.sum(S.unshard_vector(x) ** 2)

    def plain(d, b):
        x, _ = jla.cg(jaxdia.DiaMatrix(d, A.offsets, A.shape), b, tol=1e-13, maxiter=500)
        return jnp.sum(x**2)

    got = jax.jit(jax.grad(sharded, argnums=(0, 1)))(A.data, rhs)
    want = jax.jit(jax.grad(plain, argnums=(0, 1)))(A.data, rhs)
    for g, w in zip(got, want):
        close(g, w, 1e-8)


# -- Explicit mesh axes (jax.make_mesh's default) --------------------------------------------


def explicit_mesh_of(shape=(8,), names=("rows",), kind=AxisType.Explicit):
    return jax.make_mesh(shape, names, axis_types=(kind,) * len(names))


def put(array, mesh, *spec):
    return jax.device_put(np.asarray(array), NamedSharding(mesh, PartitionSpec(*spec)))


def spec_of(array):
    """The sharding spec of ``array``, trailing replicated dims dropped (as JAX prints it)."""
    spec = list(array.sharding.spec)
    while spec and spec[-1] is None:
        spec.pop()
    return tuple(spec)


def loop_traffic(hlo: str) -> dict[str, dict[str, int]]:
    """``collective_traffic`` of one iteration of the (first) while loop in ``hlo``: its
    body and its condition, each run once per iteration."""
    match = re.search(r"condition=%([\w.-]+), body=%([\w.-]+)", hlo)
    assert match, "no while loop in the HLO"
    blocks = {}
    for block in re.split(r"\n(?=\S)", hlo):
        head = re.match(r"(?:ENTRY )?%([\w.-]+) ", block)
        if head:
            blocks[head.group(1)] = block
    totals: dict[str, dict[str, int]] = {}
    for name in match.groups():
        for kind, entry in collective_traffic(blocks[name]).items():
            into = totals.setdefault(kind, dict.fromkeys(entry, 0))
            for key, value in entry.items():
                into[key] += value
    return totals


@check
def explicit_plain_products_match_scipy():
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


@check
def explicit_plain_product_exchanges_halos():
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


@check
def explicit_plain_matrix_operations():
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


@check
def explicit_plain_products_transform():
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


@check
def explicit_sharded_matrix_products_and_transforms():
    """jaxdia.shard on Explicit axes: products, grad, jvp, vmap, against the Auto mesh."""
    rng = np.random.default_rng(24)
    A = random_matrix(rng, 45, (-9, -1, 0, 2))
    data = jnp.asarray(np.nan_to_num(np.asarray(A.data)))
    x = rng.standard_normal(45)
    results = {}
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of(kind=kind)

        def loss(d, v):
            S = jaxdia.shard(jaxdia.DiaMatrix(d, A.offsets, A.shape), mesh, "rows")
            return jnp.sum(jnp.sin(S.unshard_vector(S @ S.shard_vector(v))))

        with jax.set_mesh(mesh):
            S = jaxdia.shard(A, mesh, "rows")
            v = S.shard_vector(x)
            y = S @ v
            assert spec_of(y) == ("rows",), y.sharding
            _, tangent = jax.jvp(lambda v: S @ v, (v,), (v,))
            batch = jax.vmap(lambda v: S @ v)(jnp.stack([v, 2 * v]))
            grads = jax.jit(jax.grad(loss, argnums=(0, 1)))(data, x)
            results[kind] = (S.unshard_vector(y), tangent, batch, *grads)
        close(results[kind][0], scipy_of(A) @ x)
    for got, want in zip(results[AxisType.Explicit], results[AxisType.Auto]):
        close(got, want)


def _solve_on(mesh, S, b, solver, jacobi=False):
    """``solver(S, b)`` under jit; on Explicit axes inside ``jax.sharding.auto_axes``
    (JAX's Krylov solvers call jnp.vdot, which Explicit-sharded vectors refuse). The
    preconditioner is built inside, from the matrix the region sees."""

    def solve(S, b):
        M = jaxdia.jacobi(S) if jacobi else None
        return solver(S, b, tol=1e-12, atol=0.0, maxiter=500, M=M)[0]

    if AxisType.Explicit in mesh.axis_types:
        solve = jax.sharding.auto_axes(solve, out_sharding=S.vector_sharding)
    return jax.jit(solve)


@check
def krylov_solves_with_jacobi_on_both_axis_types():
    """cg and gmres with jaxdia.jacobi(S) on a ShardedDiaMatrix, Explicit and Auto: the
    SciPy solution, the vectors' sharding, zero padding rows."""
    side = 15
    A = poisson_2d(side)  # 225 rows, padded to 232
    data = np.asarray(A.data).copy()
    data[2] *= np.linspace(1.0, 3.0, side * side)  # a diagonal Jacobi can improve on
    A = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    rhs = np.random.default_rng(25).standard_normal(side * side)
    expected = spla.spsolve(scipy_of(A).tocsc(), rhs)
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of(kind=kind)
        S = jaxdia.shard(A, mesh, "rows")
        M = jaxdia.jacobi(S)
        diagonal = S.diagonal()
        assert spec_of(diagonal) == ("rows",) and diagonal.shape == (S.padded_size,)
        close(np.asarray(diagonal)[: side * side], A.diagonal())
        assert np.all(np.asarray(diagonal)[side * side :] == 1.0)
        b = S.shard_vector(rhs)
        close(S.unshard_vector(M(b)), rhs / np.asarray(A.diagonal()))
        for solver in (jla.cg, jla.gmres):
            x = _solve_on(mesh, S, b, solver, jacobi=True)(S, b)
            assert spec_of(x) == ("rows",), x.sharding
            assert not np.any(np.asarray(x)[side * side :])
            close(S.unshard_vector(x), expected, 1e-9)
    # grad through shard and a preconditioned cg, all inside one auto_axes region.
    mesh = explicit_mesh_of()

    def loss(d, b, sharded=True):
        A_ = jaxdia.DiaMatrix(d, A.offsets, A.shape)
        S = jaxdia.shard(A_, mesh, "rows") if sharded else A_
        b = S.shard_vector(b) if sharded else b
        x = jla.cg(S, b, tol=1e-13, maxiter=500, M=jaxdia.jacobi(S))[0]
        return jnp.sum((S.unshard_vector(x) if sharded else x) ** 2)

    region = jax.sharding.auto_axes(loss, out_sharding=NamedSharding(mesh, PartitionSpec()))
    with jax.set_mesh(mesh):
        got = jax.jit(jax.grad(region, argnums=(0, 1)))(A.data, rhs)
    want = jax.grad(functools.partial(loss, sharded=False), argnums=(0, 1))(A.data, rhs)
    for g, w in zip(got, want):
        close(g, w, 1e-8)
    zero = jaxdia.DiaMatrix(np.ones((1, 16)), (1,), (16, 16))
    try:
        jaxdia.jacobi(jaxdia.shard(zero, explicit_mesh_of(), "rows"))
    except ValueError as error:
        assert "diagonal must be nonzero, but it is 0 at index 0" in str(error), error
    else:
        raise AssertionError("jacobi accepted a sharded matrix with a zero diagonal")


@check
def cg_iteration_communication():
    """One PCG iteration on 8 devices, read from the compiled loop: the halo rows of one
    product (2 collective-permutes) and 3 scalar all-reduces, on both axis types."""
    for side in (32, 64):
        A = poisson_2d(side)  # 5-point stencil: halo of side rows each way
        for kind in (AxisType.Explicit, AxisType.Auto):
            mesh = explicit_mesh_of(kind=kind)
            S = jaxdia.shard(A, mesh, "rows")
            b = S.shard_vector(np.ones(side * side))
            hlo = _solve_on(mesh, S, b, jla.cg, jacobi=True).lower(S, b).compile().as_text()
            per_iteration = loop_traffic(hlo)
            assert "all-gather" not in hlo
            assert per_iteration["collective-permute"] == {
                "count": 2,
                "sent": 2 * side * 8,
                "received": 2 * side * 8,
            }, per_iteration
            assert per_iteration["all-reduce"] == {"count": 3, "sent": 24, "received": 24}, (
                per_iteration
            )
            print(f"  cg iteration, {side}x{side} grid, {kind}: {per_iteration}")


@check
def two_d_mesh_rows_and_right_hand_sides():
    """Rows over one mesh axis, a block of right-hand sides over the other: S @ B and a
    solve per column keep both splits and gather nothing; the same for a plain DiaMatrix
    with its columns split (Explicit)."""
    A = poisson_2d(16)
    n = 256
    rhs = np.random.default_rng(26).standard_normal((n, 6))
    expected = np.linalg.solve(scipy_of(A).toarray(), rhs)
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of((4, 2), ("rows", "rhs"), kind)
        S = jaxdia.shard(A, mesh, "rows")
        B = put(S.shard_vector(rhs), mesh, "rows", "rhs")
        assert spec_of(S.shard_vector(B[:n])) == ("rows", "rhs")
        with jax.set_mesh(mesh):
            product = jax.jit(lambda S, B: S @ B)
            Y = product(S, B)
            assert spec_of(Y) == ("rows", "rhs"), Y.sharding
            close(S.unshard_vector(Y), scipy_of(A) @ rhs)
            # 16 halo rows each way, 3 of the 6 columns on each device.
            traffic = collective_bytes(product.lower(S, B).compile().as_text())
            assert traffic == {"collective-permute": 2 * 16 * 3 * 8}, traffic

            def solve(S, B):
                M = jaxdia.jacobi(S)
                one = lambda b: jla.cg(S, b, tol=1e-12, maxiter=500, M=M)[0]  # noqa: E731
                return jax.vmap(one, in_axes=1, out_axes=1)(B)

            if kind == AxisType.Explicit:
                solve = jax.sharding.auto_axes(
                    solve, out_sharding=NamedSharding(mesh, B.sharding.spec)
                )
            solve = jax.jit(solve)
            X = solve(S, B)
            assert spec_of(X) == ("rows", "rhs"), X.sharding
            close(S.unshard_vector(X), expected, 1e-9)
            assert "all-gather" not in solve.lower(S, B).compile().as_text()
            if kind == AxisType.Explicit:
                plain = jaxdia.DiaMatrix(put(A.data, mesh, None, "rows"), A.offsets, A.shape)
                Bp = put(rhs, mesh, "rows", "rhs")
                product = jax.jit(lambda A, B: A @ B)
                Y = product(plain, Bp)
                assert spec_of(Y) == ("rows", "rhs"), Y.sharding
                close(Y, scipy_of(A) @ rhs)
                traffic = collective_bytes(product.lower(plain, Bp).compile().as_text())
                assert traffic == {"collective-permute": 2 * 16 * 3 * 8}, traffic


def expect_error(kind, pattern, f):
    try:
        f()
    except kind as error:
        assert re.search(pattern, str(error)), str(error)
    else:
        raise AssertionError(f"no {kind.__name__} matching {pattern!r}")


@check
def explicit_errors_are_clear():
    """Vectors sharded unlike S's rows, and operands sharded differently, raise early."""
    mesh = explicit_mesh_of((4, 2), ("rows", "rhs"))
    S = jaxdia.shard(poisson_2d(4), mesh, "rows")
    x = np.ones(16)
    expect_error(
        ValueError,
        r"x's rows are sharded over mesh axes \('rhs',\), but S's rows "
        r"over 'rows'",
        lambda: S @ put(x, mesh, "rhs"),
    )
    expect_error(
        ValueError,
        r"columns of the block x are sharded over \('rows',\)",
        lambda: S @ put(np.ones((16, 4)), mesh, None, "rows"),
    )
    other = jax.make_mesh((2,), ("rows",), devices=jax.devices()[6:])
    on_four = jaxdia.shard(
        poisson_2d(4), jax.make_mesh((4,), ("rows",), devices=jax.devices()[:4]), "rows"
    )
    expect_error(
        ValueError,
        r"x lives on devices \[4, 5, 6, 7\], S on devices \[0, 1, 2, 3\]",
        lambda: on_four @ put(x, jax.make_mesh((4,), ("rows",), devices=jax.devices()[4:]), "rows"),
    )
    expect_error(
        ValueError,
        r"x lives on devices \[6, 7\], S on devices \[0, 1, 2, 3, 4, 5, 6, 7\]",
        lambda: S @ put(x, other, "rows"),
    )
    expect_error(
        ValueError,
        r"x is sharded on a mesh of axes \{'rows': 2\}",
        lambda: jax.jit(lambda v: S @ v)(
            put(x, jax.make_mesh((2,), ("rows",), devices=jax.devices()[:2]), "rows")
        ),
    )
    expect_error(
        ValueError,
        r"axis must be one of the mesh's axis names \('rows', 'rhs'\), "
        r"got 'cols'",
        lambda: jaxdia.shard(poisson_2d(4), mesh, "cols"),
    )
    expect_error(
        ValueError,
        r"square matrices.*\(8, 16\)",
        lambda: jaxdia.shard(jaxdia.DiaMatrix(np.ones((1, 16)), 0, (8, 16)), mesh, "rows"),
    )
    expect_error(
        ValueError,
        r"jacobi: A must be square",
        lambda: jaxdia.jacobi(jaxdia.DiaMatrix(np.ones((1, 16)), 0, (8, 16))),
    )
    # A batch split over different axes in the two operands of a plain product.
    cube = explicit_mesh_of((2, 2, 2), ("a", "b", "c"))
    A = jaxdia.DiaMatrix(put(np.ones((2, 1, 8)), cube, "a"), 0, (8, 8))
    with jax.set_mesh(cube):
        expect_error(
            ValueError,
            "sharded differently along batch dim 0",
            lambda: A @ put(np.ones((2, 8, 1)), cube, "b"),
        )


@check
def chebyshev_on_a_sharded_matrix():
    """jaxdia.chebyshev(S): Gershgorin's bound and the polynomial from sharded products
    only; preconditioned cg matches the unsharded solve on both axis types, and one
    iteration adds (degree - 1) halo exchanges and no all-reduce to Jacobi-CG's."""
    side, degree = 16, 4
    A = poisson_2d(side)
    rhs = np.random.default_rng(31).standard_normal(side * side)
    unsharded = jaxdia.chebyshev(A, degree)
    expected = jla.cg(A, rhs, tol=1e-12, maxiter=500, M=unsharded)[0]
    for kind in (AxisType.Explicit, AxisType.Auto):
        mesh = explicit_mesh_of(kind=kind)
        S = jaxdia.shard(A, mesh, "rows")
        M = jaxdia.chebyshev(S, degree)
        close(M.upper, unsharded.upper)
        b = S.shard_vector(rhs)
        close(S.unshard_vector(M(b)), unsharded(rhs), 1e-12)

        def solve(S, b):
            return jla.cg(S, b, tol=1e-12, atol=0.0, maxiter=500, M=jaxdia.chebyshev(S, degree))[0]

        if kind == AxisType.Explicit:
            solve = jax.sharding.auto_axes(solve, out_sharding=S.vector_sharding)
        compiled = jax.jit(solve).lower(S, b).compile()
        x = compiled(S, b)
        assert spec_of(x) == ("rows",), x.sharding
        close(S.unshard_vector(x), expected, 1e-9)
        hlo = compiled.as_text()
        assert "all-gather" not in hlo
        per_iteration = loop_traffic(hlo)
        assert per_iteration["collective-permute"]["count"] == 2 * degree, per_iteration
        assert per_iteration["all-reduce"]["count"] == 3, per_iteration
        print(f"  chebyshev-cg iteration, degree {degree}, {kind}: {per_iteration}")


# -- jaxdia's solvers: fused reductions, sharded multigrid -------------------------------------


def computation_traffic(hlo: str, name: str) -> dict[str, dict[str, int]]:
    """``collective_traffic`` of computation ``name`` of ``hlo`` and of the branches of
    its conditionals (each branch counted once: in a loop of half steps that alternate
    between two branches, a body's own collectives run twice per pair of halves)."""
    blocks = {}
    for block in re.split(r"\n(?=\S)", hlo):
        head = re.match(r"(?:ENTRY )?%([\w.-]+) ", block)
        if head:
            blocks[head.group(1)] = block
    totals = collective_traffic(blocks[name])
    for branches in re.findall(r"branch_computations=\{([^}]*)\}", blocks[name]):
        for branch in re.findall(r"%([\w.-]+)", branches):
            for kind, entry in computation_traffic(hlo, branch).items():
                into = totals.setdefault(kind, dict.fromkeys(entry, 0))
                for key, value in entry.items():
                    into[key] += value
    return totals


def krylov_iteration_traffic(hlo: str, half_steps: bool) -> dict[str, dict[str, int]]:
    """The collectives of one iteration of the (first) while loop of ``hlo``: body and
    condition, with their conditionals' branches; for a loop of half steps (jaxdia's
    BiCGStab) the body's own collectives twice and each branch once."""
    match = re.search(r"condition=%([\w.-]+), body=%([\w.-]+)", hlo)
    assert match, "no while loop in the HLO"
    condition, body = match.groups()
    totals: dict[str, dict[str, int]] = {}
    own = collective_traffic(
        next(b for b in re.split(r"\n(?=\S)", hlo) if b.startswith(f"%{body} "))
    )
    for part, times in (
        (computation_traffic(hlo, condition), 1),
        (computation_traffic(hlo, body), 1),
    ):
        for kind, entry in part.items():
            into = totals.setdefault(kind, dict.fromkeys(entry, 0))
            for key, value in entry.items():
                into[key] += times * value
    if half_steps:
        for kind, entry in own.items():
            for key, value in entry.items():
                totals[kind][key] += value
    return totals


@check
def jaxdia_solvers_on_a_sharded_matrix():
    """jaxdia.cg and jaxdia.bicgstab take a ShardedDiaMatrix directly on both axis types
    (no auto_axes region): SciPy's solution, sharded results; variant="fused" compiles
    to one all-reduce per CG iteration (3 standard) and two per BiCGStab iteration (3
    standard with Jacobi: one iteration per loop body), with the product's halo exchange
    unchanged."""
    side = 32
    A = poisson_2d(side)
    data = np.asarray(A.data).copy()
    data[3] *= 0.7  # nonsymmetric, for BiCGStab
    N = jaxdia.DiaMatrix(data, A.offsets, A.shape)
    rhs = np.random.default_rng(40).standard_normal(side * side)
    expected = {
        "cg": spla.spsolve(scipy_of(A).tocsc(), rhs),
        "bicgstab": spla.spsolve(scipy_of(N).tocsc(), rhs),
    }
    # Standard BiCGStab with a small M (Jacobi) runs one iteration per loop body, whose
    # independent reductions compile into 3 all-reduces; fused: one per half step.
    counts = {("cg", "standard"): {3}, ("cg", "fused"): {1}, ("bicgstab", "standard"): {3}}
    counts["bicgstab", "fused"] = {2}
    # Every method and variant on Explicit axes; one on Auto axes (bench_sharded.py shows
    # the compiled loops are the same on both).
    runs = [(AxisType.Explicit, *key) for key in counts] + [(AxisType.Auto, "cg", "fused")]
    for kind, method, variant in runs:
        S = jaxdia.shard(A if method == "cg" else N, explicit_mesh_of(kind=kind), "rows")
        b = S.shard_vector(rhs)
        solve = functools.partial(getattr(jaxdia, method), rtol=1e-10, variant=variant)
        compiled = jax.jit(lambda S, b, M: solve(S, b, M=M)).lower(S, b, jaxdia.jacobi(S))  # noqa: B023
        compiled = compiled.compile()
        x, info = compiled(S, b, jaxdia.jacobi(S))
        assert bool(info.converged) and spec_of(x) == ("rows",), (method, variant)
        close(S.unshard_vector(x), expected[method], 1e-8)
        hlo = compiled.as_text()
        assert "all-gather" not in hlo, (method, variant, kind)
        # Standard BiCGStab with Jacobi runs one iteration per loop body, the fused one
        # a half iteration per body.
        half_steps = (method, variant) == ("bicgstab", "fused")
        traffic = krylov_iteration_traffic(hlo, half_steps=half_steps)
        assert traffic["all-reduce"]["count"] in counts[method, variant], traffic
        assert traffic["collective-permute"]["count"] == (4 if method == "bicgstab" else 2)
        print(f"  {method} {variant} {kind}: {int(info.iterations)} iterations, {traffic}")
    # The eager jacobi on a sharded matrix, and a length-n b that needs padding.
    S = jaxdia.shard(poisson_2d(15), explicit_mesh_of(), "rows")
    expect_error(ValueError, r"A.shard_vector\(b\)", lambda: jaxdia.cg(S, np.ones(225)))


def _multigrid_case(name):
    """(matrix, grid) of the sharded multigrid checks (the jumping coefficient is
    tests/test_multigrid.py's)."""
    from tests.test_multigrid import jump, poisson

    grid = {"poisson-2d": (32, 32), "poisson-3d": (16, 8, 8), "jump-2d": (32, 32)}[name]
    matrix = jump(grid) if name.startswith("jump") else poisson(grid)
    return jaxdia.DiaMatrix.from_scipy(matrix), grid


@check
def sharded_multigrid_matches_one_device():
    """jaxdia.multigrid on 8 devices: the levels and V-cycle of one device, the same CG
    iterations, and a compiled iteration that exchanges only halos and transfer planes
    on the sharded levels, plus one all-gather of the gathered level's residual."""
    cases = [  # problem, mesh axis type, the matrix as given: sharded or column-sharded
        ("poisson-2d", AxisType.Explicit, "shard"),
        ("poisson-3d", AxisType.Auto, "shard"),
        ("jump-2d", AxisType.Explicit, "columns"),
    ]
    for name, kind, given in cases:
        A, grid = _multigrid_case(name)
        n = A.shape[0]
        rhs = np.random.default_rng(41).standard_normal(n)
        one = jaxdia.multigrid(A, grid)
        _, one_info = jaxdia.cg(A, rhs, M=one, rtol=1e-8)
        mesh = explicit_mesh_of(kind=kind)
        S = jaxdia.shard(A, mesh, "rows")
        operand = (
            S
            if given == "shard"
            else jaxdia.DiaMatrix(put(A.data, mesh, None, "rows"), A.offsets, A.shape)
        )
        with jax.set_mesh(mesh) if given == "columns" else contextlib.nullcontext():
            M = jaxdia.multigrid(operand, grid, gather_below=32)
        assert isinstance(M, jaxdia.ShardedMultigrid) and M.grids == one.grids, (name, M)
        assert 1 <= M.sharded_levels < len(M.grids)
        b = S.shard_vector(rhs)
        if name == "poisson-2d":  # the levels and one cycle (each another compilation)
            for got, want in zip(M.levels, one.levels):
                dense = got.to_dia() if isinstance(got, jaxdia.ShardedDiaMatrix) else got
                close(dense.todense(), want.todense(), 1e-12)
            y = M(b)
            assert spec_of(y) == ("rows",), y.sharding
            close(S.unshard_vector(y), one(rhs), 1e-12)
        solve = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-8, variant="fused"))
        if name == "poisson-2d":  # smoothing with deep halos: one exchange per smoothing
            deep = jaxdia.multigrid(S, grid, gather_below=32, deep_halo=True)
            compiled = solve.lower(S, b, deep).compile()
            _, deep_info = compiled(S, b, deep)
            assert int(deep_info.iterations) == int(one_info.iterations), deep_info
            deep_traffic = loop_traffic(compiled.as_text())["collective-permute"]
            # The CG product's 2, then per sharded level 2 smoothings and 2 transfers.
            assert deep_traffic["count"] == 2 + deep.sharded_levels * (2 * 2 + 2), deep_traffic
            print(f"  poisson-2d, deep halos: collective-permutes {deep_traffic}")
        compiled = solve.lower(S, b, M).compile()
        x, info = compiled(S, b, M)
        assert abs(int(info.iterations) - int(one_info.iterations)) <= 1, (name, info, one_info)
        close(S.unshard_vector(x), spla.spsolve(scipy_of(A).tocsc(), rhs), 1e-6)
        # Per iteration: the CG product's halo; per sharded level, 2 * sweeps products
        # (their halos), one plane out for restriction and one back for interpolation;
        # one all-gather of the gathered level's residual; CG's one all-reduce.
        itemsize = 8
        halo_bytes = 2 * sum(S.halo) * itemsize  # one product of the finest level, as sent
        expected_permutes, expected_bytes = 2, halo_bytes // 2
        for level in range(M.sharded_levels):
            level_grid = M.grids[level]
            plane = math.prod(level_grid[1:])
            lower, upper = M.levels[level].halo
            expected_permutes += 2 * 2 * M.sweeps + (2 if 0 in M.coarsening[level] else 0)
            expected_bytes += 2 * M.sweeps * (lower + upper) * itemsize
            if 0 in M.coarsening[level]:
                coarse_plane = math.prod(M.grids[level + 1][1:])
                expected_bytes += (plane + coarse_plane) * itemsize
        gathered = math.prod(M.grids[M.sharded_levels]) // 8 * itemsize
        traffic = loop_traffic(compiled.as_text())
        assert traffic["collective-permute"]["count"] == expected_permutes, (name, traffic)
        assert traffic["collective-permute"]["sent"] == expected_bytes, (name, traffic)
        assert traffic["all-gather"] == {"count": 1, "sent": gathered, "received": 7 * gathered}
        assert traffic["all-reduce"]["count"] == 1, traffic
        assert collective_traffic(compiled.as_text())["all-gather"]["count"] == 1
        print(
            f"  {name}: {M.sharded_levels} of {len(M.grids)} levels sharded, "
            f"{int(info.iterations)} iterations (one device {int(one_info.iterations)}), {traffic}"
        )


@check
def sharded_multigrid_errors_are_clear():
    mesh = explicit_mesh_of()
    A, grid = _multigrid_case("poisson-2d")
    S = jaxdia.shard(A, mesh, "rows")
    expect_error(
        ValueError,
        r"grid\[0\] = 12 is not a multiple of the 8 devices",
        lambda: jaxdia.multigrid(jaxdia.shard(poisson_2d(12), mesh, "rows"), (12, 12)),
    )
    T = jaxdia.shard(poisson_2d(24), mesh, "rows")
    expect_error(
        ValueError,
        r"the hierarchy has one level .* \(lower max_coarse\)",
        lambda: jaxdia.multigrid(jaxdia.shard(poisson_2d(16), mesh, "rows"), (16, 16)),
    )
    expect_error(
        TypeError, "coarsening='auto'", lambda: jaxdia.multigrid(S, grid, coarsening="auto")
    )
    # Coarsening the fast axis first keeps the shards aligned whatever their planes.
    M = jaxdia.multigrid(T, (24, 24), coarsening=[(1,), (1,)], gather_below=8)
    assert M.sharded_levels == 2, M


def sharded_multigrid_like_one_device(matrix, grid, devices, kind, smoother, **options):
    """jaxdia.multigrid on ``devices`` devices against one device: the same grids and
    levels, one V-cycle to rounding, the same iterations of fused CG, and SciPy's
    solution. Returns the sharded multigrid and the compiled solve's HLO text."""
    A = jaxdia.DiaMatrix.from_scipy(matrix)
    rhs = np.random.default_rng(43).standard_normal(A.shape[0])
    sharded_only = {k: options.pop(k) for k in ("gather_below",) if k in options}
    one = jaxdia.multigrid(A, grid, smoother=smoother, **options)
    _, one_info = jaxdia.cg(A, rhs, M=one, rtol=1e-8, variant="fused")
    mesh = jax.make_mesh((devices,), ("rows",), axis_types=(kind,), devices=jax.devices()[:devices])
    S = jaxdia.shard(A, mesh, "rows")
    M = jaxdia.multigrid(S, grid, smoother=smoother, **options, **sharded_only)
    case = (grid, devices, kind.name, smoother, options, sharded_only)
    assert isinstance(M, jaxdia.ShardedMultigrid) and M.grids == one.grids, (case, M)
    for got, want in zip(M.levels, one.levels):
        got = got.to_dia() if isinstance(got, jaxdia.ShardedDiaMatrix) else got
        if got.shape[0] <= 4096:
            close(got.todense(), want.todense(), 1e-12)
        else:  # the full tier's fine levels: their products (dense would take gigabytes)
            v = np.random.default_rng(got.shape[0]).standard_normal(got.shape[0])
            close(got @ v, want @ v, 1e-12)
    b = S.shard_vector(rhs)
    want = np.asarray(one(rhs))
    scale = np.abs(want).max()
    close(S.unshard_vector(M(b)) / scale, want / scale, 1e-12)
    solve = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-8, variant="fused"))
    compiled = solve.lower(S, b, M).compile()
    x, info = compiled(S, b, M)
    assert spec_of(x) == ("rows",), (case, x.sharding)
    assert int(info.iterations) == int(one_info.iterations), (case, info, one_info)
    expected = spla.spsolve(matrix.tocsc(), rhs)
    scale = np.abs(expected).max()
    close(S.unshard_vector(x) / scale, expected / scale, 1e-6)
    print(
        f"  {grid} on {devices} devices ({kind.name}, {smoother}, {options | sharded_only}): "
        f"{M.sharded_levels} of {len(M.grids)} levels sharded, {int(info.iterations)} iterations"
    )
    return M, compiled.as_text()


def _looped(level) -> bool:
    """Whether a level's products are the loop over its diagonals on CPU."""
    from jaxdia._linalg import multigrid_hierarchy as one_device

    return (
        len(level.offsets) > one_device.LOOPED_DIAGONALS
        and level.shape[0] <= one_device.LOOPED_UP_TO
    )


@check
def sharded_multigrid_gathered_27_point_level():
    """A gathered 3-D level that is smoothed (not the coarsest) has 27 diagonals, which
    multiply as one loop over them on CPU, inside the gathered levels' shard_map (the
    32^3 grid's on 8 devices: tests/test_shard.py's full tier)."""
    from tests.test_multigrid import poisson

    M, _ = sharded_multigrid_like_one_device(
        poisson((16, 8, 8)), (16, 8, 8), 8, AxisType.Explicit, "chebyshev", max_coarse=16
    )
    assert M.sharded_levels < len(M.grids) - 1, M
    assert _looped(M.levels[M.sharded_levels]), M


@check
def sharded_multigrid_odd_planes_per_device():
    """Grids whose levels split into an odd number of planes per device (grid[0] = P m,
    m odd): the level stays sharded, and the next one is gathered through a restriction
    of the coarse planes each device owns and one all-gather (the levels below are
    replicated). 2-D and 3-D, 1, 3 and 5 planes per device, 8 and 4 devices, down to a
    coarsest level of one unknown; a compiled iteration moves the sharded level's halos,
    one plane each way for the restriction, and the gathered level's residual."""
    from tests.test_multigrid import jump, poisson

    cases = [  # matrix, grid, devices, axis type, smoother, options
        (poisson((24, 24)), (24, 24), 8, AxisType.Explicit, "chebyshev", {}),
        (jump((40, 40)), (40, 40), 8, AxisType.Auto, "jacobi", {}),
        (poisson((8, 16)), (8, 16), 8, AxisType.Explicit, "jacobi", {"max_coarse": 1}),
        # 3-D: the gathered level (12, 4, 4) is smoothed with its 27 diagonals.
        (poisson((24, 8, 8)), (24, 8, 8), 8, AxisType.Auto, "chebyshev", {"max_coarse": 16}),
        # Level 1 has 3 planes per device: it stays sharded, level 2 is gathered.
        (
            jump((24, 16)),
            (24, 16),
            4,
            AxisType.Explicit,
            "chebyshev",
            {"max_coarse": 4, "gather_below": 8},
        ),
    ]
    for matrix, grid, devices, kind, smoother, options in cases:
        M, hlo = sharded_multigrid_like_one_device(matrix, grid, devices, kind, smoother, **options)
        last = M.sharded_levels - 1
        assert (M.grids[last][0] // devices) % 2 == 1 and 0 in M.coarsening[last], M
        if grid == (24, 8, 8):
            assert _looped(M.levels[M.sharded_levels]), M
        if grid == (24, 16):
            assert M.sharded_levels == 2, M
        if grid == (24, 24):
            # CG's product, 2 * sweeps smoothing products and one plane each way for the
            # restriction (collective-permutes), and one all-gather of the gathered
            # level's residual: each device sends ceil(3 / 2) = 2 coarse planes of 12.
            traffic = loop_traffic(hlo)
            assert traffic["collective-permute"]["count"] == 2 + 2 * 2 * M.sweeps + 2, traffic
            sent = 2 * 12 * 8
            assert traffic["all-gather"] == {"count": 1, "sent": sent, "received": 7 * sent}
            assert traffic["all-reduce"]["count"] == 1, traffic


@full_check
def full_sharded_multigrid_3d():
    """3-D grids at full size on 8 devices, both smoothers: 32^3 (4 planes per device;
    its gathered level, 16^3, is smoothed with the loop over its 27 diagonals) and 24^3
    (3 planes per device)."""
    from tests.test_multigrid import poisson

    for grid, kind, smoother in (
        ((32, 32, 32), AxisType.Explicit, "chebyshev"),
        ((32, 32, 32), AxisType.Auto, "jacobi"),
        ((24, 24, 24), AxisType.Explicit, "chebyshev"),
        ((24, 24, 24), AxisType.Auto, "jacobi"),
    ):
        M, _ = sharded_multigrid_like_one_device(poisson(grid), grid, 8, kind, smoother)
        assert _looped(M.levels[M.sharded_levels]), M


@full_check
def full_sharded_multigrid_2d():
    """2-D grids of benchmarks/bench_distributed.py's sizes on 8 devices, both smoothers,
    and one with 15 planes per device."""
    from tests.test_multigrid import jump, poisson

    for matrix, grid, kind, smoother in (
        (poisson((256, 256)), (256, 256), AxisType.Explicit, "chebyshev"),
        (poisson((128, 128)), (128, 128), AxisType.Auto, "jacobi"),
        (jump((120, 120)), (120, 120), AxisType.Explicit, "chebyshev"),
    ):
        sharded_multigrid_like_one_device(matrix, grid, 8, kind, smoother)


@check
def deep_halo_chebyshev():
    """jaxdia.chebyshev(S, 4, deep_halo=True): the same polynomial after one exchange, so
    a CG iteration has 4 collective-permutes (its product's 2, then 2) instead of 8,
    sending the same bytes (chebyshev_on_a_sharded_matrix counts the 8)."""
    side, degree = 32, 4
    A = poisson_2d(side)
    rhs = np.random.default_rng(42).standard_normal(side * side)
    S = jaxdia.shard(A, explicit_mesh_of(), "rows")
    b = S.shard_vector(rhs)
    deep, plain = jaxdia.chebyshev(S, degree, deep_halo=True), jaxdia.chebyshev(S, degree)
    y = deep(b)
    assert spec_of(y) == ("rows",), y.sharding
    close(y, plain(b), 1e-12)
    compiled = jax.jit(lambda S, b, M: jaxdia.cg(S, b, M=M, rtol=1e-10)).lower(S, b, deep)
    compiled = compiled.compile()
    x, info = compiled(S, b, deep)
    close(S.unshard_vector(x), spla.spsolve(scipy_of(A).tocsc(), rhs), 1e-8)
    traffic = loop_traffic(compiled.as_text())
    halo = 2 * side * 8  # one product's halo rows, as sent
    assert traffic["collective-permute"] == {
        "count": 4,
        "sent": degree * halo,
        "received": degree * halo,
    }, traffic
    print(f"  deep-halo chebyshev-cg: {int(info.iterations)} iterations, {traffic}")
    expect_error(
        TypeError,
        "deep_halo=True is for a ShardedDiaMatrix",
        lambda: jaxdia.chebyshev(A, 4, deep_halo=True),
    )


def main(names):
    failures = 0
    for name in names or CHECKS:
        start = time.perf_counter()
        try:
            CHECKS[name]()
        except Exception:  # report every check, then fail
            failures += 1
            print(f"FAIL {name}", flush=True)
            traceback.print_exc(file=sys.stdout)
        else:
            print(f"PASS {name} ({time.perf_counter() - start:.1f} s)", flush=True)
    return failures


if __name__ == "__main__":
    assert len(jax.devices()) == 8, jax.devices()
    sys.exit(main(sys.argv[1:]))
