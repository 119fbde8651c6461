"""The base of jaxdia's pytree classes: immutable objects of named leaves and static fields."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Self, TypeVar

import jax
import numpy as np


class Immutable:
    """An immutable pytree whose fields are named: ``_leaves`` (the children: arrays, or
    pytrees of them, in order) and ``_static`` (hashable aux data: offsets, shapes,
    options).

    A subclass lists both in ``__slots__`` and is registered with
    ``jax.tree_util.register_pytree_with_keys_class``. Its instances cannot be changed
    (so nothing can change a matrix or a preconditioner behind a compiled function that
    closed over it); :meth:`_make` builds one without validating anything, as JAX's
    unflattening needs (leaves may be tracers, None or placeholder objects), and
    :meth:`_replace` returns a copy with some fields changed. Key paths
    (``tree_flatten_with_path``, JAX's errors about traced arguments) name the leaves
    (``.data``); pickling and copying rebuild an instance from its fields.
    """

    __slots__ = ()
    _leaves: ClassVar[tuple[str, ...]] = ()
    _static: ClassVar[tuple[str, ...]] = ()
    #: Said after "<class> is immutable" when a field is assigned.
    _immutable_hint: ClassVar[str] = ""

    def _assign(self, *values: Any) -> None:
        """Sets the fields, ``_leaves`` then ``_static``, in order (constructors only)."""
        names = self._leaves + self._static
        if len(values) != len(names):
            raise TypeError(f"{type(self).__name__} has {len(names)} fields, got {len(values)}")
        for name, value in zip(names, values):
            object.__setattr__(self, name, value)

    @classmethod
    def _make(cls, *values: Any) -> Self:
        """An instance of the fields ``values`` (``_leaves`` then ``_static``), unchecked."""
        instance = object.__new__(cls)
        instance._assign(*values)
        return instance

    def _replace(self, **changes: Any) -> Self:
        """A copy with the fields named in ``changes`` replaced."""
        names = self._leaves + self._static
        unknown = set(changes) - set(names)
        if unknown:
            raise TypeError(f"{type(self).__name__} has no fields {sorted(unknown)}")
        return self._make(*(changes.get(name, getattr(self, name)) for name in names))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable{self._immutable_hint}")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is immutable{self._immutable_hint}")

    def __reduce__(self) -> tuple[Any, ...]:
        # pickle, copy.copy and copy.deepcopy rebuild the object from its fields (the
        # default protocol restores slots through the immutable __setattr__).
        return type(self).tree_unflatten, self.tree_flatten()[::-1]

    # -- pytree --------------------------------------------------------------------------

    def tree_flatten(self) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        leaves = tuple(getattr(self, name) for name in self._leaves)
        return leaves, tuple(getattr(self, name) for name in self._static)

    def _leaf_keys(self) -> tuple[str, ...]:
        """The names of the flattened children in key paths (the leaf fields'
        names without a leading underscore)."""
        return tuple(name.lstrip("_") for name in self._leaves)

    def tree_flatten_with_keys(self) -> tuple[tuple[tuple[Any, Any], ...], tuple[Any, ...]]:
        leaves, aux = self.tree_flatten()
        keys = (jax.tree_util.GetAttrKey(name) for name in self._leaf_keys())
        return tuple(zip(keys, leaves)), aux

    @classmethod
    def tree_unflatten(cls, aux: tuple[Any, ...], children: Iterable[Any]) -> Self:
        return cls._make(*children, *aux)


_Class = TypeVar("_Class", bound=type)


def built_by(function: str) -> Callable[[_Class], _Class]:
    """A class decorator: instances come only from ``jaxdia.<function>`` (and ``_make``);
    calling the class raises ``TypeError`` saying so, and its signature reads ``Cls()``."""

    def decorate(cls: _Class) -> _Class:
        def refuse(self: object, *args: object, **kwargs: object) -> None:
            raise TypeError(f"{cls.__name__} is not built directly: call jaxdia.{function}(A)")

        refuse.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
            [inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY)]
        )
        cls.__init__ = refuse  # type: ignore[misc]
        return cls

    return decorate


class StaticBooleans:
    """A host boolean array as static data (a structural mask, the slots a factorization
    keeps): hashable and compared by value, so that equal masks share a compiled program."""

    __slots__ = ("array", "_key")

    def __init__(self, array: np.ndarray):
        self.array: np.ndarray = array
        self._key = (array.shape, np.packbits(array).tobytes())

    def __hash__(self) -> int:
        return hash(self._key)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StaticBooleans) and self._key == other._key
