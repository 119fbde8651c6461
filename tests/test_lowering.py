"""Cross-platform lowering: the Pallas kernels lower for cuda/rocm and tpu without hardware.

A kernel that lowers is not proven correct on the device (``tests/test_pallas.py`` and
``tests/test_pallas_mosaic_gpu.py`` check correctness in interpret mode), but one that
does not lower certainly fails there. The lowered StableHLO text names the kernel's
custom call: Triton's (``__gpu$xla.gpu.triton`` up to jaxlib 0.10.2,
``triton_kernel_call_ffi`` after), Mosaic GPU's (``mosaic_gpu``, ``mosaic_gpu_v2``) or
Mosaic TPU's (``tpu_custom_call``). Products on cuda run on Mosaic GPU from JAX 0.11 on
(``MOSAIC_IS_DEFAULT``), on Triton before.
"""

import contextlib
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdia
from jaxdia._kernels import (
    band_refine,
    pallas_mosaic_gpu,
    pallas_tpu,
    pallas_triton,
)

TRITON_CALLS = ("__gpu$xla.gpu.triton", "triton_kernel_call")
TPU_CALL = "tpu_custom_call"
MOSAIC_GPU_CALL = "mosaic_gpu"
ALL_CALLS = (*TRITON_CALLS, TPU_CALL, MOSAIC_GPU_CALL)
MOSAIC_IS_DEFAULT = jax.__version_info__ >= (0, 11)


# GPUs to lower for on a machine without one: jax 0.12 asks the device for its compute
# capability when it lowers a Pallas Triton kernel (jax 0.10.2 lowers without asking).
ABSTRACT_GPUS = {"cuda": "NVIDIA H100", "rocm": "gfx942"}


def abstract_gpu(platform: str) -> contextlib.AbstractContextManager:
    """A context in which ``lower(lowering_platforms=(platform,))`` has a GPU to target."""
    if platform not in ABSTRACT_GPUS or jax.default_backend() == "gpu":
        return contextlib.nullcontext()
    device = jax.sharding.AbstractDevice(
        device_kind=ABSTRACT_GPUS[platform], num_cores=None, platform=platform
    )
    mesh = jax.sharding.AbstractMesh((), (), abstract_device=device)
    return jax.sharding.use_abstract_mesh(mesh)


def lowered(fn, *args, platform: str):
    """``jax.jit(fn)(*args)`` lowered for ``platform`` (a ``jax.stages.Lowered``).

    The one place that lowers for a platform this machine lacks: if a JAX version needs
    more for that (e.g. an abstract GPU device for cuda), it goes here.
    """
    with abstract_gpu(platform):
        return jax.jit(fn).trace(*args).lower(lowering_platforms=(platform,))


def lowered_text(fn, *args, platform: str) -> str:
    """StableHLO text of ``jax.jit(fn)(*args)`` lowered for ``platform``."""
    return lowered(fn, *args, platform=platform).as_text()


def while_loops(fn, *args, platform: str) -> list[tuple[int, ...]]:
    """One entry per ``stablehlo.while`` of the lowered program (in every function, nested
    loops included): the sorted integer constants of its condition, which hold the trip
    count of a loop over a range (``lax.scan``, ``fori_loop``, a bounded ``while_loop``).
    A loop whose trip count grows with ``n`` shows a different entry when ``n`` does."""
    from jax._src.lib.mlir import ir

    def constants(region) -> list[int]:
        values = []
        for block in region.blocks:
            for op in block.operations:
                if op.operation.name == "stablehlo.constant":
                    attribute = op.operation.attributes["value"]
                    if isinstance(attribute, ir.DenseIntElementsAttr):
                        values += [int(v) for v in attribute]
                for inner in op.operation.regions:
                    values += constants(inner)
        return values

    found = []

    def walk(operation) -> None:
        for region in operation.regions:
            for block in region.blocks:
                for op in block.operations:
                    if op.operation.name == "stablehlo.while":
                        found.append(tuple(sorted(constants(op.operation.regions[0]))))
                    walk(op.operation)

    walk(lowered(fn, *args, platform=platform).compiler_ir("stablehlo").operation)
    return found


