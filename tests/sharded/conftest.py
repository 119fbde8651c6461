"""The sharded tests: 8 fake CPU devices, in a pytest process of their own.

JAX fixes its device count when its backend starts, and the rest of the suite runs on
one device, so ``tests/conftest.py`` leaves this folder out (``collect_ignore``) and
``make test`` runs it in a second process: ``python -m pytest tests/sharded``. The XLA
flag below is set before anything asks JAX for a device (``tests/conftest.py`` imports
JAX and sets x64 and the optimization level, which start no backend), and the folder
refuses to run on any other device count. The tests marked ``full`` are the full tier's
(``make test-full``).
"""

import os

DEVICES = 8
FLAG = f"--xla_force_host_platform_device_count={DEVICES}"
if FLAG not in os.environ.get("XLA_FLAGS", ""):  # pytest-xdist's workers inherit it
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + FLAG).strip()

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_platforms", "cpu")

if len(jax.devices()) != DEVICES:
    raise pytest.UsageError(
        f"tests/sharded needs {DEVICES} CPU devices, but JAX started with "
        f"{len(jax.devices())}: run it in a pytest process of its own "
        "(python -m pytest tests/sharded), not with the rest of the suite"
    )
