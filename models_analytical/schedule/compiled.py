"""How the kernel's functions are compiled: numba ``njit``, cached, most of them inlined into
their caller, and the cache stamped with every source file the kernel is compiled from.

Inlined: a call between compiled functions passing the kernel's inputs and state (some 80
arrays) costs an atomic reference count update per array on entry and again on exit, about a
microsecond, as much as a layer's whole schedule. So the schedule's stages are inlined by numba
into their caller before it is compiled (:func:`stage`); only the entry points and rarely taken
paths are calls (:func:`compiled`).

Stamped: numba stamps a cached function with its own file only, yet its compiled code holds
what it calls from other modules, so an edited stage would leave its callers' cached code stale
(the batch would go on running the old stage). A cached function of this package is stamped,
besides numba's own stamp, with the content of every module of the package and of
:mod:`dse.mapping.rules`, :mod:`dse.mapping.rows` and :mod:`dse.net.window` (whose
``dense_one``, ``row_layout`` and ``needed`` the batch calls): an edit anywhere recompiles the
kernel. This goes through numba's cache locators (``numba.core.caching``, not public API);
where they are missing the kernel still runs, stamped by numba alone, and ``tests/test_model``
fails.

Compiled once: on a cold cache, processes that reach the kernel at the same time would each
compile it (the batch with row splits the slowest, on cores they share); :func:`one_compiler`
lets one compile while the others wait, then read numba's cache.
"""

from __future__ import annotations

import fcntl
import hashlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import Any

from numba import njit
from numba.core import caching

import dse.mapping.rows
import dse.mapping.rules
import dse.net.window
from models_analytical.schedule.pipeline import KernelCompiler

PACKAGE = Path(__file__).resolve().parent


@cache
def sources_digest() -> str:
    """SHA-256 of the kernel's source files (this package's modules and the mapping rules)."""
    digest = hashlib.sha256()
    mapping = (
        Path(dse.mapping.rules.__file__),
        Path(dse.mapping.rows.__file__),
        Path(dse.net.window.__file__),
    )
    for path in (*sorted(PACKAGE.glob("*.py")), *(m.resolve() for m in mapping)):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


class KernelCacheLocator(caching._CacheLocator):
    """Where numba would cache a function of this package, stamped with numba's own stamp and
    :func:`sources_digest`."""

    def __init__(self, inner: caching._CacheLocator) -> None:
        self._inner = inner
        # numba's warning that a function cannot be cached (NUMBA_OPT=0 leaves the kernel
        # dynamic globals) names the locator's file
        self._py_file = getattr(inner, "_py_file", "")

    def get_cache_path(self) -> str:
        return self._inner.get_cache_path()

    def get_source_stamp(self) -> object:
        return (self._inner.get_source_stamp(), sources_digest())

    def get_disambiguator(self) -> str:
        return self._inner.get_disambiguator()

    @classmethod
    def from_function(cls, py_func: Callable, py_file: str) -> KernelCacheLocator | None:
        if Path(py_file).resolve().parent != PACKAGE:
            return None
        for other in LOCATORS:
            if other is not cls:
                inner = other.from_function(py_func, py_file)
                if inner is not None:
                    return cls(inner)
        return None


#: numba's cache locators, tried in order (on ``CacheImpl``, ``_CacheImpl`` in older numba)
LOCATORS: list = getattr(
    getattr(caching, "CacheImpl", None) or getattr(caching, "_CacheImpl", None),
    "_locator_classes",
    [],
)
if KernelCacheLocator not in LOCATORS:
    LOCATORS.insert(0, KernelCacheLocator)


def compiled(func: Callable | None = None, **options: Any) -> Any:
    """``numba.njit(cache=True, nogil=True, **options)``: a function of the kernel called as a
    function (``@compiled`` or ``@compiled(parallel=True)``), through the kernel's pipeline
    (:class:`~models_analytical.schedule.pipeline.KernelCompiler`)."""
    jit = njit(cache=True, **{"nogil": True, "pipeline_class": KernelCompiler, **options})
    return jit if func is None else jit(func)


def stage(func: Callable) -> Any:
    """A stage of the schedule: compiled as :func:`compiled`, inlined into every compiled
    caller (``inline="always"``); still callable from Python."""
    return compiled(func, inline="always")


def in_cache(func: Any, accept: Callable[[tuple], bool] | None = None) -> bool | None:
    """Whether numba's cache holds compiled code of ``func`` (compiled here) for its current
    sources, for argument types ``accept`` takes (default: any): a cold cache means the first
    call compiles. Reads one small index file; None where numba's cache internals
    (``_cache._cache_file._load_index``, keyed by signature first) have moved."""
    try:
        load = func._cache._cache_file._load_index
    except AttributeError:
        return None
    try:
        index = load()
    except Exception:  # noqa: BLE001 - an unreadable index: numba compiles again
        return False
    if accept is None:
        return bool(index)
    try:
        return any(accept(tuple(key[0])) for key in index)
    except (TypeError, IndexError):
        return None


@contextmanager
def one_compiler(
    func: Any, accept: Callable[[tuple], bool] | None = None, tag: str = ""
) -> Iterator[None]:
    """Run the block (the first call of ``func`` for types ``accept`` takes) holding a lock
    while numba's cache lacks that code (:func:`in_cache`): processes that reach a cold kernel
    together compile it once, the others waiting for the lock and then reading the cache. The
    lock is ``flock`` on a file beside the cache (``NAME{tag}.lock``: one per ``tag``, so a
    variant is not kept waiting for another), released when its holder ends, killed or not.
    Where the cache is warm, or no lock file can be made (no cache directory, a read-only one),
    the block runs at once."""
    if in_cache(func, accept) is not False:
        yield
        return
    try:
        lock = Path(func._cache._cache_path) / f"{func.__name__}{tag}.lock"
        fh = open(lock, "a")  # noqa: SIM115
    except (AttributeError, OSError):
        yield
        return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield
