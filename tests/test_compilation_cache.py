"""``jaxdia.enable_compilation_cache``: JAX's persistent compilation cache in one call.

The cache is process-wide state, so everything that switches it on runs in a Python
process of its own (bounded by a timeout); the argument checks raise before any state
changes and run here.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import jaxdia
from jaxdia._compilation_cache import default_cache_path

ROOT = Path(__file__).resolve().parents[1]

#: Solves a few systems (LAPACK's banded LU over XLA's FFI, a banded solve, CG) and prints
#: how many programs JAX compiled, how many went through the cache and how many it found.
SOLVES = """
import json, sys
import jax, numpy as np
jax.config.update("jax_enable_x64", True)
import jaxdia
counts = {"compiles": 0, "requests": 0, "hits": 0}
def on_event(event, **_):
    if event == "/jax/compilation_cache/compile_requests_use_cache":
        counts["requests"] += 1
    elif event == "/jax/compilation_cache/cache_hits":
        counts["hits"] += 1
def on_duration(event, duration, **_):
    if event == "/jax/core/compile/backend_compile_duration":  # every compilation, hit or not
        counts["compiles"] += 1
jax.monitoring.register_event_listener(on_event)
jax.monitoring.register_event_duration_secs_listener(on_duration)
path = jaxdia.enable_compilation_cache(sys.argv[1])
n = 12
A = jaxdia.diags([-np.ones(n - 1), 3.0 * np.ones(n), -np.ones(n - 1)], [-1, 0, 1])
b = np.arange(1.0, n + 1)
lu = jaxdia.lu_factor(A, method="lapack")  # LAPACK over XLA's FFI even at this size
factor = jax.jit(jaxdia.lu_factor, static_argnames="method")
assert "jaxdia_lapack" in factor.lower(A, method="lapack").as_text()  # an FFI custom call
x = [jaxdia.lu_solve(lu, b), jaxdia.solve_banded(A, b, method="lapack")]
x.append(jaxdia.cg(A, b, rtol=1e-12)[0])
dense = np.asarray(A.toarray())
for xi in x:
    np.testing.assert_allclose(dense @ np.asarray(xi), b, rtol=1e-9)
print(json.dumps({"path": str(path), **counts}))
"""


def _run(script: str, *args: str, **environment: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, **environment},
        check=False,
    )


def _counts(script: str, *args: str, **environment: str) -> dict:
    result = _run(script, *args, **environment)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_second_process_compiles_nothing(tmp_path):
    cache = tmp_path / "nested" / "cache"  # created by the call
    first = _counts(SOLVES, str(cache))
    assert first["path"] == str(cache)
    # Two call sites may compile the same program: the second finds the first's entry.
    assert first["compiles"] > 0 and first["hits"] < first["compiles"]
    assert first["requests"] == first["compiles"]  # every program went through the cache
    written = first["compiles"] - first["hits"]
    assert len(list(cache.iterdir())) >= written - 1  # written (some may coincide)
    second = _counts(SOLVES, str(cache))
    # the same programs, each one found on disk: nothing compiled again
    assert second["compiles"] == first["compiles"]
    assert second["hits"] == second["requests"] == second["compiles"]


def testdefault_cache_path_and_settings(tmp_path):
    script = """
import json, jax, jaxdia
path = jaxdia.enable_compilation_cache()
print(json.dumps([str(path), jax.config.jax_compilation_cache_dir,
                  jax.config.jax_persistent_cache_min_compile_time_secs,
                  jax.config.jax_persistent_cache_min_entry_size_bytes]))
"""
    environment = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "JAX_COMPILATION_CACHE_DIR": ""}
    result = _run(script, **environment)
    assert result.returncode == 0, result.stderr
    expected = str(tmp_path / "xdg" / "jaxdia" / "jax")
    assert json.loads(result.stdout) == [expected, expected, 0.0, -1]
    assert Path(expected).is_dir()


def testdefault_cache_path_precedence(monkeypatch, tmp_path):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", str(tmp_path / "jax"))
    assert default_cache_path() == tmp_path / "jax"
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "jaxdia" / "jax"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_path() == tmp_path / "home" / ".cache" / "jaxdia" / "jax"


def test_warns_when_programs_were_compiled_first(tmp_path):
    """A late call warns, and still caches the programs compiled after it; a call naming
    another directory moves the cache there."""
    script = """
