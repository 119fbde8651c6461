"""JAX's persistent compilation cache, set up in one call (``enable_compilation_cache``).

A script run repeatedly compiles the same programs in every process; JAX can keep them on
disk, but its defaults skip nearly all of jaxdia's: it writes only programs that took at
least one second to compile. How JAX's cache behaves (jax/_src/compilation_cache.py and
compiler.py, JAX 0.10):

- it opens the directory at the first compilation after a directory is set, so a call
  after some compilations still caches those that follow; the programs compiled before it
  are never written, and the next run compiles them again;
- it never writes a program with host callbacks (``jax.debug.print``,
  ``jax.pure_callback``, equinox's runtime errors: ``EQX_ON_ERROR=nan`` turns those off,
  ``docs/migration.md`` has the trade-off); jaxdia's LAPACK calls are XLA FFI custom calls,
  not callbacks, and are cached;
- entries are never evicted unless ``jax_compilation_cache_max_size`` is set.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import jax


def default_cache_path() -> Path:
    """``$JAX_COMPILATION_CACHE_DIR``, else ``jaxdia/jax`` in the user's cache directory
    (``$XDG_CACHE_HOME``, else ``~/.cache``)."""
    if configured := os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "jaxdia" / "jax"


def _as_path(path: str | os.PathLike[str] | None) -> Path:
    if path is None:
        return default_cache_path()
    if not isinstance(path, str | os.PathLike):
        raise TypeError(f"path must be a str, an os.PathLike or None, got {type(path).__name__}")
    if not os.fspath(path):
        raise ValueError("path must name a directory, got an empty string")
    return Path(path)


def enable_compilation_cache(path: str | os.PathLike[str] | None = None) -> Path:
    """Keeps every compiled program on disk, so the next run of a script compiles nothing.

    Sets JAX's persistent compilation cache: the directory, and no minimum compile time or
    size (JAX's default skips programs compiled in under a second, which is most of
    jaxdia's). Call it once, before the first computation: programs compiled before the
    call are not written. Nothing is created until it is called; the directory is created
    if missing. Programs with host callbacks (``jax.debug.print``, equinox's runtime
    checks in diffrax and optimistix unless ``EQX_ON_ERROR=nan``) are never cached
    (``docs/migration.md``, "Start-up"). The cache grows without bound: delete the
    directory to clear it, or set ``jax_compilation_cache_max_size``. Only share it with
    users you trust: loading an entry runs its code.

    Args:
      path: the cache directory; ``None`` means ``$JAX_COMPILATION_CACHE_DIR`` if set,
        else ``jaxdia/jax`` in the user's cache directory (``$XDG_CACHE_HOME`` or
        ``~/.cache``).

    Returns:
      The cache directory, absolute.

    Raises:
      TypeError: if ``path`` is not a ``str``, an ``os.PathLike`` or ``None``.
      ValueError: if ``path`` is empty or names something that is not a directory.

    Warns:
      UserWarning: if JAX has already compiled a program in this process (those programs
        are not written) or already opened another cache directory (its entries stay
        there; the new one is used from now on).

    Example:
      At the top of a script, before anything is computed:

      >>> import jaxdia
      >>> path = jaxdia.enable_compilation_cache()  # doctest: +SKIP

      (skipped here: it would switch the cache on for every later doctest).

      >>> jaxdia.enable_compilation_cache(3)
      Traceback (most recent call last):
      ...
      TypeError: path must be a str, an os.PathLike or None, got int
    """
    directory = _as_path(path).expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"path must name a directory, but {str(directory)!r} is a file")
    directory.mkdir(parents=True, exist_ok=True)

    # JAX opens the directory at the first compilation after one is set, and keeps it; it
    # has no public query of that state, so its private names are read defensively (JAX
    # 0.10 has _cache_checked; older versions mark any compilation in _cache_initialized).
    from jax._src import compilation_cache as state
    from jax.experimental.compilation_cache import compilation_cache

    opened = getattr(state, "_cache", None)
    opened_at = getattr(opened, "_path", None)
    compiled = getattr(state, "_cache_checked", getattr(state, "_cache_initialized", False))
    moved = opened is not None and Path(str(opened_at)) != directory
    if moved:
        warnings.warn(
            f"enable_compilation_cache: JAX already writes its cache to {opened_at}; "
            f"programs compiled from now on go to {directory}",
            stacklevel=2,
        )
    elif opened is None and compiled:
        warnings.warn(
            "enable_compilation_cache: JAX has already compiled programs in this process, "
            "and those are not written to the cache (the next run compiles them again): "
            "call it before the first computation",
            stacklevel=2,
        )

    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(directory))
    # JAX writes only programs compiled in at least 1 s by default; jaxdia's take less.
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    # -1: no minimum entry size, and JAX does not override it (0 lets it choose one).
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    if opened is None or moved:
        # Some JAX versions decide once, at the first compilation, that there is no cache
        # directory: the public reset makes the next compilation open this one.
        compilation_cache.reset_cache()
    return directory
