"""benchmarks/gpu_check.py runs here: its no-accelerator exit, and every section in its dry run;
benchmarks/tune_tpu_products.py's dry run (the candidate TPU kernel, interpreted).

The script's real job (kernels compiled for an NVIDIA GPU or a TPU, timings there) needs hardware;
the dry run (tiny sizes, the kernels in Pallas's interpreters) keeps the script itself
from rotting on machines without one.
"""

import pathlib
import subprocess
import sys

import pytest

SCRIPT = pathlib.Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.py"


def run(*args):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=600
    )


def test_exits_cleanly_without_an_accelerator():
    result = run("--sections", "check")
    assert result.returncode == 0, result.stderr
    assert "No GPU or TPU found" in result.stdout


@pytest.mark.full
def test_dry_run_checks_every_pallas_family_and_runs_every_section():
    result = run("--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "all checks passed" in result.stdout
    table = result.stdout[result.stdout.index("| section |") :]
    for backend in ("mosaic", "triton", "pallas"):
        assert f"| {backend} |  |  |  | ok (error/tolerance A@X" in table
    for section in ("A@X", "banded", "multigrid-CG"):
        assert f"\n| {section} |" in table
    assert "| device copy |" in table and "ok (residual" in table
    assert "FAIL" not in result.stdout and "skipped" not in table


TUNING = SCRIPT.parent / "tune_tpu_products.py"


@pytest.mark.full
def test_tpu_tuning_dry_run_checks_the_grouped_kernel(tmp_path):
    """The candidate grouped TPU kernel (benchmarks/tpu_grouped.py), interpreted, against XLA's
    product in float64: every pattern of the script's check, both products."""
    out = tmp_path / "dry.jsonl"
    result = subprocess.run(
        [sys.executable, str(TUNING), "--dry-run", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    checks = [line for line in out.read_text().splitlines() if '"kind": "check"' in line]
    assert len(checks) == 12 and all('"passed": true' in line for line in checks)
