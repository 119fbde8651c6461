"""benchmarks/gpu_check.py runs here: its no-GPU exit, and its checks in interpret mode.

The script's real job (kernels compiled for an NVIDIA GPU) needs hardware; these tests keep
the script itself from rotting on machines without one.
"""

import pathlib
import subprocess
import sys

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


def test_exits_cleanly_without_a_gpu():
    result = run()
    assert result.returncode == 0, result.stderr
    assert "No GPU found" in result.stdout


def test_interpret_mode_checks_every_kernel_against_scipy():
    result = run("--interpret", "--skip-timing")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks passed" in result.stdout
    for kernel in ("A@X", "A^T@X", "SDDMM"):
        assert f"ok   {kernel}" in result.stdout
    assert "FAIL" not in result.stdout
