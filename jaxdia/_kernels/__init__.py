"""The kernels: jaxdia's JAX primitives and everything that lowers them.

The primitives (:mod:`.primitives`: the products ``dia_spmm``/``dia_sddmm`` and the
diagonal sums; :mod:`.band_primitives`: the banded factor and solve) with their
differentiation, batching and per-platform lowering rules, and the implementations they
lower to: pure ``jax.numpy`` (:mod:`.xla`, :mod:`.xla_runs`), the Pallas kernels
(:mod:`.pallas_triton`, :mod:`.pallas_tpu`, sharing :mod:`.pallas_common`), LAPACK on the
host through XLA's FFI (:mod:`.lapack`, with compiled handlers) and the ``lax.scan``
factorizations (:mod:`.band_scan`). This folder imports only the foundations, and it is
the only place that registers a lowering (``tests/test_layering.py``).
"""
