"""Eager jaxdia.solve_ivp and odeint calls reuse their compiled program: the values of a
call (y0, t_span, t_eval, tolerances, step sizes, the arrays of args) are its operands,
so a loop of calls with one fun compiles once; results still agree with SciPy's BDF."""

import gc
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import scipy.integrate as si

import jaxdia
from jaxdia._ivp_cache import PROGRAMS, Programs
from jaxdia._ivp_problem import Problem

from .helpers import Compiles

TRACES = {"chain": 0}


def chain(t, y, k):
    """A stiff chain with a per-component rate ``k`` (an array argument)."""
    TRACES["chain"] += 1
    p = jnp.pad(y, 1)
    return -k * y + 50.0 * (p[:-2] - 2 * y + p[2:]) + jnp.sin(t)


def chain_numpy(t, y, k):
    p = np.pad(y, 1)
    return -k * y + 50.0 * (p[:-2] - 2 * y + p[2:]) + np.sin(t)


def bdf(fun, span, y0, args, rtol, atol):
    """SciPy's BDF (a scalar rtol: SciPy's Newton tolerance is of one)."""
    return si.solve_ivp(fun, span, y0, method="BDF", args=args, rtol=rtol, atol=atol)


def test_eager_calls_with_one_fun_compile_once_and_match_scipy():
    n = 8
    base = {"jac_offsets": (-1, 0, 1), "atol": 1e-9}
    k = np.linspace(1.0, 2.0, n)
    jaxdia.solve_ivp(chain, (0.0, 0.5), np.ones(n), args=(k,), rtol=1e-6, **base)
    calls = [  # (t_span, y0, args, rtol): every value changes, and rtol's shape
        ((0.5, 1.5), np.arange(1.0, n + 1), (3 * k,), 1e-5),
        ((1.0, 0.0), np.cos(np.arange(n)), (k[::-1].copy(),), np.full(n, 1e-4)),
        ((0.0, 2.0), np.ones(n), (jnp.asarray(k),), 1e-7),
    ]
    traced = TRACES["chain"]
    with Compiles() as compiles:
        results = [
            jaxdia.solve_ivp(chain, span, y0, args=args, rtol=rtol, **base)
            for span, y0, args, rtol in calls
        ]
        jax.block_until_ready(results)
    assert compiles.count == 0 and TRACES["chain"] == traced  # not even traced
    for result, (span, y0, args, rtol) in zip(results, calls, strict=True):
        ours = np.asarray(result.y[:, -1])
        theirs = bdf(chain_numpy, span, y0, (np.asarray(args[0]),), np.min(rtol), 1e-9)
        assert bool(result.success) and int(result.nsteps) == len(theirs.t) - 1
        # backward in time the stiff chain grows by 1e83, and so does the rounding of the
        # two LU factorizations (SciPy's dense, jaxdia's banded): 1.2e-9 on an AMD EPYC
        rtol = 1e-7 if span[1] < span[0] else 1e-9
        np.testing.assert_allclose(ours, theirs.y[:, -1], rtol=rtol, atol=1e-12)
    # odeint: its func (y, t order) is the key, not a wrapper made per call.
    func = lambda y, t, k: -k * y  # noqa: E731
    jaxdia.odeint(func, np.ones(3), np.linspace(0.0, 1.0, 4), args=(np.float64(2.0),))
    with Compiles() as compiles:
        ys = jaxdia.odeint(func, np.full(3, 2.0), np.linspace(0.0, 2.0, 4), args=(np.float64(3.0),))
        jax.block_until_ready(ys)
    assert compiles.count == 0
    np.testing.assert_allclose(np.asarray(ys[-1]), 2 * np.exp(-6.0), rtol=1e-5)


def kept(fun):
    """How many programs of ``fun`` are kept."""
    return sum(ref() is fun for ref, _ in PROGRAMS.pairs())