def has_triton_call(text: str) -> bool:
    return any(call in text for call in TRITON_CALLS)


def has_any_kernel_call(text: str) -> bool:
    return any(call in text for call in ALL_CALLS)


def has_mosaic_gpu_call(text: str) -> bool:
    return MOSAIC_GPU_CALL in text and not has_triton_call(text)


def has_default_cuda_call(text: str) -> bool:
    """The kernel family products lower to on cuda with this JAX."""
    return has_mosaic_gpu_call(text) if MOSAIC_IS_DEFAULT else has_triton_call(text)


def _spd(shape=(6, 9), offsets=(-5, -1, 0, 2, 8), dtype=np.float32, batch=()):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((*batch, len(offsets), shape[1])).astype(dtype)
    return jaxdia.DiaMatrix(data, offsets, shape)


# -- the kernels, called directly --------------------------------------------------------


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, jnp.bfloat16, np.float16, np.complex64, np.complex128]
)
@pytest.mark.parametrize("transpose", [False, True])
def test_triton_spmm_lowers(platform, dtype, transpose):
    shape, offsets = (6, 9), (-5, -1, 0, 2, 8)
    data = jnp.ones((2, len(offsets), shape[1]), dtype)
    x = jnp.ones((1, shape[0] if transpose else shape[1], 3), dtype)

    def f(data, x):
        return pallas_triton.spmm(data, x, offsets=offsets, shape=shape, transpose=transpose)

    text = lowered_text(f, data, x, platform=platform)
    assert has_triton_call(text) and MOSAIC_GPU_CALL not in text


