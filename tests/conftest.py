"""Test configuration: x64 on (float64/complex128 are tested), Hypothesis profiles.

Profiles: ``ci`` (default; derandomized, no example database, modest example counts so
``make test`` stays fast on 2 cores) and ``dev`` (random, 5x the examples) for local
runs: ``HYPOTHESIS_PROFILE=dev make test``.
"""

import os

import jax
from hypothesis import HealthCheck, settings

jax.config.update("jax_enable_x64", True)

settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    max_examples=30,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "dev",
    deadline=None,
    max_examples=150,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
