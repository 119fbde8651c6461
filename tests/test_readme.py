"""Every ```python block of README.md runs (in order, in one namespace).

A block right after an ``<!-- not run ... -->`` comment is skipped (it says why).
"""

import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_python_blocks_run():
    text = re.sub(r"<!-- not run.*?-->\n```python\n.*?```", "", README.read_text(), flags=re.DOTALL)
    blocks = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    assert blocks, "README.md has no python examples"
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
