"""The compiled programs of eager :func:`jaxdia.solve_ivp` and :func:`jaxdia.odeint` calls,
kept so that a loop of calls (a parameter sweep, a sequence of time windows, a shooting
method) compiles once.

A program is ``jax.jit`` of the integration with the values of a call (``y0``,
``t_span``, ``t_eval``, the tolerances, the step sizes, the arrays in ``args``, a matrix
``jac``) as its operands, and what shapes the program (``fun``, the band, the linear
solver, the events, ``dense_output``, ``max_steps``, ``args``' other leaves ...) as its
key; ``jax.jit`` itself keys on the operands' shapes and dtypes. :class:`Programs` holds
the programs of the last :data:`SIZE` keys:

- ``fun`` is held weakly (the program calls it through a weak reference, and the key
  holds a weak reference whose callback marks the programs of a ``fun`` that is
  collected, dropped at the table's next use), so a closure made per call is not kept
  alive, nor the constants compiled into its program;
- no operand is held: a program keeps its executables (and the constants of the
  functions it traced), never the arrays of the call that compiled it;
- a ``jac`` or an event function is part of the key, held until its program is
  dropped (one that refers to ``fun`` keeps ``fun`` alive until then: at most
  :data:`SIZE` programs).

:func:`split_args` splits ``args``: array leaves (NumPy and JAX arrays, NumPy scalars)
are operands, the other leaves (Python numbers, strings ...) part of the key, compared
by type and value, as ``jax.jit``'s static arguments are.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar

import jax
import numpy as np

P = TypeVar("P")

#: How many programs are kept (the least recently used is dropped beyond).
SIZE = 32


def _is_operand(leaf: Any) -> bool:
    """Whether ``leaf`` of ``args`` is an operand of the program: a numeric array."""
    if isinstance(leaf, jax.Array):  # tracers are jax.Array instances too
        return True
    return isinstance(leaf, (np.ndarray, np.generic)) and np.dtype(leaf.dtype).kind in "biufc"


class Args:
    """The static part of ``args``: its tree and the leaves that are not operands (None
    where an operand goes). Hashable (the leaves by type and value) when every such
    leaf is; :meth:`rebuild` puts the operands back."""

    __slots__ = ("tree", "static", "positions")

    def __init__(self, tree: Any, static: tuple[Any, ...], positions: tuple[int, ...]):
        self.tree, self.static, self.positions = tree, static, positions

    def _key(self) -> tuple[Any, ...]:
        return (self.tree, self.positions, tuple((type(x), x) for x in self.static))

    def __hash__(self) -> int:
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Args) and self._key() == other._key()

    def rebuild(self, values: tuple[Any, ...]) -> tuple[Any, ...]:
        leaves = list(self.static)
        for i, value in zip(self.positions, values, strict=True):
            leaves[i] = value
        return jax.tree.unflatten(self.tree, leaves)


def split_args(args: tuple[Any, ...], operands: bool = True) -> tuple[Args, tuple[Any, ...]]:
    """``(static, values)``: ``args``' array leaves as the program's operands (all leaves
    static when not ``operands``)."""
    leaves, tree = jax.tree.flatten(args)
    positions = tuple(i for i, leaf in enumerate(leaves) if operands and _is_operand(leaf))
    static = tuple(None if i in positions else leaf for i, leaf in enumerate(leaves))
    return Args(tree, static, positions), tuple(leaves[i] for i in positions)


def _weakly(ref: weakref.ref) -> Callable[..., Any]:
    """The function ``ref`` refers to, called through the reference."""

    def call(*args: Any, **kwargs: Any) -> Any:
        fun = ref()
        if fun is None:  # a program only runs in a call that holds fun
            raise ReferenceError("solve_ivp: the right-hand side was garbage collected")
        return fun(*args, **kwargs)

    return call


class Programs:
    """The programs of the last ``size`` keys ``(fun, key)``, ``fun`` held weakly.

    Thread-safe (a lock around the table); a collected ``fun``'s programs are dropped at
    the next use of the table (the weak reference's callback only notes it: it may run
    at any allocation, in any thread)."""

    def __init__(self, size: int = SIZE):
        self.size = size
        self._entries: OrderedDict[tuple[Any, Any], Any] = OrderedDict()
        self._dead: list[weakref.ref] = []
        self._lock = threading.RLock()

    def __len__(self) -> int:
        with self._lock:
            self._drop_dead()
            return len(self._entries)

    def get(
        self, fun: Callable[..., Any], key: Any, make: Callable[[Callable[..., Any]], P | None]
    ) -> P | None:
        """The program of ``(fun, key)``, made by ``make(fun_by_reference)`` when it is not
        kept; None when ``fun`` or ``key`` cannot be a key (unhashable, or ``fun`` not
        weakly referable) or ``make`` returns None: the caller compiles a program of its
        own."""
        try:
            ref = weakref.ref(fun, self._dead.append)
            full = (ref, key)
            hash(full)
        except TypeError:
            return None
        with self._lock:
            self._drop_dead()
            program = self._entries.get(full)
            if program is not None:
                self._entries.move_to_end(full)
                return program
            program = make(_weakly(ref))
            if program is None:
                return None
            self._entries[full] = program
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return program

    def _drop_dead(self) -> None:
        """Drops the programs of the ``fun``s that were collected."""
        while self._dead:
            ref = self._dead.pop()
            for full in [full for full in self._entries if full[0] is ref]:
                del self._entries[full]

    def pairs(self) -> list[tuple[Any, Any]]:
        """The kept ``(weak reference to fun, key)`` pairs, least recently used first."""
        with self._lock:
            self._drop_dead()
            return list(self._entries)


#: The programs of every eager call.
PROGRAMS = Programs()
