"""The examples run (with ``--small``) and every check they print passes."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.mark.parametrize(
    "name, plot",
    [
        ("poisson_2d.py", None),
        ("heat_equation.py", None),
        ("inverse_diffusion.py", "inverse_diffusion.png"),
        ("demo.py", "demo.png"),
        ("multigrid.py", "multigrid.png"),
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


def test_demo_runs_without_matplotlib(tmp_path):
    """matplotlib is an optional extra: without it the demo still runs and says so."""
    code = (
        "import runpy, sys\n"
        "sys.modules['matplotlib'] = None\n"
        f"sys.argv = ['demo.py', '--small', '--out', {str(tmp_path / 'demo.png')!r}]\n"
        f"runpy.run_path({str(EXAMPLES / 'demo.py')!r}, run_name='__main__')\n"
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
    assert not (tmp_path / "demo.png").exists()