def test_a_new_fun_or_n_compiles_again_and_a_dead_fun_is_not_kept():
    fun = lambda t, y: -3.0 * y  # noqa: E731
    for n in (4, 5):  # a new fun, then a new n (its band): a program each
        with Compiles() as compiles:
            result = jaxdia.solve_ivp(fun, (0.0, 1.0), np.ones(n), jac_offsets=(0,))
        assert compiles.count >= 1
        np.testing.assert_allclose(np.asarray(result.y[:, -1]), np.exp(-3.0), rtol=1e-2)
    assert kept(fun) == 2
    alive, count = weakref.ref(fun), len(PROGRAMS)
    del fun
    gc.collect()
    assert alive() is None and len(PROGRAMS) == count - 2  # its programs dropped too


def _program_text(fun, args):
    problem = Problem(fun, (0.0, 1.0), np.ones(8), None, args, rtol=1e-6, atol=1e-9)
    program, operands, values = problem.program(1, rows=False)
    return program.lower(operands, values).as_text()


def test_an_array_argument_is_an_operand_not_a_constant():
    k = 1.0 + np.arange(8) / 7.0 + 0.0123456789  # digits no program makes itself
    digits = "1.0123456789"
    assert digits not in _program_text(chain, (k,))

    class Unhashable:  # fun cannot key a cache: a program of its own, k its constant
        def __eq__(self, other: object) -> bool:  # and so no __hash__
            return self is other

        def __call__(self, t, y, k):
            return chain(t, y, k)

    assert digits in _program_text(Unhashable(), (k,))
    result = jaxdia.solve_ivp(Unhashable(), (0.0, 1.0), np.ones(8), args=(k,), atol=1e-9)
    theirs = bdf(chain_numpy, (0.0, 1.0), np.ones(8), (k,), 1e-3, 1e-9)
    np.testing.assert_allclose(np.asarray(result.y[:, -1]), theirs.y[:, -1], rtol=1e-9)


def test_a_numpy_right_hand_side_reuses_its_program():
    k = np.linspace(1.0, 2.0, 6)
    options = {"jac_offsets": (-1, 0, 1), "rtol": 1e-6, "atol": 1e-9}
    jaxdia.solve_ivp(chain_numpy, (0.0, 0.5), np.ones(6), args=(k,), **options)
    with Compiles() as compiles:
        result = jaxdia.solve_ivp(chain_numpy, (0.0, 1.0), np.arange(6.0), args=(2 * k,), **options)
    assert compiles.count == 0
    theirs = bdf(chain_numpy, (0.0, 1.0), np.arange(6.0), (2 * k,), 1e-6, 1e-9)
    np.testing.assert_allclose(np.asarray(result.y[:, -1]), theirs.y[:, -1], rtol=1e-9)


def test_a_fun_that_reads_an_array_argument_in_python_stays_in_the_program():
    calls = 0

    def scaled(t, y, p):  # float(p[0]) needs p's value: p is closed over, not an operand
        nonlocal calls
        calls += 1
        return -float(p[0]) * y

    result = jaxdia.solve_ivp(scaled, (0.0, 1.0), np.ones(4), args=(np.array([2.0]),))
    assert calls <= 8  # traced (a host call per evaluation would be ~100)
    np.testing.assert_allclose(np.asarray(result.y[:, -1]), np.exp(-2.0), rtol=1e-2)


def test_the_table_is_bounded_weak_and_refuses_what_cannot_be_a_key():
    table = Programs(size=2)
    made = []

    def make(fun):
        made.append(fun)
        return len(made)

    funs = [lambda t, y: y for _ in range(3)]
    assert [table.get(f, "key", make) for f in funs] == [1, 2, 3]
    assert len(table) == 2 and table.get(funs[2], "key", make) == 3  # the first dropped
    assert table.get(funs[0], "key", make) == 4 and len(table) == 2  # made again
    assert table.get(funs[0], "other", make) == 5  # another key, another program
    assert made[-1](0.0, 7.0) == 7.0  # make gets fun through its weak reference
    del funs[0]
    gc.collect()
    assert len(table) == 0  # both of the collected fun's programs

    class Unhashable:
        def __eq__(self, other: object) -> bool:
            return self is other

    assert table.get(Unhashable(), "key", make) is None  # the caller compiles its own
    assert table.get(funs[1], ["unhashable key"], make) is None
    assert table.get(funs[1], "refused", lambda fun: None) is None
    assert len(made) == 5
