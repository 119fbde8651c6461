"""Every ```python block of README.md runs (in order, in one namespace), with JAX's
defaults as a user has them (x64 off; the rest of the suite turns it on).

A block right after an ``<!-- not run ... -->`` comment is skipped (it says why).
"""

import pathlib
import re

import jax

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run():
    text = re.sub(r"<!-- not run.*?-->\n```python\n.*?```", "", README.read_text(), flags=re.DOTALL)
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "README.md has no python examples"
    namespace: dict = {}
    with jax.enable_x64(False):
        for block in blocks:
            exec(compile(block, str(README), "exec"), namespace)