@pytest.mark.parametrize("platform", ["cuda", "rocm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, jnp.bfloat16, np.complex64])
def test_triton_sddmm_lowers(platform, dtype):
    shape, offsets = (6, 9), (-5, -1, 0, 2, 8)
    g = jnp.ones((2, shape[0], 20), dtype)
    x = jnp.ones((1, shape[1], 20), dtype)
    blocks = pallas_triton.BlockSizes(rows=8, cols=8)  # three steps of the column loop

    def f(g, x):
        return pallas_triton.sddmm(g, x, offsets=offsets, shape=shape, block_sizes=blocks)

    assert has_triton_call(lowered_text(f, g, x, platform=platform))


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("n_cols", [1, 10])
def test_tpu_spmm_lowers(dtype, transpose, n_cols):
    shape, offsets = (300, 500), (-299, -130, -1, 0, 1, 129, 499)
    data = jnp.ones((2, len(offsets), shape[1]), dtype)
    x = jnp.ones((1, shape[0] if transpose else shape[1], n_cols), dtype)
    blocks = pallas_tpu.BlockSizes(rows=128, cols=8)

    def f(data, x):
        return pallas_tpu.spmm(
            data, x, offsets=offsets, shape=shape, transpose=transpose, block_sizes=blocks
        )

    assert TPU_CALL in lowered_text(f, data, x, platform="tpu")


@pytest.mark.parametrize("dtype", [np.float32, jnp.bfloat16])
@pytest.mark.parametrize("n_cols", [1, 20])
def test_tpu_sddmm_lowers(dtype, n_cols):
    shape, offsets = (300, 500), (-299, -130, -1, 0, 1, 129, 499)
    g = jnp.ones((2, shape[0], n_cols), dtype)
    x = jnp.ones((1, shape[1], n_cols), dtype)
    blocks = pallas_tpu.BlockSizes(rows=128, cols=8)

    def f(g, x):
        return pallas_tpu.sddmm(g, x, offsets=offsets, shape=shape, block_sizes=blocks)

    assert TPU_CALL in lowered_text(f, g, x, platform="tpu")


def test_large_grid_lowers():
    """Row blocks beyond CUDA's 65535 limit on grid y/z, and 64-bit addressing."""
    n = 2**27  # 131072 blocks of 1024 rows; 27 diagonals of float32 exceed 2**32 bytes
    offsets = tuple(range(-13, 14))
    data = jax.ShapeDtypeStruct((len(offsets), n), jnp.float32)
    x = jax.ShapeDtypeStruct((n, 1), jnp.float32)

    def f(data, x):
        return pallas_triton.spmm(data, x, offsets=offsets, shape=(n, n))

    assert has_triton_call(lowered_text(f, data, x, platform="cuda"))


# -- A @ X through the primitives --------------------------------------------------------

PLATFORM_CALLS = {"cuda": has_default_cuda_call, "tpu": lambda text: TPU_CALL in text}


def _products():
    """(name, function, args) of A @ X and the transformations that reach the kernels."""
    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    Ab = _spd(batch=(3,))

    def matmul(A, X):
        return A @ X

    def loss_data(data, X):
        return (jaxdia.DiaMatrix(data, A.offsets, A.shape) @ X).sum()

    def loss_x(A, X):
        return (A @ X).sum()

    return [
        ("matmul", matmul, (A, X)),
        ("grad_data", jax.grad(loss_data), (A.data, X)),
        ("grad_x", jax.grad(loss_x, argnums=1), (A, X)),
        ("vmap_data", jax.vmap(matmul, in_axes=(0, None)), (Ab, X)),
    ]


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
@pytest.mark.parametrize("name, fn, args", _products(), ids=[p[0] for p in _products()])
def test_matmul_lowers_to_kernel(platform, name, fn, args):
    text = lowered_text(fn, *args, platform=platform)
    assert PLATFORM_CALLS[platform](text), name


@pytest.mark.parametrize("name, fn, args", _products(), ids=[p[0] for p in _products()])
def test_cpu_uses_no_kernel(name, fn, args):
    assert not has_any_kernel_call(lowered_text(fn, *args, platform="cpu")), name


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_grad_data_uses_sddmm_kernel(platform):
    """The data cotangent runs the SDDMM kernel (the product's output is not needed)."""
    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    text = lowered_text(
        jax.grad(lambda d: (jaxdia.DiaMatrix(d, A.offsets, A.shape) @ X).sum()),
        A.data,
        platform=platform,
    )
    assert PLATFORM_CALLS[platform](text) and "jaxdia_sddmm" in text
    assert "jaxdia_spmm" not in text


@pytest.mark.parametrize("platform", ["cuda", "tpu"])
def test_solve_banded_lowers_without_the_cpu_lapack_call(platform):
    """Banded solves call LAPACK on the host on CPU only; accelerators run cyclic
    reduction (a host call there would copy the system to the host), whose only loop is
    its refinement's (``tests/test_band_parallel.py`` checks that no loop grows with n)."""
    n = 17
    A = jaxdia.diags([1.0, 1.0, 4.0, 1.0], offsets=[-2, -1, 0, 2], shape=(n, n))
    b = jnp.ones(n, jnp.float32)
    assert "jaxdia_lapack" in lowered_text(jaxdia.solve_banded, A, b, platform="cpu")
    text = lowered_text(jaxdia.solve_banded, A, b, platform=platform)
    assert "jaxdia_lapack" not in text and text.count("stablehlo.while") == 1


@pytest.mark.parametrize("solve", ["solve_banded", "eigsh"])
def test_tridiagonal_solves_on_tpu_are_cyclic_reduction(solve):
    """TPU's ``tridiagonal_solve`` is the Thomas algorithm, a loop over the rows: there a
    one-shot tridiagonal solve and eigsh's shift-invert run cyclic reduction (with its
    refinement loop of at most ``band_refine.STEPS`` trips); elsewhere they call the
    library's pivoting ``gtsv``."""
    n = 400
    A = jaxdia.diags([-1.0, 4.0, -1.5], offsets=[-1, 0, 1], shape=(n, n))
    if solve == "solve_banded":
        fn, args = jaxdia.solve_banded, (A, jnp.ones(n, jnp.float32))
    else:
        fn, args = (lambda A: jaxdia.eigsh(A, k=2, sigma=0.5)[0]), (A,)
    cpu, tpu = lowered_text(fn, *args, platform="cpu"), lowered_text(fn, *args, platform="tpu")
    assert "gtsv" in cpu and "gtsv" not in tpu
    if solve == "solve_banded":
        assert while_loops(fn, *args, platform="tpu") == [(0, band_refine.STEPS)]


def test_float64_on_tpu_falls_back_to_xla():
    A = _spd(dtype=np.float64)
    X = jnp.ones((A.shape[1], 2), jnp.float64)
    text = lowered_text(lambda A, X: A @ X, A, X, platform="tpu")
    assert TPU_CALL not in text
    assert has_default_cuda_call(lowered_text(lambda A, X: A @ X, A, X, platform="cuda"))


def test_forced_xla_on_cuda_has_no_kernel():
    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    text = lowered_text(
        lambda A, X: jaxdia.matmul(A, X, implementation="xla"), A, X, platform="cuda"
    )
    assert not has_any_kernel_call(text)


def test_forced_pallas_on_cpu_raises():
    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    with pytest.raises(ValueError, match="pallas"):
        lowered_text(
            lambda A, X: jaxdia.matmul(A, X, implementation="pallas"), A, X, platform="cpu"
        )


# -- Mosaic GPU: the kernels, the choice between the GPU families, no deprecation warning --

MOSAIC_DTYPES = [np.float32, np.float64, jnp.bfloat16, np.float16]


@pytest.mark.parametrize("dtype", MOSAIC_DTYPES)
@pytest.mark.parametrize("transpose", [False, True])
@pytest.mark.parametrize("n_cols", [1, 5])
def test_mosaic_gpu_spmm_lowers(dtype, transpose, n_cols):
    """Both JAX ends; with 5 columns in blocks of 2 (a first, a looped and a last block),
    offsets at the corners and a broadcast batch."""
    shape, offsets = (300, 501), (-299, -130, -1, 0, 1, 129, 500)
    data = jnp.ones((2, len(offsets), shape[1]), dtype)
    x = jnp.ones((1, shape[0] if transpose else shape[1], n_cols), dtype)
    blocks = pallas_mosaic_gpu.BlockSizes(rows=128, cols=2)

    def f(data, x):
        return pallas_mosaic_gpu.spmm(
            data, x, offsets=offsets, shape=shape, transpose=transpose, block_sizes=blocks
        )

    assert has_mosaic_gpu_call(lowered_text(f, data, x, platform="cuda"))


@pytest.mark.parametrize("dtype", MOSAIC_DTYPES)
def test_mosaic_gpu_sddmm_lowers(dtype):
    shape, offsets = (300, 501), (-299, -130, -1, 0, 1, 129, 500)
    g = jnp.ones((2, shape[0], 5), dtype)
    x = jnp.ones((1, shape[1], 5), dtype)
    blocks = pallas_mosaic_gpu.BlockSizes(rows=128, cols=2)

    def f(g, x):
        return pallas_mosaic_gpu.sddmm(g, x, offsets=offsets, shape=shape, block_sizes=blocks)

    assert has_mosaic_gpu_call(lowered_text(f, g, x, platform="cuda"))


def test_mosaic_gpu_large_lowers():
    """131072 tiles on one grid axis (CUDA's x, not limited to 65535), data beyond 2**32
    bytes addressed as 2-D lines (TMA's coordinates are 32-bit)."""
    n = 2**27
    offsets = tuple(range(-13, 14))
    data = jax.ShapeDtypeStruct((len(offsets), n), jnp.float32)
    x = jax.ShapeDtypeStruct((n, 1), jnp.float32)

    def f(data, x):
        return jaxdia.DiaMatrix(data, offsets, (n, n)) @ x

    assert has_default_cuda_call(lowered_text(f, data, x, platform="cuda"))


@pytest.mark.skipif(not MOSAIC_IS_DEFAULT, reason="Triton is the cuda default before JAX 0.11")
def test_cuda_default_warns_nothing():
    """JAX 0.12 warns on every Triton lowering; the default products (and their
    gradients, complex ones on XLA) lower without any warning."""
    Ac = _spd(dtype=np.complex64)
    Xc = jnp.ones((Ac.shape[1], 2), Ac.dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for name, fn, args in _products():
            assert has_mosaic_gpu_call(lowered_text(fn, *args, platform="cuda")), name
        text = lowered_text(lambda A, X: A @ X, Ac, Xc, platform="cuda")
    assert not has_any_kernel_call(text)


@pytest.mark.parametrize("implementation", ["mosaic", "triton", "pallas"])
def test_forced_gpu_family(implementation):
    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    text = lowered_text(
        lambda A, X: jaxdia.matmul(A, X, implementation=implementation), A, X, platform="cuda"
    )
    if implementation == "triton" or (implementation == "pallas" and not MOSAIC_IS_DEFAULT):
        assert has_triton_call(text)
    else:
        assert has_mosaic_gpu_call(text)


@pytest.mark.parametrize(
    "implementation, platform, dtype, match",
    [
        ("mosaic", "rocm", np.float32, "no Mosaic GPU spmm kernel .* platform 'rocm'"),
        ("mosaic", "tpu", np.float32, "no Mosaic GPU spmm kernel .* platform 'tpu'"),
        ("mosaic", "cuda", np.complex64, "complex64 is not one the Mosaic GPU kernels take"),
        ("triton", "tpu", np.float32, "no Pallas Triton spmm kernel .* platform 'tpu'"),
    ],
)
def test_forced_gpu_family_that_cannot_run_raises(implementation, platform, dtype, match):
    A = _spd(dtype=dtype)
    X = jnp.ones((A.shape[1], 2), dtype)
    with pytest.raises(ValueError, match=match):
        lowered_text(
            lambda A, X: jaxdia.matmul(A, X, implementation=implementation),
            A,
            X,
            platform=platform,
        )


def test_older_gpus_fall_back_to_triton(monkeypatch):
    """A GPU without TMA (compute capability below 9.0) gets the Triton kernels."""
    monkeypatch.setattr(pallas_mosaic_gpu, "unsupported_device", lambda: "an Ampere GPU")
    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    assert has_triton_call(lowered_text(lambda A, X: A @ X, A, X, platform="cuda"))
    with pytest.raises(ValueError, match="an Ampere GPU"):
        lowered_text(
            lambda A, X: jaxdia.matmul(A, X, implementation="mosaic"), A, X, platform="cuda"
        )


@pytest.mark.skipif(not MOSAIC_IS_DEFAULT, reason="Triton is the cuda default before JAX 0.11")
def test_what_mosaic_gpu_cannot_tile_runs_on_xla():
    """Diagonals spread too far apart for a tile's windows run on XLA, not on the
    deprecated Triton backend."""
    n = 10**6
    offsets = tuple(range(-200_000, 200_000, 1000))
    data = jax.ShapeDtypeStruct((len(offsets), n), jnp.float32)
    x = jax.ShapeDtypeStruct((n, 1), jnp.float32)

    def f(data, x):
        return jaxdia.DiaMatrix(data, offsets, (n, n)) @ x

    assert not has_any_kernel_call(lowered_text(f, data, x, platform="cuda"))


@pytest.mark.skipif(not MOSAIC_IS_DEFAULT, reason="jax.export refuses the Triton kernel")
def test_cuda_default_exports():
    """Mosaic GPU's custom call has jax.export's compatibility guarantee (Triton's has
    not), so the default product exports for cuda."""
    from jax import export

    A = _spd()
    X = jnp.ones((A.shape[1], 2), jnp.float32)
    exported = export.export(jax.jit(lambda A, X: A @ X), platforms=("cuda",))(A, X)
    assert MOSAIC_GPU_CALL in exported.mlir_module()


def _expm_multiply_of_a_function(M, b):
    """expm_multiply of a function of ``M`` written in JAX, its trace estimated."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # SciPy's: the trace is estimated
        return jaxdia.expm_multiply(lambda v: jnp.matmul(M, v, precision="highest"), b)


def _dense_products_cases():
    """Programs with dense block products on the solve side, sized to take their
    accelerator paths: cyclic reduction's blocks (one-shot, LU and Cholesky factors; past
    ``band_parallel.LANE_BLOCKS`` rows, which TPU multiplies elementwise below),
    the periodic correction, multigrid's coarse inverse, Lanczos' reorthogonalization,
    ``expm_multiply``'s norm estimate, GMRES' Gram-Schmidt and BDF's difference tables."""
    rng = np.random.default_rng(0)

    def band(n, width, corners=False):
        offsets = list(range(-width, width + 1)) + ([n - 1, 1 - n] if corners else [])
        data = rng.standard_normal((len(offsets), n)).astype(np.float32)
        data[offsets.index(0)] += 4 * width + 4
        return jaxdia.DiaMatrix(jnp.asarray(data), offsets, (n, n))

    small = band(64, 5)
    wide, large_wide = band(64, 17), band(4096, 17)  # blocks of 17 rows
    laplacian = jaxdia.diags([-1.0, 2.0, -1.0], offsets=[-1, 0, 1], shape=(16, 16))
    identity = jaxdia.eye(16)
    poisson = (jaxdia.kron(laplacian, identity) + jaxdia.kron(identity, laplacian)).astype(
        np.float32
    )
    tridiagonal = jaxdia.diags([-1.0, 4.0, -1.5], offsets=[-1, 0, 1], shape=(400, 400))
    return {
        "solve_banded": (jaxdia.solve_banded, (wide, jnp.ones(64, jnp.float32))),
        "lu_factor": (
            lambda A, b: jaxdia.lu_factor(A).solve(b),
            (large_wide, jnp.ones(4096, jnp.float32)),
        ),
        "cho_factor": (
            lambda A, b: jaxdia.cho_factor(A).solve(b),
            ((large_wide + large_wide.T) * 0.5, jnp.ones(4096, jnp.float32)),
        ),
        "periodic": (jaxdia.solve_banded, (band(64, 1, corners=True), jnp.ones(64, jnp.float32))),
        "multigrid": (
            lambda A, b: jaxdia.cg(A, b, M=jaxdia.multigrid(A, (16, 16)))[0],
            (poisson, jnp.ones(256, jnp.float32)),
        ),
        "eigsh": (lambda A: jaxdia.eigsh(A, k=2)[0], (tridiagonal.astype(np.float32),)),
        "expm_multiply": (
            lambda A, b: jaxdia.expm_multiply(0.01 * A, b),
            (small, jnp.ones(64, jnp.float32)),
        ),
        "expm_multiply_operator": (  # an operator's norm estimates and trace (Hutch++)
            _expm_multiply_of_a_function,
            (0.01 * small.todense(), jnp.ones(64, jnp.float32)),
        ),
        "expm_multiply_dense": (  # a dense matrix's products
            lambda M, b: jaxdia.expm_multiply(M, b),
            (0.01 * small.todense(), jnp.ones(64, jnp.float32)),
        ),
        "gmres": (lambda A, b: jaxdia.gmres(A, b)[0], (small, jnp.ones(64, jnp.float32))),
        "solve_ivp": (
            lambda A, y0: (
                jaxdia.solve_ivp(lambda t, y: -(A @ y), (0.0, 1.0), y0, jac=lambda t, y: -A).y
            ),
            (small, jnp.ones(64, jnp.float32)),
        ),
    }


@pytest.mark.parametrize("platform", ["tpu", pytest.param("cuda", marks=pytest.mark.full)])
@pytest.mark.parametrize("case", sorted(_dense_products_cases()))
def test_dense_products_on_accelerators_run_at_full_precision(platform, case, traced_as):
    """A float32 ``dot`` at its default precision rounds its operands to bfloat16 on a
    TPU (and to TF32 on recent NVIDIA GPUs): block cyclic reduction then solved a
    21-diagonal SPD system on a TPU v5e to a residual of 2e-4 with no error reported.
    Every dense product jaxdia writes asks for full precision."""
    traced_as(platform)
    fn, args = _dense_products_cases()[case]
    text = lowered_text(fn, *args, platform=platform)
    products = [line for line in text.splitlines() if "stablehlo.dot" in line]
    assert products, "the case no longer reaches a dense product: resize it"
    assert all("precision = [HIGHEST, HIGHEST]" in line for line in products), products
