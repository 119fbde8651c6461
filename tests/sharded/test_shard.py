"""jaxdia.shard and ShardedDiaMatrix on 8 fake CPU devices: products against SciPy (sizes
divisible or not, halos wider than a shard, dtypes, meshes of several axes, Auto and
Explicit axis types), under jit, vmap, grad and jvp; the compiled product's halo exchange;
the lowering for GPU and TPU; errors for vectors and meshes that do not fit.

tests/test_shard.py holds the one-device checks, which run with the rest of the suite.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import scipy.sparse as sp
from jax.sharding import AxisType, PartitionSpec

import jaxdia

from .helpers import (
    auto_mesh,
    close,
    collective_bytes,
    expect_error,
    explicit_mesh_of,
    poisson_2d,
    put,
    random_matrix,
    scipy_of,
    spec_of,
)


def test_products_match_scipy():
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


def test_products_with_many_diagonals():
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


def test_unpadded_vector_gets_a_hint():
    S = jaxdia.shard(jaxdia.eye(37), auto_mesh(), "rows")
    assert S.padded_size == 40
    try:
        S @ np.ones(37)
    except ValueError as error:
        assert "S.shard_vector(x)" in str(error), error
    else:
        raise AssertionError("a length-n vector was accepted where N rows are needed")


def test_dtypes_and_promotion():
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


def test_matches_unsharded_product():
    rng = np.random.default_rng(2)
    A = random_matrix(rng, 100, (-10, -1, 0, 1, 10))
    S = jaxdia.shard(A, auto_mesh(), "rows")
    x = rng.standard_normal(100)
    close(S.unshard_vector(S @ S.shard_vector(x)), A @ x)


def test_result_stays_sharded():
    rng = np.random.default_rng(3)
    A = random_matrix(rng, 64, (-2, 0, 2))
    S = jaxdia.shard(A, auto_mesh(), "rows")
    y = jax.jit(lambda S, v: S @ (S @ v))(S, S.shard_vector(rng.standard_normal(64)))
    assert y.sharding.spec == PartitionSpec("rows"), y.sharding
    assert S.windows.sharding.spec[0] == "rows", S.windows.sharding


def test_from_a_global_array():
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


def test_multi_axis_mesh():
    """Rows split over one axis of a 4 x 2 mesh; the other axis holds replicas."""
    rng = np.random.default_rng(4)
    mesh = jax.make_mesh((4, 2), ("rows", "model"), axis_types=(AxisType.Auto,) * 2)
    A = random_matrix(rng, 30, (-3, 0, 1))
    for axis in ("rows", "model"):
        S = jaxdia.shard(A, mesh, axis)
        x = rng.standard_normal(30)
        close(S.unshard_vector(jax.jit(S.__matmul__)(S.shard_vector(x))), scipy_of(A) @ x)


def test_explicit_mesh():
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


def test_jit_cache_hits():
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


def test_vmap_over_vectors():
    rng = np.random.default_rng(7)
    A = random_matrix(rng, 48, (-4, 0, 2))
    S = jaxdia.shard(A, auto_mesh(), "rows")
    X = rng.standard_normal((5, 48))
    Y = jax.vmap(lambda v: S @ v)(jnp.stack([S.shard_vector(x) for x in X]))
    close(np.asarray(Y)[:, :48], X @ scipy_of(A).T.toarray())


def test_hlo_has_halo_exchange_and_no_all_gather():
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


def test_lowers_for_gpu_and_tpu():
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


def test_grad_wrt_data_and_rhs():
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


def test_explicit_sharded_matrix_products_and_transforms():
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


def test_explicit_errors_are_clear():
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