import os, sys, warnings, jax, jax.numpy as jnp, jaxdia
jnp.ones(3).sum().block_until_ready()  # compiles before the cache is set
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    jaxdia.enable_compilation_cache(sys.argv[1])
    jaxdia.enable_compilation_cache(sys.argv[1])  # again, nothing compiled since: silent
(jnp.ones(3) * 2).block_until_ready()  # a new program: written to the first directory
assert os.listdir(sys.argv[1]), "nothing cached after a late call"
with warnings.catch_warnings(record=True) as moved:
    warnings.simplefilter("always")
    jaxdia.enable_compilation_cache(sys.argv[2])
(jnp.ones(4) - 1).block_until_ready()
assert os.listdir(sys.argv[2]), "nothing cached in the new directory"
for w in caught + moved:
    print(type(w.message).__name__, w.filename.endswith("<string>"), w.message)
"""
    result = _run(script, str(tmp_path / "a"), str(tmp_path / "b"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 2, result.stdout
    assert all(line.startswith("UserWarning True") for line in lines)
    assert "already compiled programs" in lines[0]
    assert f"already writes its cache to {tmp_path / 'a'}" in lines[1]
    assert str(tmp_path / "b") in lines[1]


@pytest.mark.parametrize("path", [3, b"/tmp/cache", ["/tmp/cache"]])
def test_rejects_paths_of_other_types(path):
    with pytest.raises(TypeError, match=f"path must be a str.*got {type(path).__name__}"):
        jaxdia.enable_compilation_cache(path)


def test_rejects_an_empty_path_and_a_file(tmp_path):
    with pytest.raises(ValueError, match="path must name a directory, got an empty string"):
        jaxdia.enable_compilation_cache("")
    file = tmp_path / "file"
    file.write_text("")
    with pytest.raises(ValueError, match="path must name a directory.*is a file"):
        jaxdia.enable_compilation_cache(file)


#: A diffrax solve; prints the compilations and the cache hits.
DIFFEQSOLVE = """
import json, sys
import jax, jax.numpy as jnp, jaxdia
counts = {"compiles": 0, "hits": 0}
def on_event(event, **_):
    counts["hits"] += event == "/jax/compilation_cache/cache_hits"
def on_duration(event, duration, **_):
    counts["compiles"] += event == "/jax/core/compile/backend_compile_duration"
jax.monitoring.register_event_listener(on_event)
jax.monitoring.register_event_duration_secs_listener(on_duration)
jaxdia.enable_compilation_cache(sys.argv[1])
import diffrax as dfx
solution = dfx.diffeqsolve(
    dfx.ODETerm(lambda t, y, args: -y), dfx.Kvaerno3(), 0.0, 1.0, None, jnp.ones(2),
    stepsize_controller=dfx.PIDController(rtol=1e-4, atol=1e-4),
)
assert solution.result == dfx.RESULTS.successful
print(json.dumps(counts))
"""


@pytest.mark.full
@pytest.mark.parametrize("on_error", ["raise", "nan"])
def test_diffrax_is_cached_only_without_equinox_callbacks(tmp_path, on_error):
    """docs/migration.md, "Start-up": equinox's runtime checks are host callbacks, which
    JAX never caches; EQX_ON_ERROR=nan removes them."""
    pytest.importorskip("diffrax")
    first = _counts(DIFFEQSOLVE, str(tmp_path), EQX_ON_ERROR=on_error)
    second = _counts(DIFFEQSOLVE, str(tmp_path), EQX_ON_ERROR=on_error)
    assert second["compiles"] == first["compiles"]
    missed = second["compiles"] - second["hits"]
    assert missed == (1 if on_error == "raise" else 0)  # the diffeqsolve program
