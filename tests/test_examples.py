"""The examples run (with ``--small``) and every check they print passes."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


#: Examples that take a minute or more on 2 cores (``--small`` included): the full tier
#: runs them.
HEAVY = pytest.mark.full


@pytest.mark.parametrize(
    "name, plot",
    [
        ("poisson_2d.py", None),
        ("heat_equation.py", None),
        pytest.param("inverse_diffusion.py", "inverse_diffusion.png", marks=HEAVY),
        ("demo.py", "demo.png"),
        pytest.param("quantum_oscillator.py", "quantum_oscillator.png", marks=HEAVY),
        pytest.param("multigrid.py", "multigrid.png", marks=HEAVY),
        pytest.param("bratu.py", None, marks=HEAVY),
        pytest.param("brusselator.py", None, marks=HEAVY),
        pytest.param("gray_scott.py", None, marks=HEAVY),
        pytest.param("gmrf_fit.py", None, marks=HEAVY),
        pytest.param("state_space_smoother.py", None, marks=HEAVY),
    ],
)
def test_example_runs_and_checks_pass(tmp_path, name, plot):
    command = [sys.executable, str(EXAMPLES / name), "--small"]
    if plot:
        command += ["--out", str(tmp_path / plot)]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "FAILED" not in output, output
    assert "[ok]" in output or " ok" in output, output
    if plot:
        assert (tmp_path / plot).exists() == HAS_MATPLOTLIB, output


@pytest.mark.full  # `make demo` and the example tests run the demo itself
@pytest.mark.parametrize("name", ["demo"])
def test_runs_without_matplotlib(tmp_path, name):
    """matplotlib is an optional extra: without it the examples still run and say so (every
    example imports it the same way, where it plots; the demo stands for them)."""
    code = (
        "import runpy, sys\n"
        "sys.modules['matplotlib'] = None\n"
        f"sys.argv = ['{name}.py', '--small', '--out', {str(tmp_path / (name + '.png'))!r}]\n"
        f"runpy.run_path({str(EXAMPLES / (name + '.py'))!r}, run_name='__main__')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "matplotlib is not installed" in result.stdout
    assert not (tmp_path / f"{name}.png").exists()
