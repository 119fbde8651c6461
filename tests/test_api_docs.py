"""The public API is documented: a docstring with a runnable example for every public name,
and an entry for each in ``docs/api.md``.

The examples themselves run as doctests (``--doctest-modules`` over ``jaxdia/``, see
pyproject.toml); this file checks that they exist and that the reference is complete.
"""

from __future__ import annotations

import importlib.util
import inspect
import re
from pathlib import Path

import pytest

import jaxdia
import jaxdia.testing

API_MD = Path(__file__).resolve().parents[1] / "docs" / "api.md"

# The pytree protocol hooks: public by name, but called by JAX, not by users.
PROTOCOL = {"tree_flatten", "tree_flatten_with_keys", "tree_unflatten"}
# Classes whose public methods and properties are checked one by one (DiaLinearOperator's
# members implement lineax's AbstractLinearOperator interface and are documented there).
CLASSES_WITH_MEMBERS = ("DiaMatrix", "ShardedDiaMatrix")
# Public names that need an optional extra, checked where it is installed.
OPTIONAL = {
    "jaxdia.DiaLinearOperator": "lineax",
    "jaxdia.BandedSolver": "lineax",
    "jaxdia.MultigridSolver": "lineax",
    "jaxdia.offsets_tag": "lineax",
}


def _top_level() -> dict[str, object]:
    names = {f"jaxdia.{name}": getattr(jaxdia, name) for name in jaxdia.__all__}
    names.update(
        {f"jaxdia.testing.{name}": getattr(jaxdia.testing, name) for name in jaxdia.testing.__all__}
    )
    for name, package in OPTIONAL.items():
        if importlib.util.find_spec(package) is not None:
            names[name] = getattr(jaxdia, name.removeprefix("jaxdia."))
    return names


def _members(cls: type) -> dict[str, object]:
    """Public methods and properties of ``cls``, its own and those of the classes it is
    built from (``DiaMatrix``'s groups of methods), each as the class finds it (slots are
    attributes, described in the class docstring)."""
    members = {}
    for base in reversed(cls.__mro__):  # a subclass's definition replaces its base's
        for name, value in vars(base).items():
            if name.startswith("_") or name in PROTOCOL:
                continue
            if isinstance(value, property):
                members[name] = value.fget
            elif isinstance(value, (classmethod, staticmethod)):
                members[name] = value.__func__
            elif inspect.isfunction(value):
                members[name] = value
    return members


def _slots(cls: type) -> tuple[str, ...]:
    return tuple(name for name in getattr(cls, "__slots__", ()) if not name.startswith("_"))


def public_api() -> dict[str, object]:
    """Every documented name, as it is written in docs/api.md, mapped to its object."""
    api = _top_level()
    for cls_name in CLASSES_WITH_MEMBERS:
        cls = getattr(jaxdia, cls_name)
        api.update({f"{cls_name}.{name}": obj for name, obj in _members(cls).items()})
    return api


API = public_api()


def has_example(doc: str | None) -> bool:
    return bool(doc) and ">>>" in doc


def test_public_api_is_not_empty():
    assert "jaxdia.DiaMatrix" in API and "DiaMatrix.todense" in API
    assert "jaxdia.testing.dia_matrices" in API


@pytest.mark.parametrize("name", sorted(API))
def test_has_docstring_with_example(name):
    doc = inspect.getdoc(API[name])
    if not doc:
        pytest.fail(f"{name} has no docstring", pytrace=False)
    if not has_example(doc):
        pytest.fail(f"{name}'s docstring has no example ('Example:' with >>> lines)", pytrace=False)


@pytest.mark.parametrize("cls_name", CLASSES_WITH_MEMBERS)
def test_slots_are_described_in_class_docstring(cls_name):
    cls = getattr(jaxdia, cls_name)
    doc = inspect.getdoc(cls) or ""
    missing = [name for name in _slots(cls) if not re.search(rf"\b{name}\b", doc)]
    assert not missing, f"{cls_name}'s docstring does not mention its attributes {missing}"


def _documented_names() -> set[str]:
    """The names in docs/api.md entry headings (``###``/``####``): ``### `jaxdia.diags(...)` ``."""
    text = API_MD.read_text(encoding="utf-8")
    return set(re.findall(r"^#{3,4} `([\w.]+)", text, flags=re.MULTILINE))


def test_api_md_lists_every_public_name():
    documented = _documented_names()
    missing = sorted(set(API) - documented)
    assert not missing, f"docs/api.md lacks entries for {missing}"


def test_api_md_lists_no_stale_names():
    stale = sorted(_documented_names() - set(API) - set(OPTIONAL))
    assert not stale, f"docs/api.md documents names that are not public API: {stale}"


def test_all_names_exist_once():
    for module in (jaxdia, jaxdia.testing):
        for name in module.__all__:
            assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name!r}"
        assert len(set(module.__all__)) == len(module.__all__)
