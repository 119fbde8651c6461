"""Every ```python block of the README and of every page in ``docs/`` runs (a page's blocks
in order, in one namespace), with JAX's defaults as a user has them (x64 off; the rest of
the suite turns it on).

A block right after an ``<!-- not run ... -->`` comment is skipped (it says why).
"""

import pathlib
import re

import jax
import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
#: Pages whose blocks compile many solvers (minutes on 2 cores): the full tier runs them.
HEAVY_PAGES = {"docs/solvers.md", "docs/nonlinear.md"}


def python_blocks(page: pathlib.Path) -> list[str]:
    text = re.sub(r"<!-- not run.*?-->\n```python\n.*?```", "", page.read_text(), flags=re.DOTALL)
    return re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)


def test_the_readme_has_examples():
    assert python_blocks(ROOT / "README.md"), "README.md has no python examples"


@pytest.mark.parametrize(
    "page",
    [
        pytest.param(
            page,
            id=str(page.relative_to(ROOT)),
            marks=[pytest.mark.full] if str(page.relative_to(ROOT)) in HEAVY_PAGES else [],
        )
        for page in PAGES
    ],
)
def test_python_blocks_run(page):
    namespace: dict = {}
    with jax.enable_x64(False):
        for block in python_blocks(page):
            exec(compile(block, str(page), "exec"), namespace)
