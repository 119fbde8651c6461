"""SciPy's own tests as jaxdia's specification: a pytest process of its own, in the full
tier.

Each ``test_scipy_*.py`` here loads one of SciPy's installed test modules with jaxdia in
place of the SciPy functions it tests (``adapters.py``) and says which of its tests are in
scope (``in_scope``); this conftest deselects the others, marks the rest ``full`` and
marks those listed in ``expected_failures.toml`` as strict expected failures: each entry
says why jaxdia differs and names the section of ``docs/migration.md`` that documents it,
and a listed test that passes fails the run (remove it from the list); an entry with
``strict = false`` is one whose outcome follows the machine's rounding (it says how).

``tests/conftest.py`` leaves this folder out of ``make test``; ``make test-full`` runs it
in a process of its own: ``python -m pytest -m full tests/scipy_conformance``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

HERE = Path(__file__).parent
MIGRATION = HERE.parents[1] / "docs" / "migration.md"
EXPECTED = HERE / "expected_failures.toml"

#: The markers SciPy's test modules use (SciPy's conftest registers them there).
SCIPY_MARKERS = (
    "slow: SciPy's very slow tests",
    "xslow: SciPy's extremely slow tests",
    "xfail_on_32bit: SciPy: fails on 32-bit platforms",
    "fail_slow: SciPy: a non-default time limit",
    "timeout: SciPy: a non-default timeout",
    "thread_unsafe: SciPy: single-threaded",
    "parallel_threads(n): SciPy: run in n threads",
    "parallel_threads_limit(n): SciPy: at most n threads",
    "iterations(n): SciPy: run n times",
    "array_api_backends: SciPy: every array API backend",
    "skip_xp_backends: SciPy's array API skips",
    "xfail_xp_backends: SciPy's array API expected failures",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in SCIPY_MARKERS:
        config.addinivalue_line("markers", line)


@pytest.fixture
def num_parallel_threads() -> int:
    """SciPy's fixture (pytest-run-parallel's): the tests run in one thread here."""
    return 1


def _anchors(markdown: str) -> set[str]:
    """GitHub's anchors of the headings of ``markdown``."""
    anchors = set()
    for line in markdown.splitlines():
        match = re.match(r"#+\s+(.*)", line)
        if match:
            title = re.sub(r"[^\w\- ]", "", match.group(1).strip().lower())
            anchors.add(title.replace(" ", "-"))
    return anchors


def expected_failures() -> dict[str, tuple[str, bool]]:
    """Test id (``file::name``) -> the reason its entry gives, with the doc it names, and
    whether the expected failure is strict (an entry's ``strict = false``: the outcome
    depends on the machine's rounding, its ``why`` says how); every entry checked: a
    reason, and a ``doc`` anchor that is a heading of ``docs/migration.md``."""
    entries = tomllib.loads(EXPECTED.read_text())["difference"]
    anchors = _anchors(MIGRATION.read_text())
    reasons: dict[str, tuple[str, bool]] = {}
    for entry in entries:
        why, doc, tests = entry["why"].strip(), entry["doc"], entry["tests"]
        strict = entry.get("strict", True)
        page, _, anchor = doc.partition("#")
        if page != "docs/migration.md" or anchor not in anchors:
            raise pytest.UsageError(
                f"{EXPECTED.name}: {doc!r} is not a heading of docs/migration.md (entry: {why})"
            )
        if not isinstance(strict, bool):
            raise pytest.UsageError(f"{EXPECTED.name}: strict must be true or false ({why})")
        for test in tests:
            if test in reasons:
                raise pytest.UsageError(f"{EXPECTED.name}: {test} is listed twice")
            reasons[test] = (f"{why} ({doc})", strict)
    return reasons


def _key(item: pytest.Item) -> str:
    return item.nodeid.rpartition("scipy_conformance/")[2]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    ours = [item for item in items if HERE in Path(str(item.path)).parents]
    if not ours:
        return
    reasons = expected_failures()
    selected, deselected = [], []
    for item in items:
        if item not in ours:
            selected.append(item)
            continue
        module = getattr(item, "module", None)
        if module is None or not module.in_scope(item):
            deselected.append(item)
            continue
        item.add_marker(pytest.mark.full)
        expected = reasons.pop(_key(item), None)
        if expected is not None:
            reason, strict = expected
            item.add_marker(pytest.mark.xfail(reason=reason, strict=strict))
        selected.append(item)
    # Entries whose file was collected but which name no test in scope: stale.
    files = {_key(item).partition("::")[0] for item in ours}
    whole_files = not any("::" in str(arg) for arg in config.args)
    stale = [test for test in reasons if test.partition("::")[0] in files]
    if whole_files and stale:
        raise pytest.UsageError(
            f"{EXPECTED.name} lists tests that are not in scope (renamed in SciPy, or "
            f"deselected): {', '.join(sorted(stale)[:10])}"
        )
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
